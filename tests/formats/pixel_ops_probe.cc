// The test API of the pixel kernels (formats/pixel_ops.h, formats/image_ops.h): applies one op,
// with parameters given explicitly, to a raw RGB image, so tests/python/test_torchvision_*.py can
// compare it with torchvision's functional op on the same pixels.
//
//   pixel_ops_probe IN.rgb WIDTH HEIGHT OUT.bin OP [KEY=VALUE ...]
//
// IN.rgb holds WIDTH * HEIGHT * 3 bytes (interleaved RGB, rows top to bottom); OUT.bin gets what
// the op makes (its size and dtype are the op's: see each entry of kOps). Exit 0 on success,
// 2 with a message naming the problem otherwise.
//
// The op "chain" runs a whole transform list as the pipeline does (see RunChain) and also writes
// OUT.bin.json: what the chain drew, for the test to replay in torchvision. With boxes=
// (x0,y0,x1,y1,... normalized to the input) it also moves those boxes with the plan
// (TransformBoxes, min_size= and min_overlap= as BoxColumns) and writes what is kept.
#include <google/protobuf/text_format.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "formats/image_ops.h"
#include "formats/pixel_ops.h"
#include "formats/seed.h"
#include "pipeline/auto_augment.h"
#include "pipeline/box_transform.h"
#include "pipeline/geometry_plan.h"
#include "pipeline/pixel_chain.h"
#include "pipeline/transform_spec.h"
#include "sluice/v1/config.pb.h"
#include "tests/formats/test_images.h"

namespace sluice {
namespace {

using testing::FilterName;
using testing::Mutable;

class Params {
 public:
  explicit Params(std::map<std::string, std::string> kv) : kv_(std::move(kv)) {}
  double Double(const std::string& key) const { return std::stod(Get(key)); }
  int Int(const std::string& key) const { return std::stoi(Get(key)); }
  bool Has(const std::string& key) const { return kv_.count(key) != 0; }
  // A comma-separated list: a,b,c.
  std::vector<double> Doubles(const std::string& key) const {
    std::vector<double> values;
    std::string s = Get(key);
    for (size_t start = 0; start <= s.size();) {
      size_t comma = s.find(',', start);
      if (comma == std::string::npos) comma = s.size();
      values.push_back(std::stod(s.substr(start, comma - start)));
      start = comma + 1;
    }
    return values;
  }
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

ResizeFilter ParseFilter(const std::string& name) {
  if (name == "bilinear") return ResizeFilter::kBilinear;
  if (name == "area") return ResizeFilter::kArea;
  if (name == "bicubic") return ResizeFilter::kBicubic;
  throw std::runtime_error("filter=" + name + ": expected bilinear, area or bicubic");
}

// The image itself, after an in-place op.
void Pixels(const Image& img, std::vector<uint8_t>* out) { *out = img.pixels; }

AutoAugmentPolicy PolicyParam(const Params& p) {
  const std::string name = p.Get("policy");
  if (name == "trivial_augment_wide") return AutoAugmentPolicy::kTrivialAugmentWide;
  if (name == "rand_augment") return AutoAugmentPolicy::kRandAugment;
  throw std::runtime_error("policy " + name + " is not trivial_augment_wide or rand_augment");
}

const std::map<std::string, OpFn>& Ops() {
  static const auto* ops = new std::map<std::string, OpFn>{
      // Each entry: "name", [](Image& in, const Params& p, std::vector<uint8_t>* out) {...}.
      {"identity", [](Image& in, const Params&, std::vector<uint8_t>* out) { Pixels(in, out); }},
      {"autocontrast",
       [](Image& in, const Params&, std::vector<uint8_t>* out) {
         AutoContrast(Mutable(in));
         Pixels(in, out);
       }},
      {"equalize",
       [](Image& in, const Params&, std::vector<uint8_t>* out) {
         Equalize(Mutable(in));
         Pixels(in, out);
       }},
      // factor: F.adjust_sharpness's sharpness_factor.
      {"sharpness",
       [](Image& in, const Params& p, std::vector<uint8_t>* out) {
         std::vector<uint8_t> scratch;
         AdjustSharpness(Mutable(in), p.Double("factor"), &scratch);
         Pixels(in, out);
       }},
      // F.affine(angle=-angle, translate=[tx, ty], scale=1, shear=[shear_x, shear_y], NEAREST,
      // center=[0, 0] if center_origin=1 else None): angle counter-clockwise, as F.rotate's.
      {"affine",
       [](Image& in, const Params& p, std::vector<uint8_t>* out) {
         Image dst;
         dst.Resize(in.width, in.height);
         AffineNearest(in.view(), Mutable(dst), p.Double("angle"), p.Double("tx"), p.Double("ty"),
                       p.Double("shear_x"), p.Double("shear_y"), p.Int("center_origin") != 0);
         Pixels(dst, out);
       }},
      // One policy op through ApplyAutoAugmentOp: name as torchvision's ("ShearX", ...),
      // magnitude signed, as _apply_op takes it.
      {"auto_augment_op",
       [](Image& in, const Params& p, std::vector<uint8_t>* out) {
         auto kind = AutoAugmentOpFromName(p.Get("name"));
         if (!kind) throw std::runtime_error("unknown auto augment op " + p.Get("name"));
         std::vector<uint8_t> scratch;
         ApplyAutoAugmentOp(AutoAugmentOp{*kind, p.Double("magnitude")}, Mutable(in), &scratch);
         Pixels(in, out);
       }},
      // A whole policy on the image: SampleAutoAugment(policy, num_ops, magnitude, num_bins, the
      // image's size, AugmentRng(seed, stream)), then each op. Out: the pixels, then per op its
      // kind (one byte, torchvision's order) and signed magnitude (float64, little-endian), so the
      // test can replay the draws through torchvision.
      {"auto_augment",
       [](Image& in, const Params& p, std::vector<uint8_t>* out) {
         AugmentRng rng(std::stoull(p.Get("seed")), std::stoull(p.Get("stream")));
         const std::vector<AutoAugmentOp> ops =
             SampleAutoAugment(PolicyParam(p), p.Int("num_ops"), p.Int("magnitude"),
                               p.Int("num_bins"), in.width, in.height, rng);
         std::vector<uint8_t> scratch;
         for (const AutoAugmentOp& op : ops) ApplyAutoAugmentOp(op, Mutable(in), &scratch);
         Pixels(in, out);
         for (const AutoAugmentOp& op : ops) {
           out->push_back(static_cast<uint8_t>(op.kind));
           const size_t at = out->size();
           out->resize(at + sizeof(double));
           std::memcpy(out->data() + at, &op.magnitude, sizeof(double));
         }
       }},
      // The policy's magnitude bins for the input's size: kNumAutoAugmentOps rows of num_bins
      // float32, in torchvision's op order; NaN for the ops without bins.
      {"auto_augment_magnitudes",
       [](Image& in, const Params& p, std::vector<uint8_t>* out) {
         const int num_bins = p.Int("num_bins");
         std::vector<float> table;
         for (int k = 0; k < kNumAutoAugmentOps; ++k) {
           std::vector<float> bins = AutoAugmentMagnitudes(
               PolicyParam(p), static_cast<AutoAugmentOpKind>(k), num_bins, in.width, in.height);
           if (bins.empty()) bins.assign(num_bins, std::nanf(""));
           table.insert(table.end(), bins.begin(), bins.end());
         }
         out->resize(table.size() * sizeof(float));
         std::memcpy(out->data(), table.data(), out->size());
       }},
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
      // The colour ops (pixel_ops.cc): the image after the op, HxWx3 uint8.
      {"brightness",
       [](Image& in, const Params& p, std::vector<uint8_t>* out) {
         AdjustBrightness(Mutable(in), p.Double("factor"));
         Pixels(in, out);
       }},
      {"contrast",
       [](Image& in, const Params& p, std::vector<uint8_t>* out) {
         AdjustContrast(Mutable(in), p.Double("factor"));
         Pixels(in, out);
       }},
      {"saturation",
       [](Image& in, const Params& p, std::vector<uint8_t>* out) {
         AdjustSaturation(Mutable(in), p.Double("factor"));
         Pixels(in, out);
       }},
      {"hue",
       [](Image& in, const Params& p, std::vector<uint8_t>* out) {
         AdjustHue(Mutable(in), p.Double("factor"));
         Pixels(in, out);
       }},
      {"grayscale",
       [](Image& in, const Params&, std::vector<uint8_t>* out) {
         ToGrayscale(Mutable(in));
         Pixels(in, out);
       }},
      {"solarize",
       [](Image& in, const Params& p, std::vector<uint8_t>* out) {
         Solarize(Mutable(in), p.Double("threshold"));
         Pixels(in, out);
       }},
      {"posterize",
       [](Image& in, const Params& p, std::vector<uint8_t>* out) {
         Posterize(Mutable(in), p.Int("bits"));
         Pixels(in, out);
       }},
      {"gaussian_blur",
       [](Image& in, const Params& p, std::vector<uint8_t>* out) {
         std::vector<float> scratch;
         GaussianBlur(Mutable(in), p.Int("kernel_size"), p.Double("sigma"), &scratch);
         Pixels(in, out);
       }},
      // The batch slot WriteOutput fills: dtype=uint8|float16|bfloat16|float32, layout=NHWC|NCHW,
      // mean=a,b,c std=a,b,c (normalize after scaling to [0, 1]; default none).
      {"output",
       [](Image& in, const Params& p, std::vector<uint8_t>* out) {
         OutputSpec spec;
         const std::string dtype = p.Has("dtype") ? p.Get("dtype") : "uint8";
         if (dtype == "uint8") {
           spec.dtype = DType::kUint8;
         } else if (dtype == "float16") {
           spec.dtype = DType::kFloat16;
         } else if (dtype == "bfloat16") {
           spec.dtype = DType::kBFloat16;
         } else if (dtype == "float32") {
           spec.dtype = DType::kFloat32;
         } else {
           throw std::runtime_error("dtype: unknown " + dtype);
         }
         const std::string layout = p.Has("layout") ? p.Get("layout") : "NHWC";
         if (layout != "NHWC" && layout != "NCHW") throw std::runtime_error("layout: " + layout);
         spec.layout = layout == "NCHW" ? Layout::kNchw : Layout::kNhwc;
         const std::vector<double> mean =
             p.Has("mean") ? p.Doubles("mean") : std::vector<double>{0, 0, 0};
         const std::vector<double> stddev =
             p.Has("std") ? p.Doubles("std") : std::vector<double>{1, 1, 1};
         if (mean.size() != 3 || stddev.size() != 3)
           throw std::runtime_error("mean, std: 3 values each");
         for (int c = 0; c < 3; ++c) {
           spec.scale[c] = static_cast<float>(1.0 / (255.0 * stddev[c]));
           spec.bias[c] = static_cast<float>(-mean[c] / stddev[c]);
         }
         out->resize(in.pixels.size() * DTypeSize(spec.dtype));
         WriteOutput(in.view(), spec, out->data());
       }},
  };
  return *ops;
}

// %XX escapes decoded (a textproto passes through argv and KEY=VALUE splitting unharmed).
std::string UrlUnescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      out.push_back(static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16)));
      i += 2;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

std::string WindowJson(const CropWindow& w) {
  return "{\"x\": " + std::to_string(w.x) + ", \"y\": " + std::to_string(w.y) +
         ", \"width\": " + std::to_string(w.width) + ", \"height\": " + std::to_string(w.height) +
         "}";
}

std::string NumberJson(double v) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

// A transform list run on the image as pipeline/augmenter.cc runs it. Parameters: list (a
// PipelineOptions textproto of `transforms`, %XX-escaped) or list_file (a path holding one),
// out_width, out_height, seed, stream (the AugmentRng of the image). CompileTransforms (train
// mode, num_classes 10), PlanGeometry, RenderGeometry, ApplyPixelOps, WriteOutput: OUT gets the
// output in the list's dtype and layout; json gets the plan (source window, dest, flips, filter,
// box_map), each draw of the per-pixel ops (name, params), in the order applied, and with boxes=
// the boxes TransformBoxes keeps ("boxes": [[x0, y0, x1, y1], ...]) with their input indexes
// ("kept").
void RunChain(Image& in, const Params& p, std::vector<uint8_t>* out, std::string* json) {
  std::string text;
  if (p.Has("list_file")) {
    std::ifstream f(p.Get("list_file"));
    if (!f) throw std::runtime_error("cannot read list_file " + p.Get("list_file"));
    text.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  } else {
    text = UrlUnescape(p.Get("list"));
  }
  v1::PipelineOptions options;
  if (!google::protobuf::TextFormat::ParseFromString(text, &options)) {
    throw std::runtime_error("list: not a PipelineOptions textproto: " + text);
  }
  const int out_width = p.Int("out_width"), out_height = p.Int("out_height");
  Result<TransformSpec> spec = CompileTransforms(options.transforms(), /*eval=*/false, out_height,
                                                 out_width, /*num_classes=*/10);
  if (!spec.ok()) throw std::runtime_error("list: " + spec.status().message());
  AugmentRng rng(std::stoull(p.Get("seed")), std::stoull(p.Get("stream")));
  const GeometryPlan plan =
      PlanGeometry(spec->geometry, in.width, in.height, out_width, out_height, rng);
  Image frame;
  frame.Resize(out_width, out_height);
  RenderGeometry(in.view(), plan, out_width, out_height, frame.pixels.data());
  std::vector<float> blur_scratch;
  std::vector<uint8_t> scratch;
  std::vector<PixelOpDraw> draws;
  ApplyPixelOps(spec->pixel, Mutable(frame), rng, &blur_scratch, &scratch, &draws);
  out->resize(frame.pixels.size() * DTypeSize(spec->output.dtype));
  WriteOutput(frame.view(), spec->output, out->data());

  *json = "{\"source\": " + WindowJson(plan.source) + ", \"dest\": " + WindowJson(plan.dest) +
          ", \"flip_horizontal\": " + (plan.resize.flip_horizontal ? "true" : "false") +
          ", \"flip_vertical\": " + (plan.resize.flip_vertical ? "true" : "false") +
          ", \"filter\": \"" + FilterName(plan.resize.filter) + "\", \"draws\": [";
  for (size_t i = 0; i < draws.size(); ++i) {
    *json += std::string(i ? ", " : "") + "{\"name\": \"" + draws[i].name + "\", \"params\": [";
    for (size_t k = 0; k < draws[i].params.size(); ++k) {
      *json += (k ? ", " : "") + NumberJson(draws[i].params[k]);
    }
    *json += "]}";
  }
  const BoxMap& m = plan.box_map;
  *json += "], \"box_map\": [";
  const double map_values[] = {m.x0,      m.y0,      m.width,   m.height,
                               m.clip_x0, m.clip_y0, m.clip_x1, m.clip_y1};
  for (size_t k = 0; k < std::size(map_values); ++k) {
    *json += (k ? ", " : "") + NumberJson(map_values[k]);
  }
  *json += "]";
  if (p.Has("boxes")) {
    const std::vector<double> coords = p.Doubles("boxes");
    if (coords.size() % 4 != 0) throw std::runtime_error("boxes: not 4 values a box");
    BoxColumns columns;
    columns.enabled = true;
    if (p.Has("min_size")) columns.min_size = p.Double("min_size");
    if (p.Has("min_overlap")) columns.min_overlap = p.Double("min_overlap");
    const uint32_t count = static_cast<uint32_t>(coords.size() / 4);
    SampleFeatures features;
    features.Reset(2);
    features.arrays[0].rows = features.arrays[1].rows = count;
    for (uint32_t i = 0; i < count; ++i) {
      for (int k = 0; k < 4; ++k) {
        const float c = static_cast<float>(coords[i * 4 + k]);
        features.arrays[0].data.append(reinterpret_cast<const char*>(&c), sizeof(c));
      }
      const int64_t label = i;
      features.arrays[1].data.append(reinterpret_cast<const char*>(&label), sizeof(label));
    }
    TransformBoxes(plan.box_map, columns, out_width, out_height, 0, &features);
    std::string boxes, kept;
    for (uint32_t i = 0; i < features.arrays[0].rows; ++i) {
      float b[4];
      int64_t label;
      std::memcpy(b, features.arrays[0].data.data() + i * sizeof(b), sizeof(b));
      std::memcpy(&label, features.arrays[1].data.data() + i * sizeof(label), sizeof(label));
      boxes += std::string(i ? ", " : "") + "[" + NumberJson(b[0]) + ", " + NumberJson(b[1]) +
               ", " + NumberJson(b[2]) + ", " + NumberJson(b[3]) + "]";
      kept += std::string(i ? ", " : "") + std::to_string(label);
    }
    *json += ", \"boxes\": [" + boxes + "], \"kept\": [" + kept + "]";
  }
  *json += "}\n";
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
    const bool chain = std::strcmp(argv[5], "chain") == 0;
    auto it = Ops().find(argv[5]);
    if (!chain && it == Ops().end()) {
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
    std::string json;
    if (chain) {
      RunChain(img, Params(std::move(kv)), &out, &json);
      std::ofstream j(std::string(argv[4]) + ".json");
      j << json;
      if (!j) {
        std::fprintf(stderr, "cannot write %s.json\n", argv[4]);
        return 2;
      }
    } else {
      it->second(img, Params(std::move(kv)), &out);
    }
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
