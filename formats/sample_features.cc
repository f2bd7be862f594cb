#include "formats/sample_features.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstring>
#include <functional>
#include <span>
#include <system_error>
#include <utility>

#include "formats/example_scanner.h"

namespace sluice {

void SampleFeatures::Reset(size_t count) {
  arrays.resize(count);
  for (FeatureValues& a : arrays) a.Clear();
}

void SampleFeatures::SetEmpty(const FeatureSchema& schema) {
  Reset(schema.array_count());
  for (size_t i = 0; i < schema.columns.size(); ++i) {
    const FeatureColumn& c = schema.columns[i];
    if (c.ragged()) continue;
    FeatureValues& a = arrays[i];
    a.rows = 1;
    const size_t values = static_cast<size_t>(c.row_values());
    if (c.type == FeatureType::kBytes) {
      a.sizes.assign(values, 0);
    } else {
      a.data.assign(values * (c.output_type() == FeatureType::kInt64 ? 8 : 4), '\0');
    }
  }
}

int64_t SampleFeatures::bytes() const {
  int64_t total = 0;
  for (const FeatureValues& a : arrays) total += a.bytes();
  return total;
}

void FeatureValues::Shrink() {
  if (data.capacity() > data.size()) std::string(data).swap(data);
  if (sizes.capacity() > sizes.size()) std::vector<uint32_t>(sizes).swap(sizes);
}

int64_t SampleFeatures::capacity_bytes() const {
  int64_t total = 0;
  for (const FeatureValues& a : arrays) total += a.capacity_bytes();
  return total;
}

void SampleFeatures::TrimTo(int64_t bytes) {
  int64_t held = capacity_bytes();
  if (held <= bytes) return;
  std::vector<std::pair<int64_t, size_t>> spare;  // (spare capacity, array), most first
  spare.reserve(arrays.size());
  for (size_t i = 0; i < arrays.size(); ++i) {
    const int64_t s = arrays[i].capacity_bytes() - arrays[i].bytes();
    if (s > 0) spare.emplace_back(s, i);
  }
  std::sort(spare.begin(), spare.end(), std::greater<>());
  for (const auto& [s, i] : spare) {
    if (held <= bytes) return;
    const int64_t before = arrays[i].capacity_bytes();
    arrays[i].Shrink();
    held -= before - arrays[i].capacity_bytes();
  }
}

int64_t SampleFeatures::ragged_bytes(const FeatureSchema& schema) const {
  int64_t total = 0;
  for (size_t i = 0; i < arrays.size(); ++i) {
    const bool fixed = i < schema.columns.size() && !schema.columns[i].ragged() &&
                       schema.columns[i].type != FeatureType::kBytes;
    if (!fixed) total += arrays[i].bytes();
  }
  return total;
}

namespace {

FeatureKind KindOf(FeatureType type) {
  switch (type) {
    case FeatureType::kInt64:
      return FeatureKind::kInt64;
    case FeatureType::kFloat:
      return FeatureKind::kFloat;
    case FeatureType::kBytes:
      return FeatureKind::kBytes;
  }
  return FeatureKind::kNone;
}

const char* ShapeName(FeatureShape shape) {
  switch (shape) {
    case FeatureShape::kList:
      return "FEATURE_SHAPE_LIST";
    case FeatureShape::kScalar:
      return "FEATURE_SHAPE_SCALAR";
    case FeatureShape::kFixed:
      return "FEATURE_SHAPE_FIXED";
    case FeatureShape::kMultiHot:
      return "FEATURE_SHAPE_MULTI_HOT";
  }
  return "FEATURE_SHAPE_UNKNOWN";
}

std::string Quoted(std::string_view key) { return "'" + std::string(key) + "'"; }

// A coordinate as written: the shortest form that reads back the same float.
std::string Number(float v) {
  char buf[32];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc() ? std::string(buf, end) : std::to_string(v);
}

// A feature of the record as the walk left it: protobuf's last entry of its key.
struct Found {
  FeatureView view;
  bool present = false;
  // No values of any kind: missing from the record, or a Feature with no list set (which
  // tf.io.parse_example also reads as missing).
  bool missing() const { return !present || view.kind() == FeatureKind::kNone; }
};

// The bytes a record's ragged values take (SampleFeatures::ragged_bytes, counted as they are
// read), against max_feature_bytes: once over, values are counted but no longer stored, so a
// hostile record costs no more memory than the bound.
struct Budget {
  int64_t max = 0;
  int64_t used = 0;
  std::string_view over_at;  // the key whose values went over
  bool over() const { return used > max; }
  bool Take(int64_t bytes, std::string_view key) {
    used += bytes;
    if (over() && over_at.empty()) over_at = key;
    return !over();
  }
};

template <typename T>
void AppendValue(std::string* data, T v) {
  data->append(reinterpret_cast<const char*>(&v), sizeof v);
}

// Appends a feature's values to one array: at most `limit` of them (the rest only counted, for
// the message that says how many there were), each counted in *budget when it is given.
class Appender final : public FeatureValueVisitor {
 public:
  Appender(FeatureValues* out, size_t limit, Budget* budget, std::string_view key)
      : out_(out), limit_(limit), budget_(budget), key_(key) {}

  bool OnBytes(std::string_view s) override {
    if (Take(static_cast<int64_t>(s.size() + sizeof(uint32_t)))) {
      out_->data.append(s);
      out_->sizes.push_back(static_cast<uint32_t>(s.size()));
    }
    return true;
  }
  bool OnFloat(float v) override {
    if (Take(sizeof v)) AppendValue(&out_->data, v);
    return true;
  }
  bool OnInt64(int64_t v) override {
    if (Take(sizeof v)) AppendValue(&out_->data, v);
    return true;
  }
  size_t count() const { return count_; }

 private:
  bool Take(int64_t bytes) {
    ++count_;
    if (count_ > limit_) return false;
    return budget_ == nullptr || budget_->Take(bytes, key_);
  }

  FeatureValues* out_;
  size_t limit_;
  Budget* budget_;
  std::string_view key_;
  size_t count_ = 0;
};

// Sets a MULTI_HOT row's 1s; stops at the first index outside [0, length).
class MultiHotSetter final : public FeatureValueVisitor {
 public:
  MultiHotSetter(char* row, int32_t length) : row_(row), length_(length) {}
  bool OnInt64(int64_t v) override {
    if (v < 0 || v >= length_) {
      bad_ = true;
      bad_index_ = v;
      return false;
    }
    constexpr float kOne = 1.0f;
    std::memcpy(row_ + static_cast<size_t>(v) * sizeof kOne, &kOne, sizeof kOne);
    return true;
  }
  bool bad() const { return bad_; }
  int64_t bad_index() const { return bad_index_; }

 private:
  char* row_;
  int32_t length_;
  bool bad_ = false;
  int64_t bad_index_ = 0;
};

// Writes one coordinate list into every box's row of four floats (column `k`), through memcpy:
// the rows are a string's bytes.
class BoxColumnWriter final : public FeatureValueVisitor {
 public:
  BoxColumnWriter(char* boxes, size_t count, int k) : boxes_(boxes), count_(count), k_(k) {}
  bool OnFloat(float v) override {
    if (i_ >= count_) return false;  // counted before: cannot happen
    std::memcpy(boxes_ + (i_++ * 4 + k_) * sizeof v, &v, sizeof v);
    return true;
  }

 private:
  char* boxes_;
  size_t count_;
  int k_;
  size_t i_ = 0;
};

Status KindError(std::string_view key, FeatureKind found, FeatureKind expected) {
  return InvalidArgument("feature " + Quoted(key) + " is " + std::string(FeatureKindName(found)) +
                         ", expected " + std::string(FeatureKindName(expected)));
}

// Visits a feature's values; a malformed list names its key.
Status VisitValues(std::string_view key, const FeatureView& view, FeatureValueVisitor& visitor) {
  Status s = view.Visit(visitor);
  return s.ok() ? s : s.WithContext("feature " + Quoted(key));
}

Status ExtractColumn(const FeatureColumn& c, const Found& f, std::string_view record,
                     Budget* budget, FeatureValues* out) {
  const size_t values = static_cast<size_t>(c.row_values());
  // Bytes values are ragged whatever the shape: they count against max_feature_bytes.
  Budget* counted = c.ragged() || c.type == FeatureType::kBytes ? budget : nullptr;
  if (f.missing()) {
    if (c.shape == FeatureShape::kList) return Status::OK();  // an empty row
    out->rows = 1;
    if (c.default_value) {
      for (size_t i = 0; i < values; ++i) {
        if (c.type == FeatureType::kInt64) {
          AppendValue(&out->data, static_cast<int64_t>(*c.default_value));
        } else {
          AppendValue(&out->data, static_cast<float>(*c.default_value));
        }
      }
      return Status::OK();
    }
    if (c.default_bytes) {
      Appender append(out, values, counted, c.key);
      for (size_t i = 0; i < values; ++i) append.OnBytes(*c.default_bytes);
      return Status::OK();
    }
    if (c.allow_missing) {
      out->data.assign(values * sizeof(float), '\0');
      return Status::OK();
    }
    std::string needs;
    switch (c.shape) {
      case FeatureShape::kScalar:
        needs = "its one value (or a default)";
        break;
      case FeatureShape::kFixed:
        needs = "its " + std::to_string(c.length) + " values (or a default)";
        break;
      default:
        needs = "its list of class indices (or allow_missing, for all 0)";
        break;
    }
    return InvalidArgument(
        "feature " + Quoted(c.key) +
        (f.present ? " has no value list (none of bytes_list, float_list, int64_list)"
                   : " missing from record") +
        "; " + ShapeName(c.shape) + " needs " + needs + "; its keys: " + DescribeKeys(record));
  }
  const FeatureKind expected = KindOf(c.type);
  if (f.view.kind() != expected) return KindError(c.key, f.view.kind(), expected);
  if (c.shape == FeatureShape::kMultiHot) {
    out->rows = 1;
    out->data.assign(values * sizeof(float), '\0');
    MultiHotSetter set(out->data.data(), c.length);
    RETURN_IF_ERROR(VisitValues(c.key, f.view, set));
    if (set.bad()) {
      return InvalidArgument("feature " + Quoted(c.key) + " has class index " +
                             std::to_string(set.bad_index()) + ", outside [0, " +
                             std::to_string(c.length) + ") (FEATURE_SHAPE_MULTI_HOT length " +
                             std::to_string(c.length) + ")");
    }
    return Status::OK();
  }
  Appender append(out, c.ragged() ? SIZE_MAX : values, counted, c.key);
  RETURN_IF_ERROR(VisitValues(c.key, f.view, append));
  if (c.ragged()) {
    out->rows = static_cast<uint32_t>(append.count());
    return Status::OK();
  }
  if (append.count() != values) {
    return InvalidArgument(
        "feature " + Quoted(c.key) + " has " + std::to_string(append.count()) + " value" +
        (append.count() == 1 ? "" : "s") + ", expected " + std::to_string(values) + " (" +
        ShapeName(c.shape) +
        (c.shape == FeatureShape::kFixed ? " length " + std::to_string(c.length) : "") + ")");
  }
  out->rows = 1;
  return Status::OK();
}

// The boxes' five lists, in BoxColumns order: xmin, ymin, xmax, ymax, label.
Status ExtractBoxes(const BoxColumns& b, const Found* const lists[5], Budget* budget,
                    FeatureValues* boxes, FeatureValues* labels) {
  const std::string_view keys[5] = {b.xmin_key, b.ymin_key, b.xmax_key, b.ymax_key, b.label_key};
  size_t counts[5] = {};
  for (int k = 0; k < 5; ++k) {
    const Found& f = *lists[k];
    if (f.missing()) continue;
    const FeatureKind expected = k < 4 ? FeatureKind::kFloat : FeatureKind::kInt64;
    if (f.view.kind() != expected) return KindError(keys[k], f.view.kind(), expected);
    Result<size_t> count = f.view.Count();
    if (!count.ok()) return count.status().WithContext("feature " + Quoted(keys[k]));
    counts[k] = *count;
  }
  const size_t n = counts[0];
  for (int k = 1; k < 4; ++k) {
    if (counts[k] != n) {
      return InvalidArgument("box coordinate lists differ in length: feature " + Quoted(keys[0]) +
                             " has " + std::to_string(n) + " values, " + Quoted(keys[k]) + " has " +
                             std::to_string(counts[k]));
    }
  }
  if (!lists[4]->missing() && counts[4] != n) {
    return InvalidArgument("feature " + Quoted(keys[4]) + " has " + std::to_string(counts[4]) +
                           " labels for " + std::to_string(n) + " boxes");
  }
  if (n > static_cast<size_t>(b.max_boxes)) {
    return InvalidArgument("feature " + Quoted(keys[0]) + " has " + std::to_string(n) +
                           " boxes, over boxes.max_boxes " + std::to_string(b.max_boxes));
  }
  boxes->rows = labels->rows = static_cast<uint32_t>(n);
  const int64_t bytes = static_cast<int64_t>(n * (4 * sizeof(float) + sizeof(int64_t)));
  if (!budget->Take(bytes, keys[0])) return Status::OK();  // refused by the caller
  boxes->data.assign(n * 4 * sizeof(float), '\0');
  char* rows = boxes->data.data();
  for (int k = 0; k < 4 && n > 0; ++k) {
    BoxColumnWriter write(rows, n, k);
    RETURN_IF_ERROR(VisitValues(keys[k], lists[k]->view, write));
  }
  static constexpr const char* kCoordinate[4] = {"xmin", "ymin", "xmax", "ymax"};
  for (size_t i = 0; i < n; ++i) {
    float box[4];
    std::memcpy(box, rows + i * sizeof box, sizeof box);
    for (int k = 0; k < 4; ++k) {
      if (!std::isfinite(box[k])) {
        return InvalidArgument("box " + std::to_string(i) + " of " + std::to_string(n) + ": " +
                               kCoordinate[k] + " " + Number(box[k]) + " (feature " +
                               Quoted(keys[k]) + ") is not a finite coordinate");
      }
      box[k] = std::clamp(box[k], 0.0f, 1.0f);
    }
    for (int k = 0; k < 2; ++k) {
      if (box[k] > box[k + 2]) {
        return InvalidArgument("box " + std::to_string(i) + " of " + std::to_string(n) + ": " +
                               kCoordinate[k] + " " + Number(box[k]) + " > " + kCoordinate[k + 2] +
                               " " + Number(box[k + 2]) + " (features " + Quoted(keys[k]) + ", " +
                               Quoted(keys[k + 2]) + "; clamped to [0, 1])");
      }
    }
    std::memcpy(rows + i * sizeof box, box, sizeof box);
  }
  if (lists[4]->missing()) {
    labels->data.assign(n * sizeof(int64_t), '\0');
    return Status::OK();
  }
  labels->data.reserve(n * sizeof(int64_t));
  Appender append(labels, n, nullptr, keys[4]);
  return VisitValues(keys[4], lists[4]->view, append);
}

// Walks the record once, keeping the last entry of each wanted key.
class KeyCollector final : public FeatureEntryVisitor {
 public:
  KeyCollector(const std::vector<std::string>& keys, std::span<Found> found)
      : keys_(keys), found_(found) {}
  void OnFeature(std::string_view key, const FeatureView& feature) override {
    for (size_t i = 0; i < keys_.size(); ++i) {
      if (keys_[i] == key) {
        found_[i].view = feature;
        found_[i].present = true;
        return;
      }
    }
  }

 private:
  const std::vector<std::string>& keys_;
  std::span<Found> found_;
};

// Keys looked up without a heap allocation per record.
constexpr size_t kStackKeys = 32;

}  // namespace

FeatureExtractor::FeatureExtractor(const FeatureSchema& schema) : schema_(schema) {
  auto index = [this](const std::string& key) {
    auto it = std::find(keys_.begin(), keys_.end(), key);
    if (it == keys_.end()) it = keys_.insert(keys_.end(), key);
    return static_cast<size_t>(it - keys_.begin());
  };
  for (const FeatureColumn& c : schema.columns) column_keys_.push_back(index(c.key));
  if (schema.boxes.enabled) {
    const BoxColumns& b = schema.boxes;
    for (const std::string* key :
         {&b.xmin_key, &b.ymin_key, &b.xmax_key, &b.ymax_key, &b.label_key}) {
      box_keys_.push_back(index(*key));
    }
  }
}

Status FeatureExtractor::Extract(std::string_view record, SampleFeatures* out) const {
  out->Reset(schema_.array_count());
  std::array<Found, kStackKeys> on_stack;
  std::vector<Found> on_heap;
  std::span<Found> found(on_stack.data(), std::min(keys_.size(), kStackKeys));
  if (keys_.size() > kStackKeys) {
    on_heap.resize(keys_.size());
    found = on_heap;
  }
  KeyCollector collect(keys_, found);
  RETURN_IF_ERROR(FeatureScanner::ForEach(record, collect));

  Budget budget{schema_.max_feature_bytes};
  for (size_t i = 0; i < schema_.columns.size(); ++i) {
    RETURN_IF_ERROR(ExtractColumn(schema_.columns[i], found[column_keys_[i]], record, &budget,
                                  &out->arrays[i]));
  }
  if (schema_.boxes.enabled) {
    const Found* lists[5];
    for (int k = 0; k < 5; ++k) lists[k] = &found[box_keys_[k]];
    const size_t at = schema_.boxes_index();
    RETURN_IF_ERROR(
        ExtractBoxes(schema_.boxes, lists, &budget, &out->arrays[at], &out->arrays[at + 1]));
  }
  if (budget.over()) {
    return InvalidArgument("the record's features take " + std::to_string(budget.used) +
                           " bytes, over max_feature_bytes " + std::to_string(budget.max) +
                           " (lists, bytes values and boxes count; over from feature " +
                           Quoted(budget.over_at) + " on)");
  }
  return Status::OK();
}

}  // namespace sluice
