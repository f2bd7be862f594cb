// Builds one tf.train.Example in wire format, feature by feature, without a protobuf message in
// between: what the tar and image-file readers hand on per sample (formats/record_reader.h), the
// image's bytes copied once (or read in place: FinishWithTrailingBytes). Features come out in key
// order, so one sample always has the same bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
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
  // Finish, with one more bytes_list feature of one value after all the others: `key`, `length`
  // bytes whose contents the caller writes at the returned pointer (into *out: valid until *out
  // is next changed; zeros until written). A feature added under `key` too is left out. *out
  // gets exactly its size reserved, so a reader can read a large value straight into the record.
  // Still a valid Example: parsers do not depend on the order of the feature map's entries.
  char* FinishWithTrailingBytes(std::string_view key, size_t length, std::string* out);

 private:
  struct Feature {
    std::string key;
    int list = 0;  // field number in tf.train.Feature: 1 bytes, 2 float, 3 int64
    std::string_view bytes;
    std::vector<int64_t> int64s;
    std::vector<float> floats;
  };
  // Writes the features (and the trailing one, when trailing_key is set) into *out; returns the
  // offset of the trailing value's bytes (the size written when there is none).
  size_t Write(std::optional<std::string_view> trailing_key, size_t trailing_length,
               std::string* out);

  std::vector<Feature> features_;
};

}  // namespace sluice
