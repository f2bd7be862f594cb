// The test API of the WebP decoder (formats/webp_codec.h): decodes one WebP file as the pipeline
// does, so tests/python/test_pil_webp.py can compare it with PIL on the same file.
//
//   webp_decode_probe IN.webp OUT.rgb [drop|white|black]
//
// OUT.rgb gets the decoded image, width * height * 3 bytes (interleaved RGB, rows top to bottom);
// stdout gets "WIDTH HEIGHT". The last argument is the alpha policy (default drop). Exit 0 on
// success, 2 with the decoder's message otherwise.
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

#include "formats/webp_codec.h"

namespace {

int Fail(const std::string& message) {
  std::fprintf(stderr, "webp_decode_probe: %s\n", message.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3 || argc > 4)
    return Fail("usage: webp_decode_probe IN.webp OUT.rgb [drop|white|black]");
  sluice::Alpha alpha = sluice::Alpha::kDrop;
  const std::string policy = argc == 4 ? argv[3] : "drop";
  if (policy == "white") {
    alpha = sluice::Alpha::kCompositeWhite;
  } else if (policy == "black") {
    alpha = sluice::Alpha::kCompositeBlack;
  } else if (policy != "drop") {
    return Fail("unknown alpha policy '" + policy + "'");
  }
  std::ifstream in(argv[1], std::ios::binary);
  if (!in) return Fail(std::string("cannot read ") + argv[1]);
  const std::string data{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  sluice::Image image;
  sluice::Status s = sluice::DecodeWebp(data, alpha, &image);
  if (!s.ok()) return Fail(s.ToString());
  std::ofstream out(argv[2], std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(image.pixels.data()),
            static_cast<std::streamsize>(image.pixels.size()));
  if (!out) return Fail(std::string("cannot write ") + argv[2]);
  std::printf("%d %d\n", image.width, image.height);
  return 0;
}
