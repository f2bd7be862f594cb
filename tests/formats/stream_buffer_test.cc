#include "formats/stream_buffer.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice {
namespace {

// A source over `bytes` that hands out at most `chunk` bytes a call and records what it was
// asked for (need, room); it fails with an I/O error once `fail_at` bytes were handed out.
struct Source {
  std::string bytes;
  size_t chunk = SIZE_MAX;
  bool exact = false;  // hand out only what is needed, as the sparse tar and lending paths do
  size_t fail_at = SIZE_MAX;
  size_t at = 0;
  std::vector<std::pair<size_t, size_t>> asked;

  Status operator()(size_t need, size_t room, char* to, size_t* got) {
    asked.emplace_back(need, room);
    *got = 0;
    if (at >= fail_at) return IOError("source: failed at " + std::to_string(at));
    const size_t want = exact ? need : room;
    *got = std::min({want, chunk, bytes.size() - at});
    std::memcpy(to, bytes.data() + at, *got);
    at += *got;
    return Status::OK();
  }
};

std::string Pattern(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>('a' + i % 26);
  return s;
}

TEST_CASE("FillMovesTheUnconsumedBytesToTheFrontAndReadsUntilNAreThere") {
  Source src{Pattern(100), /*chunk=*/7};
  StreamBuffer buf(32);
  Result<size_t> got = buf.Fill(10, std::ref(src));
  REQUIRE(got.ok());
  CHECK(*got >= 10);
  CHECK(std::string_view(buf.data(), 10) == src.bytes.substr(0, 10));
  buf.Consume(8);
  // 8 consumed, the rest moved to the front: 30 more fit without growing.
  got = buf.Fill(30, std::ref(src));
  REQUIRE(got.ok());
  CHECK(*got >= 30);
  CHECK(buf.capacity() == 32);
  CHECK(std::string_view(buf.data(), 30) == src.bytes.substr(8, 30));
}

TEST_CASE("FillWithEnoughBytesHeldAsksTheSourceNothing") {
  Source src{Pattern(100)};
  StreamBuffer buf(64);
  REQUIRE(buf.Fill(1, std::ref(src)).ok());
  const size_t calls = src.asked.size();
  buf.Consume(10);
  Result<size_t> got = buf.Fill(50, std::ref(src));
  REQUIRE(got.ok());
  CHECK(*got == 54);
  CHECK(src.asked.size() == calls);
}

TEST_CASE("AnExactSourceIsToldWhatIsStillMissingAndTheRoomThereIs") {
  Source src{Pattern(100)};
  src.exact = true;
  StreamBuffer buf(64);
  REQUIRE(buf.Fill(12, std::ref(src)).ok());
  CHECK(buf.size() == 12);
  buf.Consume(2);
  REQUIRE(buf.Fill(15, std::ref(src)).ok());
  CHECK(buf.size() == 15);
  REQUIRE(src.asked.size() == 2);
  CHECK(src.asked[0] == std::make_pair(size_t{12}, size_t{64}));
  // 10 held, moved to the front: 5 missing, 54 of room.
  CHECK(src.asked[1] == std::make_pair(size_t{5}, size_t{54}));
}

TEST_CASE("AFrameLargerThanTheBufferGrowsItAsTheBytesArriveNotToTheLengthAsked") {
  // A length of 64 MiB over a stream of 3 MiB: the buffer grows to what arrives, not to 64 MiB.
  Source src{Pattern(3 << 20)};
  StreamBuffer buf(1 << 10);
  Result<size_t> got = buf.Fill(64 << 20, std::ref(src));
  REQUIRE(got.ok());
  CHECK(*got == src.bytes.size());
  CHECK(buf.at_end());
  CHECK(buf.capacity() <= 2 * src.bytes.size());
  CHECK(std::string_view(buf.data(), buf.size()) == src.bytes);
}

TEST_CASE("TheEndIsRememberedAndFillAfterItReturnsWhatIsHeld") {
  Source src{Pattern(20)};
  StreamBuffer buf(64);
  Result<size_t> got = buf.Fill(30, std::ref(src));
  REQUIRE(got.ok());
  CHECK(*got == 20);
  CHECK(buf.at_end());
  const size_t calls = src.asked.size();
  buf.Consume(5);
  got = buf.Fill(30, std::ref(src));
  REQUIRE(got.ok());
  CHECK(*got == 15);
  CHECK(src.asked.size() == calls);
}

TEST_CASE("MarkEndStopsFillFromAskingTheSource") {
  Source src{Pattern(20)};
  StreamBuffer buf(64);
  buf.MarkEnd();
  Result<size_t> got = buf.Fill(10, std::ref(src));
  REQUIRE(got.ok());
  CHECK(*got == 0);
  CHECK(src.asked.empty());
}

TEST_CASE("ASourceErrorComesBackWithTheBytesReadBeforeItKept") {
  Source src{Pattern(100), /*chunk=*/4};
  src.fail_at = 8;
  StreamBuffer buf(64);
  Result<size_t> got = buf.Fill(20, std::ref(src));
  REQUIRE(!got.ok());
  CHECK(got.status().message().find("failed at 8") != std::string::npos);
  CHECK(buf.size() == 8);
  CHECK(!buf.at_end());
}

TEST_CASE("ShrinkToDropsAGrownBufferOnlyOnceItHoldsNothing") {
  Source src{Pattern(5000)};
  StreamBuffer buf(64);
  REQUIRE(buf.Fill(3000, std::ref(src)).ok());
  REQUIRE(buf.capacity() > 64);
  buf.Consume(buf.size() - 1);
  buf.ShrinkTo(64);
  CHECK(buf.capacity() > 64);  // one byte still held
  buf.Consume(1);
  buf.ShrinkTo(64);
  CHECK(buf.capacity() == 64);
  CHECK(buf.empty());
}

}  // namespace
}  // namespace sluice
