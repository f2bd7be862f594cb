#include "formats/example_builder.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <string>

#include "formats/example_scanner.h"
#include "sluice/v1/example.pb.h"

namespace sluice {
namespace {

TEST_CASE("BuiltExampleParsesAsProtobufDoesWithEveryListKindAndEmptyLists") {
  ExampleBuilder b;
  const std::string image(300, '\xff');  // a length over one varint byte
  b.AddBytes("image/encoded", image);
  b.AddInt64("image/class/label", 7);
  b.AddInt64s("neg", {-1, 0, int64_t{1} << 40});
  b.AddFloats("box", {0.25f, -1.5f});
  b.AddFloats("empty_f", {});
  b.AddInt64s("empty_i", {});
  b.AddBytes("empty_b", "");
  std::string out = "stale";
  b.Finish(&out);

  v1::Example e;
  REQUIRE(e.ParseFromString(out));
  const auto& f = e.features().feature();
  REQUIRE(f.size() == 7);
  CHECK(f.at("image/encoded").bytes_list().value(0) == image);
  CHECK(f.at("image/class/label").int64_list().value(0) == 7);
  CHECK(f.at("neg").int64_list().value_size() == 3);
  CHECK(f.at("neg").int64_list().value(0) == -1);
  CHECK(f.at("neg").int64_list().value(2) == int64_t{1} << 40);
  CHECK(f.at("box").float_list().value(1) == -1.5f);
  CHECK(f.at("empty_f").has_float_list());
  CHECK(f.at("empty_f").float_list().value_size() == 0);
  CHECK(f.at("empty_i").has_int64_list());
  CHECK(f.at("empty_b").bytes_list().value(0).empty());

  // The pipeline's scanner finds the image and the label in them.
  ExampleScanner scanner("image/encoded", "image/class/label");
  std::string_view jpeg;
  int64_t label = -5;
  REQUIRE(scanner.Scan(out, &jpeg, &label).ok());
  CHECK(jpeg == image);
  CHECK(label == 7);
}

TEST_CASE("FeaturesComeOutInKeyOrderTheLastOfARepeatedKeyKeptAndTheBuilderCleared") {
  ExampleBuilder a;
  a.AddInt64("b", 1);
  a.AddInt64("a", 2);
  a.AddInt64("b", 3);
  std::string first;
  a.Finish(&first);
  ExampleBuilder b;
  b.AddInt64("a", 2);
  b.AddInt64("b", 3);
  std::string second;
  b.Finish(&second);
  CHECK(first == second);
  // Cleared: the next Example holds only what was added since.
  a.AddInt64("c", 4);
  a.Finish(&first);
  v1::Example e;
  REQUIRE(e.ParseFromString(first));
  CHECK(e.features().feature().size() == 1);
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

// A value the caller writes in place, after every other feature: the same Example to protobuf
// as Finish with that value added, found by the scanner, of exactly the reserved size.
TEST_CASE("TrailingBytesFeatureParsesAsTheSameExampleAndIsWrittenInPlace") {
  const std::string image(200000, 'j');
  ExampleBuilder b;
  b.AddInt64("image/class/label", 4);
  b.AddBytes("image/filename", "a/b.jpg");
  b.AddBytes("image/encoded", "replaced by the trailing one");
  std::string in_place = "stale";
  char* at = b.FinishWithTrailingBytes("image/encoded", image.size(), &in_place);
  REQUIRE(at + image.size() == in_place.data() + in_place.size());
  std::copy(image.begin(), image.end(), at);
  CHECK(in_place.capacity() < in_place.size() + 64);

  b.AddInt64("image/class/label", 4);
  b.AddBytes("image/filename", "a/b.jpg");
  b.AddBytes("image/encoded", image);
  std::string whole;
  b.Finish(&whole);
  CHECK(whole.size() == in_place.size());
  v1::Example a;
  v1::Example w;
  REQUIRE(a.ParseFromString(in_place));
  REQUIRE(w.ParseFromString(whole));
  CHECK(a.features().feature().size() == 3);
  CHECK(a.features().feature().at("image/encoded").bytes_list().value(0) == image);
  CHECK(a.features().feature().at("image/filename").bytes_list().value(0) == "a/b.jpg");
  CHECK(a.features().feature().at("image/class/label").int64_list().value(0) == 4);

  std::string_view scanned;
  int64_t label = 0;
  REQUIRE(
      ExampleScanner("image/encoded", "image/class/label").Scan(in_place, &scanned, &label).ok());
  CHECK(scanned == image);
  CHECK(label == 4);
}

}  // namespace
}  // namespace sluice
