#include "formats/example_builder.h"

#include <algorithm>
#include <cstring>
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

char* PutVarint(uint64_t v, char* p) {
  while (v >= 0x80) {
    *p++ = static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  *p++ = static_cast<char>(v);
  return p;
}

// A length-delimited field's tag (field number < 16) and length.
char* PutHeader(int field, size_t length, char* p) {
  *p++ = static_cast<char>((field << 3) | 2);
  return PutVarint(length, p);
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

void ExampleBuilder::AddBytesInPlace(std::string_view key, size_t size) {
  Feature f;
  f.key = key;
  f.list = 1;
  f.in_place = true;
  f.in_place_size = size;
  features_.push_back(std::move(f));
}

ExampleBuilder::Sizes ExampleBuilder::SizesOf(const Feature& f) {
  Sizes s;
  if (f.list == 1) {
    s.payload = f.in_place ? f.in_place_size : f.bytes.size();
    s.list = FieldSize(s.payload);  // BytesList.value (1)
  } else if (f.list == 2) {
    s.payload = f.floats.size() * 4;
    s.list = f.floats.empty() ? 0 : FieldSize(s.payload);  // FloatList.value (1), packed
  } else {
    for (int64_t v : f.int64s) s.payload += VarintSize(static_cast<uint64_t>(v));
    s.list = f.int64s.empty() ? 0 : FieldSize(s.payload);  // Int64List.value (1), packed
  }
  s.feature = FieldSize(s.list);                             // Feature.{bytes,float,int64}_list
  s.entry = FieldSize(f.key.size()) + FieldSize(s.feature);  // map entry: key (1), value (2)
  return s;
}

char* ExampleBuilder::PutFeature(const Feature& f, const Sizes& s, char* p) {
  p = PutHeader(1, s.entry, p);  // Features.feature (1)
  p = PutHeader(1, f.key.size(), p);
  std::memcpy(p, f.key.data(), f.key.size());
  p += f.key.size();
  p = PutHeader(2, s.feature, p);
  p = PutHeader(f.list, s.list, p);
  if (s.list == 0) return p;
  p = PutHeader(1, s.payload, p);
  if (f.in_place) return p + s.payload;
  if (f.list == 1) {
    if (!f.bytes.empty()) std::memcpy(p, f.bytes.data(), f.bytes.size());
    return p + f.bytes.size();
  }
  if (f.list == 2) {
    for (float v : f.floats) {
      std::memcpy(p, &v, 4);  // little-endian hosts only, as the scanner assumes
      p += 4;
    }
    return p;
  }
  for (int64_t v : f.int64s) p = PutVarint(static_cast<uint64_t>(v), p);
  return p;
}

std::vector<ExampleBuilder::Feature*> ExampleBuilder::SortedDistinct(size_t first) {
  std::stable_sort(features_.begin() + static_cast<std::ptrdiff_t>(first), features_.end(),
                   [](const Feature& a, const Feature& b) { return a.key < b.key; });
  std::vector<Feature*> kept;
  for (size_t i = first; i < features_.size(); ++i) {
    if (i + 1 < features_.size() && features_[i + 1].key == features_[i].key) continue;
    kept.push_back(&features_[i]);
  }
  return kept;
}

size_t ExampleBuilder::Size() const {
  // Of a key added twice other than in place, only the last one is written.
  std::vector<const Feature*> others;
  size_t features_size = 0;
  for (const Feature& f : features_) {
    if (f.in_place) {
      features_size += FieldSize(SizesOf(f).entry);
    } else {
      others.push_back(&f);
    }
  }
  std::stable_sort(others.begin(), others.end(),
                   [](const Feature* a, const Feature* b) { return a->key < b->key; });
  for (size_t i = 0; i < others.size(); ++i) {
    if (i + 1 < others.size() && others[i + 1]->key == others[i]->key) continue;
    features_size += FieldSize(SizesOf(*others[i]).entry);
  }
  return FieldSize(features_size);
}

void ExampleBuilder::Finish(std::string* out) {
  const std::vector<Feature*> kept = SortedDistinct(0);
  std::vector<Sizes> sizes;
  size_t features_size = 0;
  for (const Feature* f : kept) {
    sizes.push_back(SizesOf(*f));
    features_size += FieldSize(sizes.back().entry);
  }
  out->resize(FieldSize(features_size));
  char* p = PutHeader(1, features_size, out->data());  // Example.features (1)
  for (size_t i = 0; i < kept.size(); ++i) p = PutFeature(*kept[i], sizes[i], p);
  features_.clear();
}

void ExampleBuilder::FinishInPlace(std::string* out) {
  // The in-place features first, in the order added (their values lie in that order).
  const auto in_place_end = std::stable_partition(features_.begin(), features_.end(),
                                                  [](const Feature& f) { return f.in_place; });
  const auto n_in_place = static_cast<size_t>(in_place_end - features_.begin());
  std::vector<Feature*> order;
  for (size_t i = 0; i < n_in_place; ++i) order.push_back(&features_[i]);
  for (Feature* f : SortedDistinct(n_in_place)) order.push_back(f);
  std::vector<Sizes> sizes;
  size_t features_size = 0;
  for (const Feature* f : order) {
    sizes.push_back(SizesOf(*f));
    features_size += FieldSize(sizes.back().entry);
  }
  // Where each in-place value goes: after the framing before it, so never before where it is.
  std::vector<size_t> from(n_in_place), to(n_in_place);
  size_t at = FieldSize(features_size) - features_size, held = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    const size_t framing = FieldSize(sizes[i].entry) - sizes[i].payload;
    if (i < n_in_place) {
      from[i] = held;
      to[i] = at + framing;
      held += sizes[i].payload;
    }
    at += FieldSize(sizes[i].entry);
  }
  out->resize(at);
  // Last first: each moves toward the end, over bytes already moved or framing.
  for (size_t i = n_in_place; i-- > 0;) {
    if (sizes[i].payload > 0 && to[i] != from[i]) {
      std::memmove(out->data() + to[i], out->data() + from[i], sizes[i].payload);
    }
  }
  char* p = PutHeader(1, features_size, out->data());  // Example.features (1)
  for (size_t i = 0; i < order.size(); ++i) p = PutFeature(*order[i], sizes[i], p);
  features_.clear();
}

}  // namespace sluice
