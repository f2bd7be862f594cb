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

  // Writes the Example into *out (replacing what it held, its capacity reused) and clears the
  // builder for the next one. A key added twice keeps its last value.
  void Finish(std::string* out);

 private:
  struct Feature {
    std::string key;
    int list = 0;  // field number in tf.train.Feature: 1 bytes, 2 float, 3 int64
    std::string_view bytes;
    std::vector<int64_t> int64s;
    std::vector<float> floats;
  };
  std::vector<Feature> features_;
};

}  // namespace sluice
