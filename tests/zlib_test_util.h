// Inflates gzip or zlib bytes with zlib directly, independent of formats/compression, so tests
// check what our writers produce against the reference library.
#pragma once

#include <zlib.h>

#include <catch2/catch.hpp>

#include <string>
#include <string_view>

namespace sluice::testing {

// Fails the calling test on corrupt input: callers pass bytes they expect to be valid.
inline std::string InflateWithZlib(std::string_view data, bool* consumed_all = nullptr) {
  z_stream z{};
  REQUIRE(inflateInit2(&z, MAX_WBITS + 32) == Z_OK);
  std::string out;
  char buf[1 << 16];
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  int rc;
  do {
    z.next_out = reinterpret_cast<Bytef*>(buf);
    z.avail_out = sizeof(buf);
    rc = inflate(&z, Z_NO_FLUSH);
    REQUIRE((rc == Z_OK || rc == Z_STREAM_END));
    out.append(buf, sizeof(buf) - z.avail_out);
  } while (rc != Z_STREAM_END);
  if (consumed_all) *consumed_all = z.avail_in == 0;
  inflateEnd(&z);
  return out;
}

}  // namespace sluice::testing
