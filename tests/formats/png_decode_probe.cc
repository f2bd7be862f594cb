// The test API of the PNG decoder (formats/png_codec.h): decodes one PNG file as the pipeline
// does, so tests/python/test_pil_png.py can compare it with PIL on the same file.
//
//   png_decode_probe IN.png OUT.rgb [drop|white|black]
//
// Its output and exit status: tests/formats/decode_probe_main.h.
#include <string>
#include <string_view>

#include "formats/png_codec.h"
#include "tests/formats/decode_probe_main.h"

int main(int argc, char** argv) {
  sluice::PngDecoder decoder;
  return sluice::testing::DecodeProbeMain(
      argc, argv, "png_decode_probe", "IN.png",
      [&](std::string_view data, sluice::Alpha alpha, sluice::Image* image) {
        return decoder.Decode(data, alpha, image);
      });
}
