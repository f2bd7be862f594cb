// The test API of the pixel kernels (formats/pixel_ops.h, formats/image_ops.h): applies one op,
// with parameters given explicitly, to a raw RGB image, so tests/python/test_torchvision_*.py can
// compare it with torchvision's functional op on the same pixels.
//
//   pixel_ops_probe IN.rgb WIDTH HEIGHT OUT.bin OP [KEY=VALUE ...]
//
// IN.rgb holds WIDTH * HEIGHT * 3 bytes (interleaved RGB, rows top to bottom); OUT.bin gets what
// the op makes (its size and dtype are the op's: see each entry of kOps). Exit 0 on success,
// 2 with a message naming the problem otherwise.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "formats/image_ops.h"
#include "formats/pixel_ops.h"

namespace sluice {
namespace {

class Params {
 public:
  explicit Params(std::map<std::string, std::string> kv) : kv_(std::move(kv)) {}
  double Double(const std::string& key) const { return std::stod(Get(key)); }
  int Int(const std::string& key) const { return std::stoi(Get(key)); }
  bool Has(const std::string& key) const { return kv_.count(key) != 0; }
  std::string Get(const std::string& key) const {
    auto it = kv_.find(key);
    if (it == kv_.end()) throw std::runtime_error("missing parameter " + key);
    return it->second;
  }

 private:
  std::map<std::string, std::string> kv_;
};

// One op: reads `in` (the image, which it may change) and fills `out`.
using OpFn = void (*)(Image& in, const Params& p, std::vector<uint8_t>* out);

[[maybe_unused]] MutableImageView Mutable(Image& img) {
  return MutableImageView{img.pixels.data(), img.width, img.height,
                          static_cast<size_t>(img.width) * 3};
}

ResizeFilter ParseFilter(const std::string& name) {
  if (name == "bilinear") return ResizeFilter::kBilinear;
  if (name == "area") return ResizeFilter::kArea;
  if (name == "bicubic") return ResizeFilter::kBicubic;
  throw std::runtime_error("filter=" + name + ": expected bilinear, area or bicubic");
}

// The image itself, after an in-place op.
void Pixels(const Image& img, std::vector<uint8_t>* out) { *out = img.pixels; }

const std::map<std::string, OpFn>& Ops() {
  static const auto* ops = new std::map<std::string, OpFn>{
      // Each entry: "name", [](Image& in, const Params& p, std::vector<uint8_t>* out) {...}.
      {"identity", [](Image& in, const Params&, std::vector<uint8_t>* out) { Pixels(in, out); }},
      // width, height: the output's; filter=bilinear|area|bicubic; hflip, vflip = 0|1 (default 0).
      // Output: the resized RGB image, height x width x 3.
      {"resize",
       [](Image& in, const Params& p, std::vector<uint8_t>* out) {
         const int width = p.Int("width"), height = p.Int("height");
         if (width <= 0 || height <= 0) throw std::runtime_error("width and height must be > 0");
         ResizeOptions options;
         options.filter = ParseFilter(p.Get("filter"));
         options.flip_horizontal = p.Has("hflip") && p.Int("hflip") != 0;
         options.flip_vertical = p.Has("vflip") && p.Int("vflip") != 0;
         out->resize(static_cast<size_t>(width) * height * 3);
         Resize(in.view(), out->data(), width, height, static_cast<size_t>(width) * 3, options);
       }},
  };
  return *ops;
}

}  // namespace
}  // namespace sluice

int main(int argc, char** argv) {
  using namespace sluice;
  if (argc < 6) {
    std::fprintf(stderr, "usage: %s IN.rgb WIDTH HEIGHT OUT.bin OP [KEY=VALUE ...]\n", argv[0]);
    return 2;
  }
  try {
    Image img;
    img.Resize(std::stoi(argv[2]), std::stoi(argv[3]));
    std::ifstream in(argv[1], std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (bytes.size() != img.pixels.size()) {
      std::fprintf(stderr, "%s: %zu bytes, expected %zu\n", argv[1], bytes.size(),
                   img.pixels.size());
      return 2;
    }
    std::copy(bytes.begin(), bytes.end(), img.pixels.begin());
    auto it = Ops().find(argv[5]);
    if (it == Ops().end()) {
      std::fprintf(stderr, "unknown op %s\n", argv[5]);
      return 2;
    }
    std::map<std::string, std::string> kv;
    for (int i = 6; i < argc; ++i) {
      std::string a = argv[i];
      size_t eq = a.find('=');
      if (eq == std::string::npos) {
        std::fprintf(stderr, "parameter %s is not KEY=VALUE\n", argv[i]);
        return 2;
      }
      kv[a.substr(0, eq)] = a.substr(eq + 1);
    }
    std::vector<uint8_t> out;
    it->second(img, Params(std::move(kv)), &out);
    std::ofstream o(argv[4], std::ios::binary);
    o.write(reinterpret_cast<const char*>(out.data()), static_cast<std::streamsize>(out.size()));
    if (!o) {
      std::fprintf(stderr, "cannot write %s\n", argv[4]);
      return 2;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pixel_ops_probe: %s\n", e.what());
    return 2;
  }
  return 0;
}
