// The libjpeg glue's memory estimate and the limit that holds libjpeg to it: a progressive file's
// whole-image coefficients are in the estimate, and libjpeg-turbo (jmemnobs.c) fails rather than
// allocate them past max_memory_to_use.
#include "formats/jpeg_error.h"

#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tests/jpeg_test_images.h"

namespace sluice {
namespace {

using jpeg_internal::CreateDecompress;
using jpeg_internal::ErrorManager;
using jpeg_internal::EstimateDecompressFrame;
using jpeg_internal::InitErrorManager;
using jpeg_internal::LimitDecompressMemory;
using jpeg_internal::OverMemoryLimit;
using jpeg_internal::ReadHeaderFrame;

// width x height, 4:2:0 (libjpeg's default) or 4:4:4, at libjpeg's default quality.
std::string Jpeg(int width, int height, bool progressive, bool subsampled) {
  return testing::EncodeRowsWithLibjpeg(
      width, height, progressive, subsampled, 75, [width](int y, uint8_t* samples) {
        for (size_t i = 0; i < static_cast<size_t>(width) * 3; ++i) {
          samples[i] = static_cast<uint8_t>((i / 3 + static_cast<size_t>(y)) % 251);
        }
      });
}

// A libjpeg decompressor with our error manager.
struct Decompressor {
  jpeg_decompress_struct cinfo;
  ErrorManager err;
  Decompressor() {
    std::memset(&cinfo, 0, sizeof(cinfo));
    InitErrorManager(&err);
    cinfo.err = &err.pub;
    REQUIRE(CreateDecompress(&cinfo, &err));
  }
  ~Decompressor() { jpeg_destroy_decompress(&cinfo); }

  // Leaves the header read and the output size computed, ready to start.
  int64_t Estimate(const std::string& jpeg) {
    jpeg_abort_decompress(&cinfo);
    REQUIRE(
        ReadHeaderFrame(&cinfo, &err, reinterpret_cast<const uint8_t*>(jpeg.data()), jpeg.size()));
    int64_t bytes = 0;
    REQUIRE(EstimateDecompressFrame(&cinfo, &err, &bytes, &multi_scan));
    return bytes;
  }
  bool multi_scan = false;  // of the last Estimate
};

// Starts decompressing (which allocates every buffer) in a setjmp frame; false after an error.
bool Start(j_decompress_ptr cinfo, ErrorManager* err) {
  if (setjmp(err->jump)) {
    jpeg_abort_decompress(cinfo);
    return false;
  }
  jpeg_start_decompress(cinfo);
  jpeg_abort_decompress(cinfo);
  return true;
}

TEST_CASE("ProgressiveEstimateHoldsTheWholeImagesCoefficients") {
  const int64_t pixels = 1024 * 768;
  Decompressor d;
  // 64 two-byte coefficients per 8x8 block and component: 6 bytes a pixel at 4:4:4, 3 at 4:2:0.
  CHECK(d.Estimate(Jpeg(1024, 768, true, false)) >= 6 * pixels);
  CHECK(d.multi_scan);
  CHECK(d.Estimate(Jpeg(1024, 768, true, true)) >= 3 * pixels);
  // A baseline file needs rows only.
  CHECK(d.Estimate(Jpeg(1024, 768, false, false)) < pixels);
  CHECK_FALSE(d.multi_scan);
}

TEST_CASE("LibjpegFailsRatherThanAllocateCoefficientsPastTheLimit") {
  const std::string jpeg = Jpeg(1024, 768, true, false);
  Decompressor d;
  const int64_t estimate = d.Estimate(jpeg);
  LimitDecompressMemory(&d.cinfo, estimate);
  CHECK(Start(&d.cinfo, &d.err));

  d.Estimate(jpeg);
  LimitDecompressMemory(&d.cinfo, estimate / 2);
  CHECK_FALSE(Start(&d.cinfo, &d.err));
  CHECK(OverMemoryLimit(d.err));
}

}  // namespace
}  // namespace sluice
