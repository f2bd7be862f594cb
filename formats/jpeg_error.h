// libjpeg glue shared by JpegDecoder, JpegEncoder and JpegRoiDecoder (internal to formats/): the
// error manager and the decoder set-up they have in common.
//
// libjpeg reports errors by calling error_exit, which must not return. We longjmp back to the
// setjmp of the small C-style function that made the libjpeg call. Those functions keep no C++
// objects with destructors in their frames, so nothing is skipped by the jump; C++ work
// (allocation, Status) happens in their callers, outside any setjmp frame.
//
// Warnings policy. libjpeg recovers from most corrupt data (bad Huffman codes, stray bytes, a
// marker inside a scan) by filling the damaged blocks; like most decoders we accept those images.
// The exception is data that ends early: the memory source then feeds a fake EOI and libjpeg
// paints the rest grey. We refuse that when it happens before the last MCU row of the scan being
// read (a truncated file: whole rows would be grey, or for a progressive image, missing from that
// scan on), and accept it within that last row or between scans (only the final bytes or the EOI
// marker are missing; a progressive image is then complete, at the detail of the scans it has).
#pragma once

#include <csetjmp>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>

// clang-format off
// jpeglib.h uses FILE and size_t without declaring them: <cstdio> must come first.
#include <jpeglib.h>
#include <jerror.h>
// clang-format on

#include "formats/status.h"

namespace sluice::jpeg_internal {

enum class Phase { kHeader, kDecode, kEncode };

struct ErrorManager {
  jpeg_error_mgr pub;  // first, so a j_common_ptr's err can be cast back to ErrorManager
  std::jmp_buf jump;
  Phase phase = Phase::kHeader;
  char message[JMSG_LENGTH_MAX] = {};
};

// Installs our error_exit (longjmp) and emit_message (silent; refuses early EOF as above).
void InitErrorManager(ErrorManager* err);

// TurboJPEG's bound (TJFLAG_LIMITSCANS): a crafted progressive file can hold thousands of tiny
// scans, each a full pass over the coefficients; real encoders write about ten.
inline constexpr int kMaxProgressiveScans = 500;

// A progress_monitor that fails decoding past kMaxProgressiveScans.
void ProgressMonitor(j_common_ptr cinfo);

// Rows handed to libjpeg per jpeg_read_scanlines/jpeg_write_scanlines call; more than any
// rec_outbuf_height, so libjpeg never has to stop short of what its buffers hold.
inline constexpr int kRowBatch = 16;

// The shared setjmp frames. Each returns false after a libjpeg error, with err->message set and
// the libjpeg object reset (jpeg_abort_decompress) so it can be reused.
bool CreateDecompress(j_decompress_ptr cinfo, ErrorManager* err);
bool ReadHeaderFrame(j_decompress_ptr cinfo, ErrorManager* err, const uint8_t* data, size_t size);

// After the header, with the scale set: computes the output size (jpeg_calc_output_dimensions)
// and estimates what libjpeg allocates to decompress the image at that scale: for a file with more
// than one scan (progressive, or sequential with non-interleaved scans: *multi_scan) the DCT
// coefficients of the whole image, whatever the crop and scale (a 128-byte block per 64 pixels:
// 2 bytes per pixel and component, 6 per pixel at 4:4:4); its row buffers, generously; and its
// tables. False after a libjpeg error, the object reset.
bool EstimateDecompressFrame(j_decompress_ptr cinfo, ErrorManager* err, int64_t* bytes,
                             bool* multi_scan);

// Asks `gate` (null: allowed) for `bytes`, what the decompression about to start needs. Refused:
// aborts the decompression and returns the gate's status naming the image, e.g. "8000x8000
// progressive JPEG: ..." (kinds: progressive, multi-scan, baseline).
Status AskDecodeGate(j_decompress_ptr cinfo, const std::function<Status(int64_t)>* gate,
                     int64_t bytes, bool multi_scan);

// Holds libjpeg to its estimate (plus kLibjpegHeadroomPercent) for the decompression about to
// start; the budget reserves the estimate. libjpeg-turbo's jmemnobs.c checks max_memory_to_use
// only when it places its virtual arrays (the whole-image coefficient buffers): past the limit it
// asks for a backing store, which jmemnobs refuses with JERR_NO_BACKING_STORE before allocating
// them. Its other buffers are a few rows each.
void LimitDecompressMemory(j_decompress_ptr cinfo, int64_t estimate);
// The estimate counts the coefficient arrays exactly but libjpeg rounds its pools up: room for
// that, small enough that a wrong estimate still fails instead of overrunning the budget by much.
inline constexpr int64_t kLibjpegHeadroomPercent = 10;
// Whether the error in err was libjpeg refusing to allocate past LimitDecompressMemory's limit.
bool OverMemoryLimit(const ErrorManager& err);
// ResourceExhausted for that case, naming the estimate.
Status MemoryLimitError(int64_t estimate);

// After the header: asks for RGB output — libjpeg converts gray, YCbCr and RGB itself; CMYK and
// YCCK come out CMYK (*cmyk = true) for the caller to convert. Any other colour space is
// InvalidArgument, with the decompression aborted.
Status ChooseRgbOutput(j_decompress_ptr cinfo, bool* cmyk);

}  // namespace sluice::jpeg_internal
