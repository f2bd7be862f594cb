#include "formats/example_scanner.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

namespace sluice {
namespace {

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLen = 2, kStartGroup = 3, kEndGroup = 4,
                           kFixed32 = 5 };
// Protobuf's default recursion limit: a record nesting groups deeper fails its parse too.
constexpr int kMaxGroupDepth = 100;

// Protobuf field numbers of example.proto.
constexpr uint32_t kExampleFeatures = 1;  // Example.features
constexpr uint32_t kFeaturesEntry = 1;    // Features.feature (map entries)
constexpr uint32_t kEntryKey = 1;
constexpr uint32_t kEntryValue = 2;
constexpr uint32_t kListValue = 1;  // BytesList/FloatList/Int64List.value

FeatureKind KindOfField(uint32_t field) {
  switch (field) {
    case 1: return FeatureKind::kBytes;
    case 2: return FeatureKind::kFloat;
    case 3: return FeatureKind::kInt64;
    default: return FeatureKind::kNone;
  }
}

uint32_t FieldOfKind(FeatureKind kind) { return static_cast<uint32_t>(kind); }

// A cursor over one message's bytes. Offsets are relative to `base` so messages nested in a record
// report positions in the record.
class WireReader {
 public:
  WireReader(std::string_view data, size_t base) : data_(data), base_(base) {}

  bool done() const { return pos_ >= data_.size(); }
  size_t position() const { return pos_; }
  size_t record_offset() const { return base_ + pos_; }
  void Seek(size_t pos) { pos_ = pos; }

  bool ReadVarint(uint64_t* v) {
    uint64_t result = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= data_.size()) return false;
      uint8_t b = static_cast<uint8_t>(data_[pos_++]);
      result |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) {
        *v = result;
        return true;
      }
    }
    return false;
  }

  // As protobuf reads a tag: at most 5 bytes, bits past the 32nd dropped.
  bool ReadTag(uint32_t* field, uint32_t* wire_type) {
    uint32_t tag = 0;
    for (int i = 0; i < 5; ++i) {
      if (pos_ >= data_.size()) return false;
      const uint8_t b = static_cast<uint8_t>(data_[pos_++]);
      tag |= static_cast<uint32_t>(b & 0x7f) << (7 * i);
      if ((b & 0x80) == 0) {
        *field = tag >> 3;
        *wire_type = tag & 7;
        return *field != 0;
      }
    }
    return false;
  }

  bool ReadLen(std::string_view* out) {
    uint64_t n;
    if (!ReadVarint(&n) || n > data_.size() - pos_) return false;
    *out = data_.substr(pos_, n);
    pos_ += n;
    return true;
  }

  bool ReadFixed32(uint32_t* v) {
    if (data_.size() - pos_ < 4) return false;
    std::memcpy(v, data_.data() + pos_, 4);  // little-endian hosts only (x86-64, aarch64)
    pos_ += 4;
    return true;
  }

  // Skips the field whose tag was just read, as protobuf skips an unknown field: a group (the
  // deprecated wire types 3 and 4) up to its matching end, nested at most kMaxGroupDepth deep.
  bool Skip(uint32_t field, uint32_t wire_type, int depth = 0) {
    uint64_t v;
    std::string_view s;
    switch (wire_type) {
      case kVarint: return ReadVarint(&v);
      case kFixed64:
        if (data_.size() - pos_ < 8) return false;
        pos_ += 8;
        return true;
      case kLen: return ReadLen(&s);
      case kFixed32:
        if (data_.size() - pos_ < 4) return false;
        pos_ += 4;
        return true;
      case kStartGroup:
        if (depth >= kMaxGroupDepth) return false;
        for (;;) {
          uint32_t inner_field, inner_type;
          if (!ReadTag(&inner_field, &inner_type)) return false;
          if (inner_type == kEndGroup) return inner_field == field;
          if (!Skip(inner_field, inner_type, depth + 1)) return false;
        }
      default: return false;
    }
  }

 private:
  std::string_view data_;
  size_t base_;
  size_t pos_ = 0;
};

Status Malformed(std::string_view what, size_t offset) {
  return DataLoss("malformed tf.train.Example: " + std::string(what) + " at byte " +
                  std::to_string(offset));
}

// Visits the values of one BytesList/FloatList/Int64List message.
Status VisitList(std::string_view list, size_t base, FeatureKind kind, FeatureValueVisitor& v,
                 bool* stop) {
  WireReader r(list, base);
  while (!r.done()) {
    size_t at = r.record_offset();
    uint32_t field, wt;
    if (!r.ReadTag(&field, &wt)) return Malformed("bad tag in value list", at);
    if (field != kListValue) {
      if (!r.Skip(field, wt)) return Malformed("bad unknown field in value list", at);
      continue;
    }
    switch (kind) {
      case FeatureKind::kBytes: {
        std::string_view s;
        if (wt != kLen) {
          if (!r.Skip(field, wt)) return Malformed("bad field in bytes_list", at);
          continue;
        }
        if (!r.ReadLen(&s)) return Malformed("bytes value runs past its end", at);
        if (!v.OnBytes(s)) *stop = true;
        break;
      }
      case FeatureKind::kInt64: {
        if (wt == kVarint) {
          uint64_t x;
          if (!r.ReadVarint(&x)) return Malformed("bad varint in int64_list", at);
          if (!v.OnInt64(static_cast<int64_t>(x))) *stop = true;
        } else if (wt == kLen) {
          std::string_view packed;
          if (!r.ReadLen(&packed)) return Malformed("packed int64_list runs past its end", at);
          WireReader p(packed, 0);
          while (!p.done() && !*stop) {
            uint64_t x;
            if (!p.ReadVarint(&x)) return Malformed("bad varint in packed int64_list", at);
            if (!v.OnInt64(static_cast<int64_t>(x))) *stop = true;
          }
        } else if (!r.Skip(field, wt)) {
          return Malformed("bad field in int64_list", at);
        }
        break;
      }
      case FeatureKind::kFloat: {
        if (wt == kFixed32) {
          uint32_t bits;
          if (!r.ReadFixed32(&bits)) return Malformed("float runs past its end", at);
          float f;
          std::memcpy(&f, &bits, 4);
          if (!v.OnFloat(f)) *stop = true;
        } else if (wt == kLen) {
          std::string_view packed;
          if (!r.ReadLen(&packed)) return Malformed("packed float_list runs past its end", at);
          if (packed.size() % 4 != 0) return Malformed("packed float_list length not a multiple of 4", at);
          for (size_t i = 0; i < packed.size() && !*stop; i += 4) {
            float f;
            std::memcpy(&f, packed.data() + i, 4);
            if (!v.OnFloat(f)) *stop = true;
          }
        } else if (!r.Skip(field, wt)) {
          return Malformed("bad field in float_list", at);
        }
        break;
      }
      case FeatureKind::kNone: break;
    }
    if (*stop) return Status::OK();
  }
  return Status::OK();
}

}  // namespace

std::string_view FeatureKindName(FeatureKind kind) {
  switch (kind) {
    case FeatureKind::kBytes: return "bytes_list";
    case FeatureKind::kFloat: return "float_list";
    case FeatureKind::kInt64: return "int64_list";
    case FeatureKind::kNone: return "none";
  }
  return "none";
}

// entry_ was validated by FeatureScanner::ParseEntry, so its value fields and their Feature fields
// are well-formed; only the lists' contents are checked here.
Status FeatureView::Visit(FeatureValueVisitor& visitor) const {
  if (kind_ == FeatureKind::kNone) return Status::OK();
  WireReader entry(entry_, 0);
  entry.Seek(start_value_);
  bool stop = false;
  bool first_value = true;
  while (!entry.done() && !stop) {
    uint32_t field = 0, wt = 0;
    entry.ReadTag(&field, &wt);
    std::string_view value;
    if (field != kEntryValue || wt != kLen) {
      entry.Skip(field, wt);
      continue;
    }
    entry.ReadLen(&value);
    WireReader feature(value, 0);
    if (first_value) feature.Seek(start_list_);
    first_value = false;
    while (!feature.done() && !stop) {
      uint32_t f = 0, w = 0;
      feature.ReadTag(&f, &w);
      std::string_view list;
      if (f != FieldOfKind(kind_) || w != kLen) {
        feature.Skip(f, w);
        continue;
      }
      feature.ReadLen(&list);
      RETURN_IF_ERROR(VisitList(list, 0, kind_, visitor, &stop));
    }
  }
  return Status::OK();
}

Result<size_t> FeatureView::Count() const {
  struct Counter : FeatureValueVisitor {
    size_t n = 0;
    bool OnBytes(std::string_view) override { ++n; return true; }
    bool OnFloat(float) override { ++n; return true; }
    bool OnInt64(int64_t) override { ++n; return true; }
  } counter;
  RETURN_IF_ERROR(Visit(counter));
  return counter.n;
}

Result<std::string_view> FeatureView::FirstBytes(std::string_view key) const {
  if (kind_ != FeatureKind::kBytes) {
    return InvalidArgument("feature '" + std::string(key) + "' is " +
                           std::string(FeatureKindName(kind_)) + ", expected bytes_list");
  }
  struct First : FeatureValueVisitor {
    std::string_view value;
    bool found = false;
    bool OnBytes(std::string_view s) override { value = s; found = true; return false; }
  } first;
  RETURN_IF_ERROR(Visit(first));
  if (!first.found) return InvalidArgument("feature '" + std::string(key) + "' has no value");
  return first.value;
}

Result<int64_t> FeatureView::FirstInt64(std::string_view key) const {
  if (kind_ != FeatureKind::kInt64) {
    return InvalidArgument("feature '" + std::string(key) + "' is " +
                           std::string(FeatureKindName(kind_)) + ", expected int64_list");
  }
  struct First : FeatureValueVisitor {
    int64_t value = 0;
    bool found = false;
    bool OnInt64(int64_t v) override { value = v; found = true; return false; }
  } first;
  RETURN_IF_ERROR(Visit(first));
  if (!first.found) return InvalidArgument("feature '" + std::string(key) + "' has no value");
  return first.value;
}

// A map entry is a message {key = 1; value = 2}. A repeated key field keeps the last; repeated
// value fields merge as messages do, so the Feature's kind is the last oneof field seen across
// all of them and its values are those from that field's final run on.
Status FeatureScanner::ParseEntry(std::string_view entry, size_t entry_offset,
                                  std::string_view* key, FeatureView* feature) {
  *key = {};
  *feature = FeatureView();
  feature->entry_ = entry;
  WireReader r(entry, entry_offset);
  while (!r.done()) {
    size_t field_start = r.position();
    size_t at = r.record_offset();
    uint32_t field, wt;
    if (!r.ReadTag(&field, &wt)) return Malformed("bad tag in feature map entry", at);
    if (field == kEntryKey && wt == kLen) {
      if (!r.ReadLen(key)) return Malformed("feature key runs past its end", at);
      continue;
    }
    if (field != kEntryValue || wt != kLen) {
      if (!r.Skip(field, wt)) return Malformed("bad field in feature map entry", at);
      continue;
    }
    std::string_view value;
    if (!r.ReadLen(&value)) return Malformed("feature value runs past its end", at);
    size_t value_base = r.record_offset() - value.size();
    WireReader f(value, value_base);
    while (!f.done()) {
      size_t list_start = f.position();
      size_t fat = f.record_offset();
      uint32_t ff, fwt;
      if (!f.ReadTag(&ff, &fwt)) return Malformed("bad tag in Feature", fat);
      FeatureKind kind = KindOfField(ff);
      if (kind == FeatureKind::kNone || fwt != kLen) {
        if (!f.Skip(ff, fwt)) return Malformed("bad field in Feature", fat);
        continue;
      }
      std::string_view list;
      if (!f.ReadLen(&list)) return Malformed("value list runs past its end", fat);
      if (kind != feature->kind_) {
        feature->kind_ = kind;
        feature->start_value_ = field_start;
        feature->start_list_ = list_start;
      }
    }
  }
  return Status::OK();
}

Status FeatureScanner::ForEach(std::string_view record, FeatureEntryVisitor& visitor) {
  WireReader example(record, 0);
  while (!example.done()) {
    size_t at = example.record_offset();
    uint32_t field, wt;
    if (!example.ReadTag(&field, &wt)) return Malformed("bad tag", at);
    if (field != kExampleFeatures || wt != kLen) {
      if (!example.Skip(field, wt)) return Malformed("bad field", at);
      continue;
    }
    std::string_view features;
    if (!example.ReadLen(&features)) return Malformed("features run past the record's end", at);
    WireReader fr(features, example.record_offset() - features.size());
    while (!fr.done()) {
      size_t eat = fr.record_offset();
      uint32_t ef, ewt;
      if (!fr.ReadTag(&ef, &ewt)) return Malformed("bad tag in Features", eat);
      if (ef != kFeaturesEntry || ewt != kLen) {
        if (!fr.Skip(ef, ewt)) return Malformed("bad field in Features", eat);
        continue;
      }
      std::string_view entry;
      if (!fr.ReadLen(&entry)) return Malformed("feature map entry runs past its end", eat);
      std::string_view key;
      FeatureView view;
      RETURN_IF_ERROR(ParseEntry(entry, fr.record_offset() - entry.size(), &key, &view));
      visitor.OnFeature(key, view);
    }
  }
  return Status::OK();
}

Status FeatureScanner::Find(std::string_view record, std::string_view key, FeatureView* feature,
                            bool* found) {
  *found = false;
  return ForEachFeature(record, [&](std::string_view k, const FeatureView& v) {
    if (k == key) {
      *feature = v;
      *found = true;
    }
  });
}

std::string DescribeKeys(std::string_view record) {
  constexpr size_t kMaxKeys = 16;
  constexpr size_t kMaxKeyChars = 64;
  std::vector<std::string_view> keys;
  bool more = false;
  // A malformed record still shows the keys before the damage.
  (void)ForEachFeature(record, [&](std::string_view key, const FeatureView&) {
    if (std::find(keys.begin(), keys.end(), key) != keys.end()) return;
    if (keys.size() == kMaxKeys) {
      more = true;
      return;
    }
    keys.push_back(key);
  });
  if (keys.empty()) return "(none)";
  std::string out;
  for (std::string_view key : keys) {
    if (!out.empty()) out += ", ";
    for (char c : key.substr(0, kMaxKeyChars)) out += (c >= ' ' && c <= '~') ? c : '?';
    if (key.size() > kMaxKeyChars) out += "...";
  }
  if (more) out += ", ...";
  return out;
}

Status ExampleScanner::Scan(std::string_view record, std::string_view* image,
                            int64_t* label) const {
  FeatureView image_feature, label_feature;
  bool have_image = false, have_label = false;
  RETURN_IF_ERROR(ForEachFeature(record, [&](std::string_view key, const FeatureView& v) {
    if (key == image_key_) {
      image_feature = v;
      have_image = true;
    } else if (key == label_key_ && !label_key_.empty()) {
      label_feature = v;
      have_label = true;
    }
  }));
  if (!have_image) {
    return InvalidArgument("feature '" + image_key_ +
                           "' missing from record; its keys: " + DescribeKeys(record));
  }
  if (label_key_.empty()) {
    *label = 0;
  } else if (!have_label) {
    return InvalidArgument("feature '" + label_key_ +
                           "' missing from record; its keys: " + DescribeKeys(record));
  }
  ASSIGN_OR_RETURN(*image, image_feature.FirstBytes(image_key_));
  if (label_key_.empty()) return Status::OK();
  ASSIGN_OR_RETURN(*label, label_feature.FirstInt64(label_key_));
  return Status::OK();
}

}  // namespace sluice
