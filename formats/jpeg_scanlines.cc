#include "formats/jpeg_scanlines.h"

#include <algorithm>
#include <cstdio>

#include "formats/image_ops.h"

namespace sluice::jpeg_internal {

RowTarget MakeRowTarget(j_decompress_ptr cinfo, bool cmyk, JDIMENSION width, uint8_t* out,
                        size_t stride, JDIMENSION first_row, std::vector<uint8_t>* cmyk_row) {
  RowTarget target;
  target.out = out;
  target.stride = stride;
  target.first_row = first_row;
  if (cmyk) {
    cmyk_row->resize(static_cast<size_t>(width) * 4);
    target.cmyk_row = cmyk_row->data();
  }
  // Adobe's CMYK JPEGs hold inverted values, and every CMYK JPEG in practice carries its marker.
  target.inverted = cinfo->saw_Adobe_marker != FALSE;
  return target;
}

bool ReadScanlines(j_decompress_ptr cinfo, ErrorManager* err, JDIMENSION end,
                   const RowTarget& target) {
  while (cinfo->output_scanline < end) {
    const JDIMENSION y = cinfo->output_scanline;
    uint8_t* row = target.out + static_cast<size_t>(y - target.first_row) * target.stride;
    JSAMPROW rows[kRowBatch];
    JDIMENSION got;
    if (target.cmyk_row != nullptr) {
      rows[0] = target.cmyk_row;
      got = jpeg_read_scanlines(cinfo, rows, 1);
      if (got == 1) CmykToRgb(target.cmyk_row, cinfo->output_width, target.inverted, row);
    } else {
      const JDIMENSION n = std::min<JDIMENSION>(kRowBatch, end - y);
      for (JDIMENSION i = 0; i < n; ++i) rows[i] = row + i * target.stride;
      got = jpeg_read_scanlines(cinfo, rows, n);
    }
    if (got == 0) {
      std::snprintf(err->message, sizeof(err->message), "decoder stalled at row %u", y);
      jpeg_abort_decompress(cinfo);
      return false;
    }
  }
  return true;
}

}  // namespace sluice::jpeg_internal
