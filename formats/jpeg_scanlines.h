// The scanline loop JpegDecoder and JpegRoiDecoder share (internal to formats/): rows from libjpeg
// into the caller's memory, through a CMYK row and its conversion when the image is CMYK or YCCK.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "formats/jpeg_error.h"

namespace sluice::jpeg_internal {

// Where decoded rows go: output row y (counted from libjpeg's row first_row) at
// out + (y - first_row) * stride. With cmyk_row non-null the output colour space is CMYK: each row
// lands there first and is converted to RGB (inverted: Adobe's convention, see CmykToRgb).
struct RowTarget {
  uint8_t* out = nullptr;
  size_t stride = 0;
  JDIMENSION first_row = 0;
  uint8_t* cmyk_row = nullptr;
  bool inverted = false;
};

// After ChooseRgbOutput: a target for rows of `width` pixels at out. When cmyk, sizes *cmyk_row to
// one CMYK row (kept by the caller, so steady-state decoding does not allocate).
RowTarget MakeRowTarget(j_decompress_ptr cinfo, bool cmyk, JDIMENSION width, uint8_t* out,
                        size_t stride, JDIMENSION first_row, std::vector<uint8_t>* cmyk_row);

// Reads rows from cinfo->output_scanline up to `end` into target, kRowBatch at a time (one at a
// time through the CMYK row). False, with err->message set and the decompression aborted, when
// libjpeg makes no progress (only a suspending data source does that; ours never suspends).
// REQUIRES: called inside a setjmp frame of err (jpeg_error.h): a libjpeg error longjmps past
// this function, which keeps nothing with a destructor in its frame.
bool ReadScanlines(j_decompress_ptr cinfo, ErrorManager* err, JDIMENSION end,
                   const RowTarget& target);

}  // namespace sluice::jpeg_internal
