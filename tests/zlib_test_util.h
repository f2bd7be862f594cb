// Deflates and inflates gzip or zlib bytes with zlib directly, independent of
// formats/compression, so tests check our readers and writers against the reference library.
#pragma once

#include <zlib.h>

#include <catch2/catch.hpp>

#include <string>
#include <string_view>

namespace sluice::testing {

// Compresses with zlib directly (not through our writer), so a reader is checked against streams
// we did not produce. window_bits: 15 + 16 for gzip, 15 for zlib.
inline std::string ZlibCompress(std::string_view data, int window_bits, int level = 6) {
  z_stream z{};
  REQUIRE(deflateInit2(&z, level, Z_DEFLATED, window_bits, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  std::string out(deflateBound(&z, data.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  REQUIRE(deflate(&z, Z_FINISH) == Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}
inline std::string Gzip(std::string_view data) { return ZlibCompress(data, MAX_WBITS + 16); }
inline std::string Zlib(std::string_view data, int level = 6) {
  return ZlibCompress(data, MAX_WBITS, level);
}

// Inflates; fails the calling test on corrupt input: callers pass bytes they expect to be valid.
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
