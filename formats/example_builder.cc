#include "formats/example_builder.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>

namespace sluice {
namespace {

size_t VarintSize(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

void PutVarint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

// A length-delimited field's tag (field number < 16) and length.
void PutHeader(int field, size_t length, std::string* out) {
  out->push_back(static_cast<char>((field << 3) | 2));
  PutVarint(length, out);
}

size_t FieldSize(size_t length) { return 1 + VarintSize(length) + length; }

}  // namespace

void ExampleBuilder::AddBytes(std::string_view key, std::string_view value) {
  Feature f;
  f.key = key;
  f.list = 1;
  f.bytes = value;
  features_.push_back(std::move(f));
}

void ExampleBuilder::AddInt64s(std::string_view key, std::vector<int64_t> values) {
  Feature f;
  f.key = key;
  f.list = 3;
  f.int64s = std::move(values);
  features_.push_back(std::move(f));
}

void ExampleBuilder::AddFloats(std::string_view key, std::vector<float> values) {
  Feature f;
  f.key = key;
  f.list = 2;
  f.floats = std::move(values);
  features_.push_back(std::move(f));
}

void ExampleBuilder::Finish(std::string* out) { Write(std::nullopt, 0, out); }

char* ExampleBuilder::FinishWithTrailingBytes(std::string_view key, size_t length,
                                              std::string* out) {
  const size_t at = Write(key, length, out);
  return out->data() + at;
}

size_t ExampleBuilder::Write(std::optional<std::string_view> trailing_key, size_t trailing_length,
                             std::string* out) {
  // Key order; of a key added twice the last one; none under the trailing key.
  std::stable_sort(features_.begin(), features_.end(),
                   [](const Feature& a, const Feature& b) { return a.key < b.key; });
  std::vector<Feature*> kept;
  for (size_t i = 0; i < features_.size(); ++i) {
    if (i + 1 < features_.size() && features_[i + 1].key == features_[i].key) continue;
    if (trailing_key && features_[i].key == *trailing_key) continue;
    kept.push_back(&features_[i]);
  }
  // Sizes from the inside out: list payload, list, Feature, map entry.
  struct Sizes {
    size_t payload, list, feature, entry;
  };
  std::vector<Sizes> sizes;
  size_t features_size = 0;
  for (const Feature* f : kept) {
    Sizes s{};
    if (f->list == 1) {
      s.payload = f->bytes.size();
      s.list = FieldSize(s.payload);  // BytesList.value (1)
    } else if (f->list == 2) {
      s.payload = f->floats.size() * 4;
      s.list = f->floats.empty() ? 0 : FieldSize(s.payload);  // FloatList.value (1), packed
    } else {
      s.payload = 0;
      for (int64_t v : f->int64s) s.payload += VarintSize(static_cast<uint64_t>(v));
      s.list = f->int64s.empty() ? 0 : FieldSize(s.payload);  // Int64List.value (1), packed
    }
    s.feature = FieldSize(s.list);                              // Feature.{bytes,float,int64}_list
    s.entry = FieldSize(f->key.size()) + FieldSize(s.feature);  // map entry: key (1), value (2)
    features_size += FieldSize(s.entry);                        // Features.feature (1)
    sizes.push_back(s);
  }
  Sizes trailing{};
  if (trailing_key) {
    trailing.payload = trailing_length;
    trailing.list = FieldSize(trailing.payload);
    trailing.feature = FieldSize(trailing.list);
    trailing.entry = FieldSize(trailing_key->size()) + FieldSize(trailing.feature);
    features_size += FieldSize(trailing.entry);
  }
  out->clear();
  out->reserve(FieldSize(features_size));
  PutHeader(1, features_size, out);  // Example.features (1)
  for (size_t i = 0; i < kept.size(); ++i) {
    const Feature& f = *kept[i];
    const Sizes& s = sizes[i];
    PutHeader(1, s.entry, out);
    PutHeader(1, f.key.size(), out);
    out->append(f.key);
    PutHeader(2, s.feature, out);
    PutHeader(f.list, s.list, out);
    if (s.list == 0) continue;
    PutHeader(1, s.payload, out);
    if (f.list == 1) {
      out->append(f.bytes);
    } else if (f.list == 2) {
      for (float v : f.floats) {
        char b[4];
        std::memcpy(b, &v, 4);  // little-endian hosts only, as the scanner assumes
        out->append(b, 4);
      }
    } else {
      for (int64_t v : f.int64s) PutVarint(static_cast<uint64_t>(v), out);
    }
  }
  size_t at = out->size();
  if (trailing_key) {
    PutHeader(1, trailing.entry, out);
    PutHeader(1, trailing_key->size(), out);
    out->append(*trailing_key);
    PutHeader(2, trailing.feature, out);
    PutHeader(1, trailing.list, out);  // Feature.bytes_list
    PutHeader(1, trailing.payload, out);
    at = out->size();
    out->resize(at + trailing_length);  // within the capacity reserved above
  }
  features_.clear();
  return at;
}

}  // namespace sluice
