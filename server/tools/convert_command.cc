// `sluice convert --from DIR --out DIR`: an ImageFolder tree (one subfolder per class) into
// shuffled TFRecord shards with ImageNet's feature keys, a labels.txt and .idx files. Every image
// is decoded once to prove it is usable; grayscale and CMYK JPEGs are re-encoded as RGB JPEG (what
// trainers and tf.io.decode_jpeg(channels=3) expect); PNGs are stored as they are (image/format
// "PNG", which tf.io.decode_image and Sluice read) or, with --png jpeg, re-encoded the same way for
// consumers that call tf.io.decode_jpeg or decode_and_crop_jpeg (alpha dropped, as
// ALPHA_DROP does); WebPs likewise (image/format "WEBP", which Sluice reads and TensorFlow 2.18's
// tf.io.decode_image does not), or with --webp jpeg re-encoded; anything else that is not a
// decodable JPEG, PNG or still WebP is skipped and listed with the reason.
#include <fmt/format.h>
#include <tbb/enumerable_thread_specific.h>

#include <map>
#include <string>
#include <vector>

#include "formats/file.h"
#include "formats/image_example.h"
#include "formats/image_folder.h"
#include "formats/jpeg_codec.h"
#include "formats/jpeg_header.h"
#include "formats/png_codec.h"
#include "formats/webp_codec.h"
#include "server/commands.h"
#include "server/tools/dataset_writer.h"

namespace sluice {
namespace {

constexpr int kReencodeQuality = 95;

// What becomes of a PNG (--png) or a WebP (--webp).
enum class ImageOutput { kKeep, kJpeg };

struct ConvertOptions {
  std::string from;
  DatasetLayoutOptions layout;
  int64_t max_pixels = kDefaultMaxPixels;
  ImageOutput png = ImageOutput::kKeep;
  ImageOutput webp = ImageOutput::kKeep;
};

struct Codec {
  JpegDecoder decoder;
  JpegEncoder encoder;
  PngDecoder png;
  Image image;
  std::string jpeg;
};

// Reads, checks and encodes one image; a non-OK status says why it is skipped.
Status MakeRecord(const ImageFolder& folder, const ImageFolderEntry& entry,
                  const ConvertOptions& opt, Codec* codec, std::string* record) {
  ASSIGN_OR_RETURN(std::string data, ReadFileToString(entry.path));
  std::string_view format = SniffImageFormat(data);
  if (format == "empty") return InvalidArgument("empty file");
  std::string_view encoded = data;
  bool reencode = false;
  if (format == "PNG") {
    Status decoded = codec->png.Decode(data, Alpha::kDrop, &codec->image, opt.max_pixels);
    if (!decoded.ok()) return decoded.WithContext("does not decode");
    reencode = opt.png == ImageOutput::kJpeg;
  } else if (format == "WebP") {
    Status decoded = DecodeWebp(data, Alpha::kDrop, &codec->image, opt.max_pixels);
    if (!decoded.ok()) return decoded.WithContext("does not decode");
    format = "WEBP";
    reencode = opt.webp == ImageOutput::kJpeg;
  } else {
    if (format != "JPEG") {
      return InvalidArgument(fmt::format("not a JPEG, PNG or WebP ({})", format));
    }
    ASSIGN_OR_RETURN(JpegHeader header, ReadJpegHeader(data));
    Status decoded = codec->decoder.Decode(data, &codec->image, opt.max_pixels);
    if (!decoded.ok()) return decoded.WithContext("does not decode");
    reencode = header.color_space != JpegColorSpace::kYCbCr;
  }
  if (reencode) {
    codec->jpeg.clear();
    JpegEncodeOptions eo;
    eo.quality = kReencodeQuality;
    RETURN_IF_ERROR(codec->encoder.Encode(codec->image.view(), eo, &codec->jpeg));
    encoded = codec->jpeg;
    format = "JPEG";
  }
  ImageRecord r;
  r.jpeg = encoded;
  r.format = format;
  r.label = entry.label;
  r.class_text = folder.classes[entry.label];
  r.height = codec->image.height;
  r.width = codec->image.width;
  r.filename = entry.relative;
  *record = EncodeImageExample(r);
  return Status::OK();
}

int RunConvert(const ConvertOptions& opt) {
  Result<ImageFolder> folder = ScanImageFolder(opt.from);
  if (!folder.ok()) {
    fmt::print(stderr, "sluice convert: {}\n", folder.status().message());
    return 1;
  }
  std::vector<int> labels;
  for (const ImageFolderEntry& e : folder->entries) labels.push_back(e.label);
  tbb::enumerable_thread_specific<Codec> codecs;
  std::vector<std::string> skipped;
  Status s = WriteDataset(
      opt.layout, "convert", labels, folder->classes,
      [&](uint64_t id, std::string* record) {
        return MakeRecord(*folder, folder->entries[id], opt, &codecs.local(), record);
      },
      [&](uint64_t id, const Status& why) {
        skipped.push_back(fmt::format("{}: {}", folder->entries[id].path, why.message()));
        return true;
      });
  if (!s.ok()) {
    fmt::print(stderr, "sluice convert: {}\n", s.message());
    return 1;
  }
  if (!skipped.empty()) {
    fmt::print(stderr, "sluice convert: skipped {} files:\n", skipped.size());
    for (const std::string& line : skipped) fmt::print(stderr, "  {}\n", line);
  }
  return 0;
}

}  // namespace

void RegisterConvertCommand(CLI::App& app, int* exit_code) {
  auto opt = std::make_shared<ConvertOptions>();
  CLI::App* cmd = app.add_subcommand(
      "convert", "Turn an ImageFolder tree (one subfolder per class) into TFRecord shards");
  cmd->add_option("--from", opt->from, "Root of the image tree")->required();
  AddDatasetLayoutFlags(cmd, &opt->layout);
  cmd->add_option("--max-pixels", opt->max_pixels, "Skip images larger than this")
      ->capture_default_str();
  const std::map<std::string, ImageOutput> outputs = {{"keep", ImageOutput::kKeep},
                                                      {"jpeg", ImageOutput::kJpeg}};
  cmd->add_option("--png", opt->png,
                  "keep (default): PNGs stored as they are, for tf.io.decode_image and Sluice; "
                  "jpeg: re-encoded as RGB JPEG quality 95, alpha dropped, for tf.io.decode_jpeg")
      ->transform(CLI::CheckedTransformer(outputs));
  cmd->add_option("--webp", opt->webp,
                  "keep (default): WebPs stored as they are (image/format WEBP), for Sluice; "
                  "jpeg: re-encoded as RGB JPEG quality 95, alpha dropped, for TensorFlow's "
                  "decoders, which do not read WebP")
      ->transform(CLI::CheckedTransformer(outputs));
  cmd->callback([opt, exit_code] { *exit_code = RunConvert(*opt); });
}

}  // namespace sluice
