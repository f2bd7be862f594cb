// The command line the image decode probes share (png_decode_probe.cc, webp_decode_probe.cc):
//
//   NAME IN.EXT OUT.rgb [drop|white|black]
//
// OUT.rgb gets the decoded image, width * height * 3 bytes (interleaved RGB, rows top to bottom);
// stdout gets "WIDTH HEIGHT". The last argument is the alpha policy (default drop). Exit 0 on
// success, 2 with the decoder's message otherwise.
#pragma once

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

#include "formats/alpha.h"
#include "formats/image_ops.h"
#include "formats/status.h"

namespace sluice::testing {

inline int ProbeFail(const std::string& name, const std::string& message) {
  std::fprintf(stderr, "%s: %s\n", name.c_str(), message.c_str());
  return 2;
}

// main() of the probe `name` for files `in_name` (e.g. "IN.png"): decode(data, alpha, &image)
// is the decoder under test.
template <typename Decode>
int DecodeProbeMain(int argc, char** argv, const std::string& name, const std::string& in_name,
                    Decode decode) {
  if (argc < 3 || argc > 4)
    return ProbeFail(name, "usage: " + name + " " + in_name + " OUT.rgb [drop|white|black]");
  Alpha alpha = Alpha::kDrop;
  const std::string policy = argc == 4 ? argv[3] : "drop";
  if (policy == "white") {
    alpha = Alpha::kCompositeWhite;
  } else if (policy == "black") {
    alpha = Alpha::kCompositeBlack;
  } else if (policy != "drop") {
    return ProbeFail(name, "unknown alpha policy '" + policy + "'");
  }
  std::ifstream in(argv[1], std::ios::binary);
  if (!in) return ProbeFail(name, std::string("cannot read ") + argv[1]);
  const std::string data{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  Image image;
  Status s = decode(data, alpha, &image);
  if (!s.ok()) return ProbeFail(name, s.ToString());
  std::ofstream out(argv[2], std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(image.pixels.data()),
            static_cast<std::streamsize>(image.pixels.size()));
  if (!out) return ProbeFail(name, std::string("cannot write ") + argv[2]);
  std::printf("%d %d\n", image.width, image.height);
  return 0;
}

}  // namespace sluice::testing
