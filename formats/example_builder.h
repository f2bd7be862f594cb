// Builds one tf.train.Example in wire format, feature by feature, without a protobuf message in
// between: what the tar and image-file readers hand on per sample (formats/record_reader.h), the
// image's bytes copied once. Features come out in key order, so one sample always has the same
// bytes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sluice {

class ExampleBuilder {
 public:
  // A bytes_list feature of one value. The value is copied when Finish writes it: it must stay
  // valid until then.
  void AddBytes(std::string_view key, std::string_view value);
  // An int64_list feature (packed, as TensorFlow writes it).
  void AddInt64s(std::string_view key, std::vector<int64_t> values);
  void AddInt64(std::string_view key, int64_t value) { AddInt64s(key, {value}); }
  // A float_list feature (packed).
  void AddFloats(std::string_view key, std::vector<float> values);

  // A bytes_list feature whose value is already in the output: the next `size` bytes of *out as
  // FinishInPlace finds it (values added this way lie back to back from its offset 0, in the
  // order added). For a reader that reads a value straight into the record it hands on.
  void AddBytesInPlace(std::string_view key, size_t size);

  // The bytes Finish (or FinishInPlace) would write for what was added, without writing them.
  size_t Size() const;
  // Drops what was added since the last Finish.
  void Clear() { features_.clear(); }

  // Writes the Example into *out (replacing what it held, its capacity reused) and clears the
  // builder for the next one. A key added twice keeps its last value.
  // REQUIRES: no AddBytesInPlace since the last Finish.
  void Finish(std::string* out);
  // Finish for values in place: lays the Example out around the values *out holds, moving each
  // once toward the end of *out (no second copy of them is made; *out grows by the framing and
  // the other features, so reserve room for them to avoid a reallocation). The in-place features
  // come first in the order added, then the others in key order: the same sample always gives
  // the same bytes.
  // REQUIRES: out->size() is the sum of the in-place sizes; their keys are distinct and none is
  // added another way.
  void FinishInPlace(std::string* out);

 private:
  struct Feature {
    std::string key;
    int list = 0;  // field number in tf.train.Feature: 1 bytes, 2 float, 3 int64
    std::string_view bytes;
    bool in_place = false;  // the value is in_place_size bytes of the output, not `bytes`
    size_t in_place_size = 0;
    std::vector<int64_t> int64s;
    std::vector<float> floats;
  };
  // Its framing's sizes, from the inside out: list payload, list, Feature, map entry.
  struct Sizes {
    size_t payload = 0, list = 0, feature = 0, entry = 0;
  };
  static Sizes SizesOf(const Feature& f);
  // Writes f's Features.feature field at p, its value too unless in place; returns its end.
  static char* PutFeature(const Feature& f, const Sizes& s, char* p);
  // The last of each key, in key order.
  std::vector<Feature*> SortedDistinct(size_t first);

  std::vector<Feature> features_;
};

}  // namespace sluice
