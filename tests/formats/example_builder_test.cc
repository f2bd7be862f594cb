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

TEST_CASE("InPlaceValuesAreFramedWhereTheyLieWithoutAReallocationWhenRoomWasReserved") {
  // Values of one-byte, two-byte and three-byte length varints, one empty, back to back.
  const std::string a(200, 'a'), b(20000, 'b'), c, d(3, 'd');
  std::string out = a + b + c + d;
  out.reserve(out.size() + 256);
  const char* before = out.data();
  ExampleBuilder builder;
  builder.AddBytesInPlace("zz/first", a.size());
  builder.AddInt64("label", 9);
  builder.AddBytesInPlace("b", b.size());
  builder.AddBytesInPlace("c", c.size());
  builder.AddBytes("__key__", "k");
  builder.AddBytesInPlace("d", d.size());
  builder.FinishInPlace(&out);
  CHECK(out.data() == before);

  v1::Example e;
  REQUIRE(e.ParseFromString(out));
  const auto& f = e.features().feature();
  REQUIRE(f.size() == 6);
  CHECK(f.at("zz/first").bytes_list().value(0) == a);
  CHECK(f.at("b").bytes_list().value(0) == b);
  CHECK(f.at("c").bytes_list().value(0).empty());
  CHECK(f.at("d").bytes_list().value(0) == d);
  CHECK(f.at("__key__").bytes_list().value(0) == "k");
  CHECK(f.at("label").int64_list().value(0) == 9);

  // The same features the same way: the same bytes.
  std::string again = a + b + c + d;
  builder.AddBytesInPlace("zz/first", a.size());
  builder.AddBytes("__key__", "k");
  builder.AddBytesInPlace("b", b.size());
  builder.AddBytesInPlace("c", c.size());
  builder.AddBytesInPlace("d", d.size());
  builder.AddInt64("label", 9);
  builder.FinishInPlace(&again);
  CHECK(again == out);
}

}  // namespace
}  // namespace sluice
