#include "formats/crc32c.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace sluice::crc32c {
namespace {

std::string Bytes(std::initializer_list<int> values) {
  std::string s;
  for (int v : values) s.push_back(static_cast<char>(v));
  return s;
}

std::string Iota(int first, int step, int count) {
  std::string s;
  for (int i = 0; i < count; ++i) s.push_back(static_cast<char>(first + i * step));
  return s;
}

TEST_CASE("KnownVectorsMatchRfc3720AndTheCheckValue") {
  struct Case {
    const char* what;
    std::string data;
    uint32_t crc;
  };
  const std::vector<Case> cases = {
      {"empty", "", 0x00000000u},
      {"check value", "123456789", 0xe3069283u},
      {"32 zeros", std::string(32, '\0'), 0x8a9136aau},
      {"32 0xff", std::string(32, '\xff'), 0x62a8ab43u},
      {"32 ascending", Iota(0, 1, 32), 0x46dd794eu},
      {"32 descending", Iota(31, -1, 32), 0x113fdb5cu},
      {"iSCSI read PDU",
       Bytes({0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
              0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00,
              0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x18, 0x28, 0x00, 0x00, 0x00,
              0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}),
       0xd9963a56u},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    CHECK(Value(c.data) == c.crc);
    CHECK(ExtendPortable(0, c.data.data(), c.data.size()) == c.crc);
  }
}

TEST_CASE("ExtendComposesAtEverySplitPoint") {
  std::mt19937 rng(7);
  std::string data(3 * 8192 + 777, '\0');
  for (char& ch : data) ch = static_cast<char>(rng());
  const uint32_t whole = Value(data);
  for (size_t split : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{255}, size_t{256},
                       size_t{8191}, size_t{8192}, size_t{24576}, data.size() - 1, data.size()}) {
    INFO("split " << split);
    CHECK(Extend(Value(data.data(), split), data.data() + split, data.size() - split) == whole);
    CHECK(ExtendPortable(ExtendPortable(0, data.data(), split), data.data() + split,
                         data.size() - split) == whole);
  }
}

TEST_CASE("ValueDependsOnEveryByte") {
  std::string data(100, 'a');
  const uint32_t base = Value(data);
  for (size_t i = 0; i < data.size(); ++i) {
    std::string flipped = data;
    flipped[i] ^= 1;
    INFO("byte " << i);
    CHECK(Value(flipped) != base);
  }
}

TEST_CASE("HardwareAndPortableAgreeForRandomSizesAndAlignments") {
#if defined(__x86_64__)
  CHECK(IsHardwareAccelerated() == static_cast<bool>(__builtin_cpu_supports("sse4.2")));
#endif
  std::mt19937_64 rng(42);
  std::vector<char> buffer(200000 + 64);
  for (char& ch : buffer) ch = static_cast<char>(rng());
  std::uniform_int_distribution<size_t> offset_dist(0, 63);
  // Sizes around the three-way block boundaries (3 * 256 and 3 * 8192 bytes) and random ones.
  std::vector<size_t> sizes = {0,    1,     7,     8,     9,     767,   768,   769,
                               1000, 24575, 24576, 24577, 49152, 65536, 200000};
  std::uniform_int_distribution<size_t> size_dist(0, 200000);
  for (int i = 0; i < 200; ++i) sizes.push_back(size_dist(rng));
  for (size_t size : sizes) {
    size_t offset = offset_dist(rng);
    uint32_t seed = static_cast<uint32_t>(rng());
    INFO("size " << size << " offset " << offset << " seed " << seed);
    REQUIRE(Extend(seed, buffer.data() + offset, size) ==
            ExtendPortable(seed, buffer.data() + offset, size));
  }
}

TEST_CASE("MaskRoundTripsAndChangesTheValue") {
  std::mt19937 rng(1);
  for (uint32_t crc : {0u, 1u, 0xffffffffu, 0xe3069283u, static_cast<uint32_t>(rng()),
                       static_cast<uint32_t>(rng())}) {
    INFO(crc);
    CHECK(Unmask(Mask(crc)) == crc);
    CHECK(Mask(crc) != crc);
    CHECK(Mask(Mask(crc)) != Mask(crc));
  }
  // The masked CRC of an empty record, as every TFRecord file with an empty record holds it.
  CHECK(Mask(Value("")) == 0xa282ead8u);
}

}  // namespace
}  // namespace sluice::crc32c
