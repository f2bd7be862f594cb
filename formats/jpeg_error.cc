#include "formats/jpeg_error.h"

#include <string>

namespace sluice::jpeg_internal {
namespace {

ErrorManager* GetErrorManager(j_common_ptr cinfo) {
  return reinterpret_cast<ErrorManager*>(cinfo->err);
}

[[noreturn]] void ErrorExit(j_common_ptr cinfo) {
  ErrorManager* err = GetErrorManager(cinfo);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

bool TruncatedBeforeLastRow(j_common_ptr cinfo, Phase phase) {
  if (phase == Phase::kHeader) return true;
  if (!cinfo->is_decompressor) return false;
  auto* d = reinterpret_cast<j_decompress_ptr>(cinfo);
  return d->input_iMCU_row + 1 < d->total_iMCU_rows;
}

// msg_level -1 is a warning, 0 and up are trace messages; neither is printed.
void EmitMessage(j_common_ptr cinfo, int msg_level) {
  if (msg_level >= 0) return;
  ++cinfo->err->num_warnings;
  ErrorManager* err = GetErrorManager(cinfo);
  if (cinfo->err->msg_code == JWRN_JPEG_EOF && TruncatedBeforeLastRow(cinfo, err->phase)) {
    ErrorExit(cinfo);
  }
}

}  // namespace

void InitErrorManager(ErrorManager* err) {
  jpeg_std_error(&err->pub);
  err->pub.error_exit = ErrorExit;
  err->pub.emit_message = EmitMessage;
}

void ProgressMonitor(j_common_ptr cinfo) {
  if (!cinfo->is_decompressor) return;
  auto* d = reinterpret_cast<j_decompress_ptr>(cinfo);
  if (d->progressive_mode && d->input_scan_number > kMaxProgressiveScans) {
    ErrorManager* err = GetErrorManager(cinfo);
    std::snprintf(err->message, sizeof(err->message), "progressive JPEG has more than %d scans",
                  kMaxProgressiveScans);
    std::longjmp(err->jump, 1);
  }
}

bool CreateDecompress(j_decompress_ptr cinfo, ErrorManager* err) {
  if (setjmp(err->jump)) return false;
  jpeg_create_decompress(cinfo);
  return true;
}

bool ReadHeaderFrame(j_decompress_ptr cinfo, ErrorManager* err, const uint8_t* data, size_t size) {
  if (setjmp(err->jump)) {
    jpeg_abort_decompress(cinfo);
    return false;
  }
  err->phase = Phase::kHeader;
  jpeg_mem_src(cinfo, data, static_cast<unsigned long>(size));  // NOLINT(google-runtime-int)
  jpeg_read_header(cinfo, TRUE);
  return true;
}

bool EstimateDecompressFrame(j_decompress_ptr cinfo, ErrorManager* err, int64_t* bytes,
                             bool* multi_scan) {
  if (setjmp(err->jump)) {
    jpeg_abort_decompress(cinfo);
    return false;
  }
  jpeg_calc_output_dimensions(cinfo);
  const bool whole_image = jpeg_has_multiple_scans(cinfo) || cinfo->buffered_image;
  // Tables (Huffman, quantisation, range limits, IDCT) and the pools' slop, all small.
  int64_t total = int64_t{256} << 10;
  auto round_up = [](int64_t a, int64_t b) { return (a + b - 1) / b * b; };
  for (int i = 0; i < cinfo->num_components; ++i) {
    const jpeg_component_info& c = cinfo->comp_info[i];
    if (whole_image) {
      total += round_up(c.width_in_blocks, c.h_samp_factor) *
               round_up(c.height_in_blocks, c.v_samp_factor) * static_cast<int64_t>(sizeof(JBLOCK));
    }
    // The main buffer's row groups, context rows included (at most four iMCU rows), and the
    // upsampler's and colour converter's rows, at the output scale.
    const int64_t scaled_width = int64_t{c.width_in_blocks} * c.DCT_scaled_size;
    total += 4 * scaled_width * c.v_samp_factor * c.DCT_scaled_size;
    total += 2 * int64_t{cinfo->output_width} * cinfo->max_v_samp_factor * c.DCT_scaled_size;
  }
  *bytes = total;
  *multi_scan = whole_image;
  return true;
}

Status AskDecodeGate(j_decompress_ptr cinfo, const std::function<Status(int64_t)>* gate,
                     int64_t bytes, bool multi_scan) {
  if (gate == nullptr) return Status::OK();
  Status allowed = (*gate)(bytes);
  if (allowed.ok()) return allowed;
  const char* kind = cinfo->progressive_mode ? " progressive"
                     : multi_scan            ? " multi-scan"
                                             : " baseline";
  const std::string image = std::to_string(cinfo->image_width) + "x" +
                            std::to_string(cinfo->image_height) + kind + " JPEG";
  jpeg_abort_decompress(cinfo);
  return allowed.WithContext(image);
}

void LimitDecompressMemory(j_decompress_ptr cinfo, int64_t estimate) {
  const int64_t limit = estimate + estimate * kLibjpegHeadroomPercent / 100;
  cinfo->mem->max_memory_to_use = static_cast<long>(limit);  // NOLINT(google-runtime-int)
}

bool OverMemoryLimit(const ErrorManager& err) { return err.pub.msg_code == JERR_NO_BACKING_STORE; }

Status MemoryLimitError(int64_t estimate) {
  return ResourceExhausted("libjpeg needed more than the " + std::to_string(estimate) +
                           " bytes estimated from the header + " +
                           std::to_string(kLibjpegHeadroomPercent) + "%");
}

Status ChooseRgbOutput(j_decompress_ptr cinfo, bool* cmyk) {
  *cmyk = false;
  switch (cinfo->jpeg_color_space) {
    case JCS_GRAYSCALE:
    case JCS_YCbCr:
    case JCS_RGB:
      cinfo->out_color_space = JCS_EXT_RGB;
      return Status::OK();
    case JCS_CMYK:
    case JCS_YCCK:
      cinfo->out_color_space = JCS_CMYK;
      *cmyk = true;
      return Status::OK();
    default:
      jpeg_abort_decompress(cinfo);
      return InvalidArgument("unsupported JPEG colour space with " +
                             std::to_string(cinfo->num_components) + " components");
  }
}

}  // namespace sluice::jpeg_internal
