#include "formats/jpeg_roi_decoder.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "formats/image_ops.h"
#include "formats/jpeg_error.h"
#include "formats/jpeg_scanlines.h"

namespace sluice {
namespace {

using jpeg_internal::AskDecodeGate;
using jpeg_internal::ChooseRgbOutput;
using jpeg_internal::CreateDecompress;
using jpeg_internal::ErrorManager;
using jpeg_internal::EstimateDecompressFrame;
using jpeg_internal::InitErrorManager;
using jpeg_internal::LimitDecompressMemory;
using jpeg_internal::MakeRowTarget;
using jpeg_internal::MemoryLimitError;
using jpeg_internal::OverMemoryLimit;
using jpeg_internal::Phase;
using jpeg_internal::ProgressMonitor;
using jpeg_internal::ReadHeaderFrame;
using jpeg_internal::ReadScanlines;
using jpeg_internal::RowTarget;

// Rows after the crop are never read, so a file cut short below the crop decodes fine: the pixels
// we return are exactly those of the complete file (jpeg_error.h has the truncation policy).

// True when some component is upsampled horizontally after the IDCT. At 1/2 and below libjpeg
// scales subsampled chroma up in the IDCT itself; at full size 4:2:0 and 4:2:2 chroma go through
// the "fancy" upsampler, which blends each sample with its neighbours but treats the edges of a
// cropped row as image edges. A column of margin on each side keeps those edges out of the crop.
bool UpsamplesHorizontally(j_decompress_ptr cinfo) {
  for (int c = 0; c < cinfo->num_components; ++c) {
    const jpeg_component_info& comp = cinfo->comp_info[c];
    if (comp.h_samp_factor * comp.DCT_scaled_size <
        cinfo->max_h_samp_factor * cinfo->min_DCT_scaled_size) {
      return true;
    }
  }
  return false;
}

// More setjmp frames (see jpeg_error.h): false after a libjpeg error, the object reset.

// Starts decompression at the scale already set in cinfo and restricts it to the scaled columns
// [first, end) plus the upsampling margin; libjpeg widens that leftwards to an iMCU boundary and
// returns the columns it will deliver in *xoffset and *width.
bool StartCropFrame(j_decompress_ptr cinfo, ErrorManager* err, int first, int end,
                    JDIMENSION* xoffset, JDIMENSION* width) {
  if (setjmp(err->jump)) {
    jpeg_abort_decompress(cinfo);
    return false;
  }
  err->phase = Phase::kDecode;
  jpeg_start_decompress(cinfo);
  const int margin = UpsamplesHorizontally(cinfo) ? 1 : 0;
  const int last = static_cast<int>(cinfo->output_width);
  *xoffset = static_cast<JDIMENSION>(std::max(first - margin, 0));
  *width = static_cast<JDIMENSION>(std::min(end + margin, last)) - *xoffset;
  jpeg_crop_scanline(cinfo, xoffset, width);
  return true;
}

// Skips `skip` rows, reads the next `count` into target and stops there: jpeg_abort_decompress
// drops the rest unread.
//
// One skip, from row 0, before any read: libjpeg-turbo's skip is at its most robust there (its
// known faults involve skips that start inside a row group), and it still decodes the iMCU row
// above the first kept row when the upsampler needs it as context, so the crop's first rows match
// a full decode exactly.
bool ReadRowsFrame(j_decompress_ptr cinfo, ErrorManager* err, JDIMENSION skip, JDIMENSION count,
                   const RowTarget& target) {
  if (setjmp(err->jump)) {
    jpeg_abort_decompress(cinfo);
    return false;
  }
  if (skip > 0) jpeg_skip_scanlines(cinfo, skip);
  if (!ReadScanlines(cinfo, err, skip + count, target)) return false;
  jpeg_abort_decompress(cinfo);
  return true;
}

JpegColorSpace ToColorSpace(J_COLOR_SPACE c) {
  switch (c) {
    case JCS_GRAYSCALE:
      return JpegColorSpace::kGray;
    case JCS_YCbCr:
      return JpegColorSpace::kYCbCr;
    case JCS_RGB:
      return JpegColorSpace::kRGB;
    case JCS_CMYK:
      return JpegColorSpace::kCMYK;
    case JCS_YCCK:
      return JpegColorSpace::kYCCK;
    default:
      return JpegColorSpace::kUnknown;
  }
}

std::string Dimensions(int64_t w, int64_t h) { return std::to_string(w) + "x" + std::to_string(h); }

// The DCT scales libjpeg-turbo runs with SIMD (the others are slower than a full decode).
constexpr int kScaleDenoms[] = {8, 4, 2, 1};

// Which part of the image to decode, at which scale, all in scaled pixels.
struct Plan {
  int denom = 1;
  int scaled_width = 0;  // the whole image at 1/denom, as libjpeg sizes it (rounded up)
  int scaled_height = 0;
  int x = 0;  // the crop
  int y = 0;
  int width = 0;
  int height = 0;
};

int DivRoundUp(int a, int b) { return (a + b - 1) / b; }
// round(a / b) for a >= 0, b > 0, halves up.
int DivRound(int a, int b) { return (2 * a + b) / (2 * b); }

// Scaled pixel i averages source pixels [i * denom, (i + 1) * denom) (the last one whatever is
// left of the image). Each edge of the crop goes to the nearest multiple of denom, so the decoded
// window is within half a scaled pixel of the exact one on every side; a partial last pixel is in
// or out by the same rule, as the resize treats it as a whole one. Rounding both edges also keeps
// the window at least the output size: round(b) - round(a) >= floor(b - a) for any a <= b.
struct Span {
  int begin = 0;
  int size = 0;
};
Span ScaleSpan(int begin, int size, int denom, int scaled_full) {
  const int scaled_end = std::min(DivRound(begin + size, denom), scaled_full);
  const int first = std::min(DivRound(begin, denom), scaled_end - 1);
  return Span{first, scaled_end - first};
}

// The largest denominator that leaves the crop at least the output size, so DCT scaling never
// costs resolution that the resize would then have to invent.
Plan MakePlan(int image_width, int image_height, const CropWindow& crop, int out_width,
              int out_height) {
  Plan p;
  for (int denom : kScaleDenoms) {
    if (crop.width >= int64_t{out_width} * denom && crop.height >= int64_t{out_height} * denom) {
      p.denom = denom;
      break;
    }
  }
  p.scaled_width = DivRoundUp(image_width, p.denom);
  p.scaled_height = DivRoundUp(image_height, p.denom);
  const Span columns = ScaleSpan(crop.x, crop.width, p.denom, p.scaled_width);
  const Span rows = ScaleSpan(crop.y, crop.height, p.denom, p.scaled_height);
  p.x = columns.begin;
  p.width = columns.size;
  p.y = rows.begin;
  p.height = rows.size;
  return p;
}

}  // namespace

struct JpegRoiDecoder::State {
  bool fast_idct = false;
  jpeg_decompress_struct cinfo;
  ErrorManager err;
  jpeg_progress_mgr progress;
  bool created = false;
  std::vector<uint8_t> rows;      // the decoded crop rows, RGB; grown to the largest crop seen
  std::vector<uint8_t> cmyk_row;  // one row in CMYK before conversion

  State() {
    std::memset(&cinfo, 0, sizeof(cinfo));
    std::memset(&progress, 0, sizeof(progress));
    InitErrorManager(&err);
    cinfo.err = &err.pub;
    created = CreateDecompress(&cinfo, &err);
    progress.progress_monitor = ProgressMonitor;
    cinfo.progress = &progress;
  }
  ~State() {
    if (created) jpeg_destroy_decompress(&cinfo);
  }

  Status Invalid() const { return InvalidArgument(std::string("invalid JPEG: ") + err.message); }

  // Parses the header of jpeg into cinfo and checks its size. On error, cinfo is reset.
  Status Start(std::string_view jpeg, int64_t max_pixels) {
    if (SniffImageFormat(jpeg) != "JPEG") {  // say what it is instead ("PNG image, not JPEG")
      Status named = ReadJpegHeader(jpeg).status();
      return named.ok() ? InvalidArgument("not a JPEG image") : named;
    }
    if (!created) return Internal(std::string("libjpeg initialisation failed: ") + err.message);
    if (!ReadHeaderFrame(&cinfo, &err, reinterpret_cast<const uint8_t*>(jpeg.data()),
                         jpeg.size())) {
      return Invalid();
    }
    const int64_t width = cinfo.image_width;
    const int64_t height = cinfo.image_height;
    if (width * height > max_pixels) {
      jpeg_abort_decompress(&cinfo);
      return InvalidArgument("image of " + Dimensions(width, height) + " = " +
                             std::to_string(width * height) + " pixels exceeds max_pixels " +
                             std::to_string(max_pixels));
    }
    return Status::OK();
  }
};

JpegRoiDecoder::JpegRoiDecoder(bool fast_idct) : state_(std::make_unique<State>()) {
  state_->fast_idct = fast_idct;
}
JpegRoiDecoder::~JpegRoiDecoder() = default;

Result<JpegHeader> JpegRoiDecoder::ReadHeader(std::string_view jpeg, int64_t max_pixels) {
  State& s = *state_;
  RETURN_IF_ERROR(s.Start(jpeg, max_pixels));
  JpegHeader header;
  header.width = static_cast<int>(s.cinfo.image_width);
  header.height = static_cast<int>(s.cinfo.image_height);
  header.components = s.cinfo.num_components;
  header.color_space = ToColorSpace(s.cinfo.jpeg_color_space);
  header.progressive = s.cinfo.progressive_mode != FALSE;
  jpeg_abort_decompress(&s.cinfo);
  return header;
}

Status JpegRoiDecoder::DecodeCrop(std::string_view jpeg, const CropWindow& crop, int out_width,
                                  int out_height, bool flip, uint8_t* out, size_t out_stride,
                                  int64_t max_pixels, RoiDecodeStats* stats,
                                  const DecodeMemoryGate* gate) {
  return DecodeCrop(jpeg, crop, out_width, out_height,
                    ResizeOptions{ResizeFilter::kBilinear, flip, /*flip_vertical=*/false}, out,
                    out_stride, max_pixels, stats, gate);
}

Status JpegRoiDecoder::DecodeCrop(std::string_view jpeg, const CropWindow& crop, int out_width,
                                  int out_height, const ResizeOptions& options, uint8_t* out,
                                  size_t out_stride, int64_t max_pixels, RoiDecodeStats* stats,
                                  const DecodeMemoryGate* gate) {
  if (out_width <= 0 || out_height <= 0 || out == nullptr ||
      out_stride < static_cast<size_t>(out_width) * 3) {
    return InvalidArgument("bad output of " + Dimensions(out_width, out_height) + " with stride " +
                           std::to_string(out_stride));
  }
  State& s = *state_;
  j_decompress_ptr cinfo = &s.cinfo;
  RETURN_IF_ERROR(s.Start(jpeg, max_pixels));
  const int width = static_cast<int>(cinfo->image_width);
  const int height = static_cast<int>(cinfo->image_height);
  if (crop.x < 0 || crop.y < 0 || crop.width <= 0 || crop.height <= 0 ||
      crop.width > width - crop.x || crop.height > height - crop.y) {
    jpeg_abort_decompress(cinfo);
    return InvalidArgument("crop " + Dimensions(crop.width, crop.height) + "+" +
                           std::to_string(crop.x) + "+" + std::to_string(crop.y) +
                           " is not inside the " + Dimensions(width, height) + " image");
  }

  bool cmyk = false;
  RETURN_IF_ERROR(ChooseRgbOutput(cinfo, &cmyk));
  // By default the same IDCT as JpegDecoder, so a crop decoded either way agrees exactly; the fast
  // one (tf.io.decode_jpeg's default) is ~3% quicker here. The scaled IDCTs ignore the choice.
  cinfo->dct_method = s.fast_idct ? JDCT_IFAST : JDCT_ISLOW;
  const Plan plan = MakePlan(width, height, crop, out_width, out_height);
  cinfo->scale_num = 1;
  cinfo->scale_denom = static_cast<unsigned int>(plan.denom);

  int64_t libjpeg_bytes = 0;
  bool multi_scan = false;
  if (!EstimateDecompressFrame(cinfo, &s.err, &libjpeg_bytes, &multi_scan)) return s.Invalid();
  // libjpeg widens the crop leftwards to an iMCU boundary (at most 32 scaled columns) and by a
  // column of upsampling margin on each side.
  const int64_t row_bytes =
      (int64_t{plan.width} + 34) * 3 * plan.height + (cmyk ? int64_t{cinfo->output_width} * 4 : 0);
  RETURN_IF_ERROR(AskDecodeGate(cinfo, gate, libjpeg_bytes + row_bytes, multi_scan));
  LimitDecompressMemory(cinfo, libjpeg_bytes);
  auto failed = [&] {
    return OverMemoryLimit(s.err) ? MemoryLimitError(libjpeg_bytes) : s.Invalid();
  };

  JDIMENSION xoffset = 0;
  JDIMENSION columns = 0;
  if (!StartCropFrame(cinfo, &s.err, plan.x, plan.x + plan.width, &xoffset, &columns)) {
    return failed();
  }

  const size_t stride = static_cast<size_t>(columns) * 3;
  s.rows.resize(stride * plan.height);
  const RowTarget target = MakeRowTarget(cinfo, cmyk, columns, s.rows.data(), stride,
                                         static_cast<JDIMENSION>(plan.y), &s.cmyk_row);
  const bool read = ReadRowsFrame(cinfo, &s.err, static_cast<JDIMENSION>(plan.y),
                                  static_cast<JDIMENSION>(plan.height), target);
  if (read) {
    const ImageView decoded{s.rows.data(), static_cast<int>(columns), plan.height, stride};
    const ImageView window =
        decoded.Crop(plan.x - static_cast<int>(xoffset), 0, plan.width, plan.height);
    Resize(window, out, out_width, out_height, out_stride, options);
  }
  if (s.rows.capacity() > kKeptRowsBytes) std::vector<uint8_t>().swap(s.rows);
  if (!read) return failed();
  if (stats != nullptr) {
    stats->scale_denom = plan.denom;
    stats->rows_decoded = plan.y + plan.height;
    stats->rows_total = plan.scaled_height;
  }
  return Status::OK();
}

}  // namespace sluice
