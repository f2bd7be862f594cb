#include "server/format_bytes.h"

#include <catch2/catch.hpp>

namespace sluice {
namespace {

TEST_CASE("FormatBytesKeepsWholeUnitsWhole") {
  CHECK(FormatBytes(0) == "0 B");
  CHECK(FormatBytes(1000) == "1000 B");
  CHECK(FormatBytes(1536) == "1.5 KiB");
  CHECK(FormatBytes(int64_t{256} << 20) == "256 MiB");
  CHECK(FormatBytes(int64_t{3} << 30 | int64_t{1} << 26) == "3.1 GiB");
}

}  // namespace
}  // namespace sluice
