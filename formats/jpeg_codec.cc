#include "formats/jpeg_codec.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "formats/jpeg_error.h"
#include "formats/jpeg_header.h"
#include "formats/jpeg_scanlines.h"

namespace sluice {
namespace {

using jpeg_internal::AskDecodeGate;
using jpeg_internal::ChooseRgbOutput;
using jpeg_internal::CreateDecompress;
using jpeg_internal::ErrorManager;
using jpeg_internal::EstimateDecompressFrame;
using jpeg_internal::InitErrorManager;
using jpeg_internal::kRowBatch;
using jpeg_internal::LimitDecompressMemory;
using jpeg_internal::MakeRowTarget;
using jpeg_internal::MemoryLimitError;
using jpeg_internal::OverMemoryLimit;
using jpeg_internal::Phase;
using jpeg_internal::ProgressMonitor;
using jpeg_internal::ReadHeaderFrame;
using jpeg_internal::ReadScanlines;
using jpeg_internal::RowTarget;

// Decodes every row into target.
bool DecodeRows(j_decompress_ptr cinfo, ErrorManager* err, const RowTarget& target) {
  if (setjmp(err->jump)) {
    jpeg_abort_decompress(cinfo);
    return false;
  }
  err->phase = Phase::kDecode;
  jpeg_start_decompress(cinfo);
  if (!ReadScanlines(cinfo, err, cinfo->output_height, target)) return false;
  jpeg_finish_decompress(cinfo);
  return true;
}

}  // namespace

struct JpegDecoder::State {
  jpeg_decompress_struct cinfo;
  ErrorManager err;
  jpeg_progress_mgr progress;
  bool created = false;
  std::vector<uint8_t> cmyk_row;

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
};

JpegDecoder::JpegDecoder() : state_(std::make_unique<State>()) {}
JpegDecoder::~JpegDecoder() = default;

Status JpegDecoder::Decode(std::string_view data, Image* out, int64_t max_pixels,
                           const DecodeMemoryGate* gate) {
  // Names what the data is instead ("PNG image, not JPEG"), without walking the markers.
  if (SniffImageFormat(data) != "JPEG") return ReadJpegHeader(data).status();
  State& s = *state_;
  if (!s.created) return Internal(std::string("libjpeg initialisation failed: ") + s.err.message);
  j_decompress_ptr cinfo = &s.cinfo;
  auto invalid = [&s] { return InvalidArgument(std::string("invalid JPEG: ") + s.err.message); };

  if (!ReadHeaderFrame(cinfo, &s.err, reinterpret_cast<const uint8_t*>(data.data()), data.size())) {
    return invalid();
  }
  const int64_t width = cinfo->image_width;
  const int64_t height = cinfo->image_height;
  if (width * height > max_pixels) {
    jpeg_abort_decompress(cinfo);
    return InvalidArgument("image of " + std::to_string(width) + "x" + std::to_string(height) +
                           " = " + std::to_string(width * height) + " pixels exceeds max_pixels " +
                           std::to_string(max_pixels));
  }
  bool cmyk = false;
  RETURN_IF_ERROR(ChooseRgbOutput(cinfo, &cmyk));
  cinfo->dct_method = JDCT_ISLOW;

  int64_t libjpeg_bytes = 0;
  bool multi_scan = false;
  if (!EstimateDecompressFrame(cinfo, &s.err, &libjpeg_bytes, &multi_scan)) return invalid();
  const int64_t pixel_bytes = width * height * 3 + (cmyk ? width * 4 : 0);
  RETURN_IF_ERROR(AskDecodeGate(cinfo, gate, libjpeg_bytes + pixel_bytes, multi_scan));
  LimitDecompressMemory(cinfo, libjpeg_bytes);

  out->Resize(static_cast<int>(width), static_cast<int>(height));
  const RowTarget target =
      MakeRowTarget(cinfo, cmyk, static_cast<JDIMENSION>(width), out->pixels.data(),
                    static_cast<size_t>(width) * 3, /*first_row=*/0, &s.cmyk_row);
  if (!DecodeRows(cinfo, &s.err, target)) {
    if (OverMemoryLimit(s.err)) return MemoryLimitError(libjpeg_bytes);
    return invalid();
  }
  return Status::OK();
}

namespace {

// A destination that grows one malloc'd buffer, kept across calls so steady-state encoding does not
// allocate. realloc failure is reported through libjpeg's error path, not an exception.
struct GrowingDestination {
  jpeg_destination_mgr pub;  // first, so cinfo->dest can be cast back
  uint8_t* buffer = nullptr;
  size_t capacity = 0;
  size_t size = 0;  // bytes written, valid after jpeg_finish_compress
};

constexpr size_t kInitialCapacity = size_t{64} * 1024;

GrowingDestination* GetDestination(j_compress_ptr cinfo) {
  return reinterpret_cast<GrowingDestination*>(cinfo->dest);
}

// Doubles the buffer, keeping what it holds.
void GrowDestination(j_compress_ptr cinfo, GrowingDestination* d) {
  const size_t capacity = d->capacity < kInitialCapacity ? kInitialCapacity : d->capacity * 2;
  auto* grown = static_cast<uint8_t*>(std::realloc(d->buffer, capacity));
  if (grown == nullptr) ERREXIT1(cinfo, JERR_OUT_OF_MEMORY, 0);
  d->buffer = grown;
  d->capacity = capacity;
}

// libjpeg stores a byte before it checks for room, so the buffer must never start empty.
void InitDestination(j_compress_ptr cinfo) {
  GrowingDestination* d = GetDestination(cinfo);
  if (d->capacity == 0) GrowDestination(cinfo, d);
  d->size = 0;
  d->pub.next_output_byte = d->buffer;
  d->pub.free_in_buffer = d->capacity;
}

// Called only when the buffer is full.
boolean EmptyOutputBuffer(j_compress_ptr cinfo) {
  GrowingDestination* d = GetDestination(cinfo);
  const size_t used = d->capacity;
  GrowDestination(cinfo, d);
  d->pub.next_output_byte = d->buffer + used;
  d->pub.free_in_buffer = d->capacity - used;
  return TRUE;
}

void TermDestination(j_compress_ptr cinfo) {
  GrowingDestination* d = GetDestination(cinfo);
  d->size = d->capacity - d->pub.free_in_buffer;
}

bool CreateCompress(j_compress_ptr cinfo, ErrorManager* err) {
  if (setjmp(err->jump)) return false;
  jpeg_create_compress(cinfo);
  return true;
}

bool EncodeRows(j_compress_ptr cinfo, ErrorManager* err, const ImageView& image, int quality,
                bool subsample_420) {
  if (setjmp(err->jump)) {
    jpeg_abort_compress(cinfo);
    return false;
  }
  err->phase = Phase::kEncode;
  cinfo->image_width = static_cast<JDIMENSION>(image.width);
  cinfo->image_height = static_cast<JDIMENSION>(image.height);
  cinfo->input_components = 3;
  cinfo->in_color_space = JCS_EXT_RGB;
  jpeg_set_defaults(cinfo);
  jpeg_set_quality(cinfo, quality, TRUE);
  const int luma_factor = subsample_420 ? 2 : 1;
  cinfo->comp_info[0].h_samp_factor = luma_factor;
  cinfo->comp_info[0].v_samp_factor = luma_factor;
  for (int c = 1; c < 3; ++c) {
    cinfo->comp_info[c].h_samp_factor = 1;
    cinfo->comp_info[c].v_samp_factor = 1;
  }
  cinfo->optimize_coding = FALSE;  // a second pass over the data costs more than the bytes saved
  cinfo->dct_method = JDCT_ISLOW;
  jpeg_start_compress(cinfo, TRUE);
  const JDIMENSION height = cinfo->image_height;
  while (cinfo->next_scanline < height) {
    const JDIMENSION y = cinfo->next_scanline;
    const JDIMENSION n = std::min<JDIMENSION>(kRowBatch, height - y);
    JSAMPROW rows[kRowBatch];
    // libjpeg's row type is non-const; it only reads input rows.
    for (JDIMENSION i = 0; i < n; ++i) {
      rows[i] = const_cast<uint8_t*>(image.row(static_cast<int>(y + i)));
    }
    jpeg_write_scanlines(cinfo, rows, n);
  }
  jpeg_finish_compress(cinfo);
  return true;
}

}  // namespace

struct JpegEncoder::State {
  jpeg_compress_struct cinfo;
  ErrorManager err;
  GrowingDestination dest;
  bool created = false;

  State() {
    std::memset(&cinfo, 0, sizeof(cinfo));
    std::memset(&dest.pub, 0, sizeof(dest.pub));
    InitErrorManager(&err);
    cinfo.err = &err.pub;
    created = CreateCompress(&cinfo, &err);
    dest.pub.init_destination = InitDestination;
    dest.pub.empty_output_buffer = EmptyOutputBuffer;
    dest.pub.term_destination = TermDestination;
    cinfo.dest = &dest.pub;
  }
  ~State() {
    if (created) jpeg_destroy_compress(&cinfo);
    std::free(dest.buffer);
  }
};

JpegEncoder::JpegEncoder() : state_(std::make_unique<State>()) {}
JpegEncoder::~JpegEncoder() = default;

Status JpegEncoder::Encode(const ImageView& image, const JpegEncodeOptions& options,
                           std::string* out) {
  if (options.quality < 1 || options.quality > 100) {
    return InvalidArgument("JPEG quality " + std::to_string(options.quality) +
                           " is outside 1..100");
  }
  if (image.width <= 0 || image.height <= 0 || image.data == nullptr ||
      image.stride < static_cast<size_t>(image.width) * 3) {
    return InvalidArgument("cannot encode an image of " + std::to_string(image.width) + "x" +
                           std::to_string(image.height) + " with stride " +
                           std::to_string(image.stride));
  }
  if (image.width > JPEG_MAX_DIMENSION || image.height > JPEG_MAX_DIMENSION) {
    return InvalidArgument("image of " + std::to_string(image.width) + "x" +
                           std::to_string(image.height) + " exceeds JPEG's limit of " +
                           std::to_string(JPEG_MAX_DIMENSION) + " per side");
  }
  State& s = *state_;
  if (!s.created) return Internal(std::string("libjpeg initialisation failed: ") + s.err.message);
  if (!EncodeRows(&s.cinfo, &s.err, image, options.quality, options.subsample_420)) {
    return Internal(std::string("JPEG encode: ") + s.err.message);
  }
  out->append(reinterpret_cast<const char*>(s.dest.buffer), s.dest.size);
  return Status::OK();
}

}  // namespace sluice
