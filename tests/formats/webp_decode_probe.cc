// The test API of the WebP decoder (formats/webp_codec.h): decodes one WebP file as the pipeline
// does, so tests/python/test_pil_webp.py can compare it with PIL on the same file.
//
//   webp_decode_probe IN.webp OUT.rgb [drop|white|black]
//
// Its output and exit status: tests/formats/decode_probe_main.h.
#include <string>
#include <string_view>

#include "formats/webp_codec.h"
#include "tests/formats/decode_probe_main.h"

int main(int argc, char** argv) {
  return sluice::testing::DecodeProbeMain(
      argc, argv, "webp_decode_probe", "IN.webp",
      [](std::string_view data, sluice::Alpha alpha, sluice::Image* image) {
        return sluice::DecodeWebp(data, alpha, image);
      });
}
