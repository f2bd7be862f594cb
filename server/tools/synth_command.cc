// `sluice synth`: an ImageNet-like demo/benchmark set written as shards. Images have a short side
// of 300–500 px, aspect 3:4…4:3, JPEG quality 90–95 and sensor-like noise, so decoding them costs
// what decoding real photographs costs. With --photos DIR, class k is random crops of photo k (a
// model can learn it); without, each class has its own procedural pattern and palette. Every image
// depends only on (seed, index), so output is identical for a seed whatever the thread count.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <tbb/enumerable_thread_specific.h>

#include "formats/file.h"
#include "formats/image_example.h"
#include "formats/image_ops.h"
#include "formats/jpeg_codec.h"
#include "formats/jpeg_header.h"
#include "server/commands.h"
#include "server/tools/dataset_writer.h"

namespace sluice {
namespace {

// Photos are shrunk once at load so a crop never resamples more than this many rows/columns.
constexpr int kPhotoMaxShortSide = 1200;

struct SynthOptions {
  uint64_t images = 1000;
  int classes = 10;
  std::string photos;
  DatasetLayoutOptions layout;
};

struct Photo {
  std::string name;
  Image image;
};

Result<std::vector<Photo>> LoadPhotos(const std::string& dir, int needed) {
  std::vector<std::string> paths;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (e.is_regular_file()) paths.push_back(e.path().string());
  }
  if (ec) return NotFound("--photos " + dir + ": " + ec.message());
  std::sort(paths.begin(), paths.end());
  std::vector<Photo> photos;
  JpegDecoder decoder;
  for (const std::string& path : paths) {
    if (static_cast<int>(photos.size()) == needed) break;
    ASSIGN_OR_RETURN(std::string data, ReadFileToString(path));
    if (SniffImageFormat(data) != "JPEG") continue;
    Image full;
    Status s = decoder.Decode(data, &full);
    if (!s.ok()) return s.WithContext("--photos " + path);
    Photo p;
    p.name = std::filesystem::path(path).stem().string();
    int short_side = std::min(full.width, full.height);
    if (short_side > kPhotoMaxShortSide) {
      double f = static_cast<double>(kPhotoMaxShortSide) / short_side;
      p.image.Resize(std::max(1, static_cast<int>(full.width * f)),
                     std::max(1, static_cast<int>(full.height * f)));
      Resize(full.view(), p.image.pixels.data(), p.image.width, p.image.height,
             static_cast<size_t>(p.image.width) * 3);
    } else {
      p.image = std::move(full);
    }
    photos.push_back(std::move(p));
  }
  if (static_cast<int>(photos.size()) < needed) {
    return InvalidArgument(fmt::format("--classes {} needs {} JPEG photos in {}, found {}", needed,
                                       needed, dir, photos.size()));
  }
  return photos;
}

// xorshift-style generator; quality is ample for pixels and it is fast.
struct FastRng {
  uint64_t s;
  uint64_t Next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  }
};

// Standard normal deviates, looked up by random index: sensor noise needs the shape, not a fresh
// Box–Muller per pixel.
const std::vector<float>& NormalTable() {
  static const std::vector<float> table = [] {
    std::vector<float> t(1 << 16);
    std::mt19937_64 rng(42);
    std::normal_distribution<float> n(0.f, 1.f);
    for (float& v : t) v = n(rng);
    return t;
  }();
  return table;
}

// Shot noise grows with the square root of the signal, read noise is a floor, and a little
// independent chroma noise rides on top — roughly what a camera sensor at low ISO gives. The
// strength used below is calibrated so libjpeg-turbo decodes the result at ~1,600 img/s per core
// here (~2 bits per pixel), the yardstick DESIGN.md gives for ImageNet-like photographs.
void AddSensorNoise(Image* img, uint64_t seed, float strength) {
  const std::vector<float>& normal = NormalTable();
  FastRng rng{seed | 1};
  uint8_t* p = img->pixels.data();
  size_t n = static_cast<size_t>(img->width) * img->height;
  for (size_t i = 0; i < n; ++i, p += 3) {
    uint64_t r = rng.Next();
    float luma = 0.299f * p[0] + 0.587f * p[1] + 0.114f * p[2];
    float sigma = strength * (1.0f + 0.22f * std::sqrt(luma));
    float common = normal[r & 0xffff] * sigma;
    for (int c = 0; c < 3; ++c) {
      float chroma = normal[(r >> (16 + 16 * c)) & 0xffff] * strength * 0.8f;
      float v = p[c] + common + chroma;
      p[c] = static_cast<uint8_t>(std::clamp(v + 0.5f, 0.f, 255.f));
    }
  }
}

void HsvToRgb(float h, float s, float v, float rgb[3]) {
  h = h - std::floor(h);
  float i = std::floor(h * 6), f = h * 6 - i;
  float p = v * (1 - s), q = v * (1 - f * s), t = v * (1 - (1 - f) * s);
  switch (static_cast<int>(i) % 6) {
    case 0: rgb[0] = v, rgb[1] = t, rgb[2] = p; break;
    case 1: rgb[0] = q, rgb[1] = v, rgb[2] = p; break;
    case 2: rgb[0] = p, rgb[1] = v, rgb[2] = t; break;
    case 3: rgb[0] = p, rgb[1] = q, rgb[2] = v; break;
    case 4: rgb[0] = t, rgb[1] = p, rgb[2] = v; break;
    default: rgb[0] = v, rgb[1] = p, rgb[2] = q; break;
  }
}

// Class k: a palette (two hues), a pattern family (grating, rings or checks), a frequency and an
// orientation, each jittered per image, plus a few soft distractor blobs in random colours.
void DrawPattern(int label, std::mt19937_64& rng, Image* img) {
  std::uniform_real_distribution<float> u(0.f, 1.f);
  const float golden = 0.6180339887f;
  float hue = label * golden;
  float freq = (4.0f + static_cast<float>((label * 7) % 13)) * (0.85f + 0.3f * u(rng));
  float angle = (static_cast<float>((label * 37) % 180) + (u(rng) - 0.5f) * 20.f) * 3.14159265f / 180;
  int family = label % 3;
  float phase = u(rng) * 6.2831853f;
  float a[3], b[3];
  HsvToRgb(hue + (u(rng) - 0.5f) * 0.04f, 0.55f + 0.3f * u(rng), 0.75f + 0.2f * u(rng), a);
  HsvToRgb(hue + 0.5f, 0.4f + 0.3f * u(rng), 0.25f + 0.3f * u(rng), b);
  struct Blob {
    float x, y, r, c[3];
  };
  std::vector<Blob> blobs(3 + rng() % 4);
  for (Blob& bl : blobs) {
    bl.x = u(rng) * img->width;
    bl.y = u(rng) * img->height;
    bl.r = (0.05f + 0.15f * u(rng)) * std::min(img->width, img->height);
    HsvToRgb(u(rng), 0.3f + 0.6f * u(rng), 0.3f + 0.7f * u(rng), bl.c);
  }
  const float cs = std::cos(angle), sn = std::sin(angle);
  const float inv = 1.0f / std::max(img->width, img->height);
  const float cx = img->width * 0.5f * (0.8f + 0.4f * u(rng));
  const float cy = img->height * 0.5f * (0.8f + 0.4f * u(rng));
  for (int y = 0; y < img->height; ++y) {
    uint8_t* row = img->pixels.data() + static_cast<size_t>(y) * img->width * 3;
    for (int x = 0; x < img->width; ++x) {
      float fx = x * inv, fy = y * inv, t;
      switch (family) {
        case 0: t = std::sin((fx * cs + fy * sn) * freq * 6.2831853f + phase); break;
        case 1: t = std::sin(std::hypot(x - cx, y - cy) * inv * freq * 6.2831853f + phase); break;
        default:
          t = std::sin((fx * cs + fy * sn) * freq * 3.14159265f + phase) *
              std::sin((fx * sn - fy * cs) * freq * 3.14159265f);
          break;
      }
      float w = 0.5f + 0.5f * t;
      float c[3] = {a[0] * w + b[0] * (1 - w), a[1] * w + b[1] * (1 - w), a[2] * w + b[2] * (1 - w)};
      for (const Blob& bl : blobs) {
        float d2 = ((x - bl.x) * (x - bl.x) + (y - bl.y) * (y - bl.y)) / (bl.r * bl.r);
        if (d2 < 1) {
          float k = (1 - d2) * (1 - d2);
          for (int i = 0; i < 3; ++i) c[i] = c[i] * (1 - k) + bl.c[i] * k;
        }
      }
      for (int i = 0; i < 3; ++i) row[x * 3 + i] = static_cast<uint8_t>(c[i] * 255.f + 0.5f);
    }
  }
}

// A crop of the photo with the output's aspect, covering 30–100% of the largest such window,
// resized to the output size and mirrored half the time.
void CropPhoto(const Image& photo, std::mt19937_64& rng, Image* img) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  double aspect = static_cast<double>(img->width) / img->height;
  double max_w = std::min<double>(photo.width, photo.height * aspect);
  double scale = std::sqrt(0.3 + 0.7 * u(rng));
  int cw = std::max(1, static_cast<int>(max_w * scale));
  int ch = std::max(1, std::min(photo.height, static_cast<int>(cw / aspect)));
  int x = static_cast<int>(u(rng) * (photo.width - cw + 1));
  int y = static_cast<int>(u(rng) * (photo.height - ch + 1));
  x = std::clamp(x, 0, photo.width - cw);
  y = std::clamp(y, 0, photo.height - ch);
  const bool flip = (rng() & 1) != 0;
  Resize(photo.view().Crop(x, y, cw, ch), img->pixels.data(), img->width, img->height,
         static_cast<size_t>(img->width) * 3, flip);
}

struct Worker {
  JpegEncoder encoder;
  Image image;
  std::string jpeg;
};

Status MakeImage(uint64_t id, int label, const std::vector<Photo>& photos, uint64_t seed,
                 Worker* w, std::string* jpeg, int* width, int* height) {
  std::mt19937_64 rng(MixSeed(seed, id));
  std::uniform_real_distribution<double> u(0.0, 1.0);
  int short_side = 300 + static_cast<int>(rng() % 201);
  double aspect = std::exp(std::log(4.0 / 3.0) * (2 * u(rng) - 1));  // 3:4 … 4:3
  int long_side = static_cast<int>(short_side * std::max(aspect, 1 / aspect) + 0.5);
  bool landscape = aspect >= 1;
  w->image.Resize(landscape ? long_side : short_side, landscape ? short_side : long_side);
  if (photos.empty()) {
    DrawPattern(label, rng, &w->image);
  } else {
    CropPhoto(photos[label].image, rng, &w->image);
  }
  AddSensorNoise(&w->image, rng(), 0.4f + 0.5f * static_cast<float>(u(rng)));
  JpegEncodeOptions eo;
  eo.quality = 90 + static_cast<int>(rng() % 6);
  jpeg->clear();
  RETURN_IF_ERROR(w->encoder.Encode(w->image.view(), eo, jpeg));
  *width = w->image.width;
  *height = w->image.height;
  return Status::OK();
}

int RunSynth(const SynthOptions& opt) {
  std::vector<Photo> photos;
  std::vector<std::string> class_names;
  if (!opt.photos.empty()) {
    Result<std::vector<Photo>> loaded = LoadPhotos(opt.photos, opt.classes);
    if (!loaded.ok()) {
      fmt::print(stderr, "sluice synth: {}\n", loaded.status().message());
      return 1;
    }
    photos = std::move(*loaded);
    for (const Photo& p : photos) class_names.push_back(p.name);
  } else {
    for (int k = 0; k < opt.classes; ++k) class_names.push_back(fmt::format("class_{:03d}", k));
  }
  // Item i has class i % K, so classes are balanced; the split shuffles them.
  std::vector<int> labels(opt.images);
  for (uint64_t i = 0; i < opt.images; ++i) labels[i] = static_cast<int>(i % opt.classes);
  tbb::enumerable_thread_specific<Worker> workers;
  Status s = WriteDataset(
      opt.layout, "synth", labels, class_names,
      [&](uint64_t id, std::string* record) {
        int label = labels[id];
        Worker& w = workers.local();
        int width = 0, height = 0;
        RETURN_IF_ERROR(MakeImage(id, label, photos, opt.layout.seed, &w, &w.jpeg, &width, &height));
        std::string filename = fmt::format("synth_{:08d}.jpg", id);
        *record = EncodeImageExample({w.jpeg, label, class_names[label], height, width, filename});
        return Status::OK();
      },
      [](uint64_t, const Status&) { return false; });
  if (!s.ok()) {
    fmt::print(stderr, "sluice synth: {}\n", s.message());
    return 1;
  }
  return 0;
}

}  // namespace

void RegisterSynthCommand(CLI::App& app, int* exit_code) {
  auto opt = std::make_shared<SynthOptions>();
  CLI::App* cmd = app.add_subcommand(
      "synth", "Write an ImageNet-like demo set (300-500 px JPEGs, q90-95, sensor noise)");
  cmd->add_option("--images", opt->images, "Images in all (train + validation)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{100'000'000}))
      ->capture_default_str();
  cmd->add_option("--classes", opt->classes, "Classes")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  cmd->add_option("--photos", opt->photos,
                  "Directory of JPEG photos; class k is crops of photo k (sorted by name)");
  AddDatasetLayoutFlags(cmd, &opt->layout);
  cmd->callback([opt, exit_code] { *exit_code = RunSynth(*opt); });
}

}  // namespace sluice
