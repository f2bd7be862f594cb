#include "formats/png_codec.h"

#include <png.h>
#include <zlib.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace sluice {
namespace {

constexpr size_t kIhdrEnd = 33;  // signature 8, length 4, "IHDR" 4, data 13, CRC 4
// What libpng and zlib hold whatever the width: libpng's 8 KiB IDAT read buffer
// (PNG_IDAT_READ_SIZE), zlib's 32 KiB window and ~7 KiB inflate state, the png and info structs,
// palette and tRNS tables: 49.2 KiB counted at most (LibpngAndZlibStayWithinTheEstimate), rounded
// up to cover malloc's headers and other libpng builds.
constexpr int64_t kLibpngFixedBytes = int64_t{60} * 1024;
// Each allocation libpng makes is prefixed with its size, kept aligned for any type.
constexpr size_t kAllocationHeader = alignof(std::max_align_t);

uint32_t BigEndian32(std::string_view data, size_t at) {
  const auto* p = reinterpret_cast<const uint8_t*>(data.data()) + at;
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

bool BitDepthAllowed(PngColorType type, int depth) {
  switch (type) {
    case PngColorType::kGray:
      return depth == 1 || depth == 2 || depth == 4 || depth == 8 || depth == 16;
    case PngColorType::kPalette:
      return depth == 1 || depth == 2 || depth == 4 || depth == 8;
    case PngColorType::kRgb:
    case PngColorType::kGrayAlpha:
    case PngColorType::kRgbAlpha:
      return depth == 8 || depth == 16;
  }
  return false;
}

// What libpng's callbacks share with the decode. Trivially destructible: libpng's longjmp may
// leave the frames that refer to it.
struct Source {
  const uint8_t* data = nullptr;
  size_t size = 0;
  size_t pos = 0;
  bool truncated = false;  // the image needed bytes past the end of data
  // When data ends inside an IDAT chunk's data: where that chunk's length field is, and the
  // length of what data holds of it, which libpng is given instead (see ShortenCutIdat).
  size_t cut_idat_at = SIZE_MAX;
  uint8_t cut_idat_length[4] = {};
  char message[256] = {};
  int64_t libpng_bytes = 0;  // what libpng (and zlib through it) holds now
  int64_t libpng_peak_bytes = 0;
};

png_voidp Allocate(png_structp png, png_alloc_size_t n) {
  auto* s = static_cast<Source*>(png_get_mem_ptr(png));
  void* block = std::malloc(kAllocationHeader + n);
  if (block == nullptr) return nullptr;  // libpng reports it
  std::memcpy(block, &n, sizeof(n));
  s->libpng_bytes += static_cast<int64_t>(n);
  s->libpng_peak_bytes = std::max(s->libpng_peak_bytes, s->libpng_bytes);
  return static_cast<char*>(block) + kAllocationHeader;
}

void Free(png_structp png, png_voidp p) {
  if (p == nullptr) return;
  auto* s = static_cast<Source*>(png_get_mem_ptr(png));
  char* block = static_cast<char*>(p) - kAllocationHeader;
  png_alloc_size_t n = 0;
  std::memcpy(&n, block, sizeof(n));
  s->libpng_bytes -= static_cast<int64_t>(n);
  std::free(block);
}

void ReadData(png_structp png, png_bytep out, size_t n) {
  auto* s = static_cast<Source*>(png_get_io_ptr(png));
  if (n > s->size - s->pos) {
    s->truncated = true;
    std::snprintf(s->message, sizeof(s->message),
                  "PNG data ends at byte %zu, before the image is complete (%zu more bytes wanted)",
                  s->size, n - (s->size - s->pos));
    png_error(png, s->message);
  }
  std::memcpy(out, s->data + s->pos, n);
  for (size_t i = 0; i < 4; ++i) {
    const size_t at = s->cut_idat_at + i;
    if (s->cut_idat_at != SIZE_MAX && at >= s->pos && at < s->pos + n) {
      out[at - s->pos] = s->cut_idat_length[i];
    }
  }
  s->pos += n;
}

// libpng reads an IDAT's data in pieces of up to 8 KiB and inflates none of a piece it cannot
// read whole, so data cut inside the last IDAT would hide the rows it does hold. Walks the chunk
// headers; when the last one is an IDAT that data cuts short, libpng is told its length is what
// data holds, and the cut is found where its CRC should be.
void ShortenCutIdat(Source* s) {
  size_t at = 8;
  while (at + 8 <= s->size) {
    const uint32_t length = (uint32_t{s->data[at]} << 24) | (uint32_t{s->data[at + 1]} << 16) |
                            (uint32_t{s->data[at + 2]} << 8) | s->data[at + 3];
    if (uint64_t{length} + 12 <= s->size - at) {
      at += size_t{length} + 12;
      continue;
    }
    if (std::memcmp(s->data + at + 4, "IDAT", 4) != 0) return;
    const size_t held = std::min<size_t>(length, s->size - at - 8);
    s->cut_idat_at = at;
    for (int i = 0; i < 4; ++i) s->cut_idat_length[i] = static_cast<uint8_t>(held >> (24 - 8 * i));
    return;
  }
}

[[noreturn]] void OnError(png_structp png, png_const_charp message) {
  auto* s = static_cast<Source*>(png_get_error_ptr(png));
  if (message != s->message) std::snprintf(s->message, sizeof(s->message), "%s", message);
  png_longjmp(png, 1);
}

// A libpng warning (a damaged ancillary chunk, an unknown sRGB profile) leaves the image usable.
void OnWarning(png_structp, png_const_charp) {}

// The libpng read and info structs, destroyed together.
class ReadStruct {
 public:
  explicit ReadStruct(Source* source) {
    png_ = png_create_read_struct_2(PNG_LIBPNG_VER_STRING, source, OnError, OnWarning, source,
                                    Allocate, Free);
    if (png_ != nullptr) info_ = png_create_info_struct(png_);
  }
  ~ReadStruct() {
    if (png_ != nullptr) {
      png_destroy_read_struct(&png_, info_ != nullptr ? &info_ : nullptr, nullptr);
    }
  }
  ReadStruct(const ReadStruct&) = delete;
  ReadStruct& operator=(const ReadStruct&) = delete;

  bool ok() const { return info_ != nullptr; }
  png_structp png() const { return png_; }
  png_infop info() const { return info_; }

 private:
  png_structp png_ = nullptr;
  png_infop info_ = nullptr;
};

// The functions below call setjmp and hold nothing with a destructor: libpng's errors longjmp to
// them, and each returns false for its caller to turn Source::message into a Status.

// Reads the chunks up to the image data and sets the transforms that make every image 8-bit RGB,
// or RGBA when alpha is kept for compositing, but a palette image's pixels one byte-sized index
// each (libpng would look an index past the PLTE up as black, and say so only in png_read_end).
// *channels: 3 or 4 per output pixel, 1 for indexes; *passes: 7 for an interlaced image, else 1.
bool ReadInfoAndTransform(png_structp png, png_infop info, bool composite, int* channels,
                          int* passes) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_user_limits(png, PNG_UINT_31_MAX, PNG_UINT_31_MAX);  // max_pixels is the limit
  // Ancillary chunks (ICC profiles, text, gamma) change no pixel here, as in PIL's convert: skip
  // them unread rather than inflate them. -1: every chunk but IHDR, PLTE, tRNS, IDAT and IEND.
  png_set_keep_unknown_chunks(png, PNG_HANDLE_CHUNK_NEVER, nullptr, -1);
  png_read_info(png, info);
  const int color_type = png_get_color_type(png, info);
  const int depth = png_get_bit_depth(png, info);
  if (color_type == PNG_COLOR_TYPE_PALETTE) {
    if (depth < 8) png_set_packing(png);
  } else {
    if (depth == 16) png_set_strip_16(png);  // the high byte, as PIL and tf.io.decode_png
    if (color_type == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
    if (composite) {
      if (png_get_valid(png, info, PNG_INFO_tRNS) != 0) png_set_tRNS_to_alpha(png);
    } else {
      png_set_strip_alpha(png);
    }
    if ((color_type & PNG_COLOR_MASK_COLOR) == 0) png_set_gray_to_rgb(png);
  }
  *passes = png_set_interlace_handling(png);
  png_read_update_info(png, info);
  *channels = png_get_channels(png, info);
  return true;
}

// Reads every row (every pass of an interlaced image) into rows stride bytes apart from base.
bool ReadRows(png_structp png, int passes, int height, uint8_t* base, size_t stride) {
  if (setjmp(png_jmpbuf(png))) return false;
  for (int pass = 0; pass < passes; ++pass) {
    for (int y = 0; y < height; ++y) {
      png_read_row(png, base + static_cast<size_t>(y) * stride, nullptr);
    }
  }
  return true;
}

// A palette image's RGB for each index, its alpha (tRNS) dropped or composited per alpha; black
// past the PLTE's entries, which ExpandPaletteRow's caller refuses.
struct PaletteTable {
  int entries = 0;
  uint8_t rgb[256 * 3] = {};
};

// The data of a tRNS chunk before the first IDAT whose CRC matches; empty if none. libpng drops
// a palette image's tRNS that is longer than the PLTE (a warning); PIL applies its first entries,
// and so does MakePaletteTable.
std::string_view RawTrns(std::string_view data) {
  size_t at = 8;
  while (at + 12 <= data.size()) {
    const uint32_t length = BigEndian32(data, at);
    if (length > data.size() - at - 12) return {};
    const std::string_view type = data.substr(at + 4, 4);
    if (type == "IDAT") return {};
    if (type == "tRNS") {
      const auto crc = static_cast<uint32_t>(
          crc32(0, reinterpret_cast<const Bytef*>(data.data()) + at + 4, length + 4));
      return crc == BigEndian32(data, at + 8 + length) ? data.substr(at + 8, length)
                                                       : std::string_view();
    }
    at += size_t{length} + 12;
  }
  return {};
}

void MakePaletteTable(png_structp png, png_infop info, Alpha alpha, std::string_view data,
                      PaletteTable* table) {
  png_colorp plte = nullptr;
  png_get_PLTE(png, info, &plte, &table->entries);  // libpng refuses a palette image without one
  png_const_bytep trans = nullptr;
  int num_trans = 0;
  if (png_get_valid(png, info, PNG_INFO_tRNS) != 0) {
    png_bytep kept = nullptr;
    png_get_tRNS(png, info, &kept, &num_trans, nullptr);
    trans = kept;
  } else if (alpha != Alpha::kDrop) {
    const std::string_view raw = RawTrns(data);
    if (raw.size() > static_cast<size_t>(table->entries)) {
      trans = reinterpret_cast<png_const_bytep>(raw.data());
      num_trans = table->entries;
    }
  }
  uint8_t rgba[256 * 4] = {};
  for (int i = 0; i < table->entries && i < 256; ++i) {
    rgba[4 * i] = plte[i].red;
    rgba[4 * i + 1] = plte[i].green;
    rgba[4 * i + 2] = plte[i].blue;
    rgba[4 * i + 3] = i < num_trans ? trans[i] : 255;
  }
  FlattenRgba(rgba, 256, alpha, table->rgb);
}

// Replaces the width indexes at the start of row with their RGB, in place (from the last pixel
// back: pixel i's RGB lands at 3i, at or past every index still to read). Returns the largest.
int ExpandPaletteRow(const PaletteTable& table, size_t width, uint8_t* row) {
  int largest = 0;
  for (size_t i = width; i-- > 0;) {
    const uint8_t index = row[i];
    largest = std::max<int>(largest, index);
    std::memcpy(row + 3 * i, table.rgb + 3 * size_t{index}, 3);
  }
  return largest;
}

// Reads the rows of a non-interlaced RGBA image one at a time into row, flattening each into out.
bool ReadRowsFlattened(png_structp png, int width, int height, Alpha alpha, uint8_t* row,
                       uint8_t* out) {
  if (setjmp(png_jmpbuf(png))) return false;
  const size_t stride = static_cast<size_t>(width) * 3;
  for (int y = 0; y < height; ++y) {
    png_read_row(png, row, nullptr);
    FlattenRgba(row, static_cast<size_t>(width), alpha, out + static_cast<size_t>(y) * stride);
  }
  return true;
}

// Whether libpng had delivered every row (of every pass) when it stopped: it then reads on only
// to finish the zlib stream and the last IDAT chunk.
bool RowsComplete(png_structp png, int passes, int height) {
  if (passes > 1) return png_get_current_pass_number(png) >= 7;
  return png_get_current_row_number(png) >= static_cast<uint32_t>(height);
}

// After every row: what stopped libpng was only the file lacking what follows the pixels (its
// end, or IEND where the zlib stream's end should be). A CRC that is there and wrong is damage.
bool OnlyTheTailIsMissing(const Source& s) {
  return s.truncated || std::strcmp(s.message, "Not enough image data") == 0;
}

Status LibpngError(const Source& s) {
  if (s.truncated) return DataLoss(s.message);
  return InvalidArgument(std::string("invalid PNG: ") + s.message);
}

}  // namespace

std::string_view PngColorTypeName(PngColorType t) {
  switch (t) {
    case PngColorType::kGray:
      return "gray";
    case PngColorType::kRgb:
      return "RGB";
    case PngColorType::kPalette:
      return "palette";
    case PngColorType::kGrayAlpha:
      return "gray+alpha";
    case PngColorType::kRgbAlpha:
      return "RGBA";
  }
  return "unknown";
}

Result<PngHeader> ReadPngHeader(std::string_view data) {
  if (!IsPng(data)) return InvalidArgument("not a PNG image (no PNG signature at byte 0)");
  if (data.size() < kIhdrEnd) {
    return InvalidArgument("PNG header cut short: " + std::to_string(data.size()) +
                           " bytes, IHDR ends at byte " + std::to_string(kIhdrEnd));
  }
  if (BigEndian32(data, 8) != 13 || data.substr(12, 4) != "IHDR") {
    return InvalidArgument("PNG does not start with a 13-byte IHDR chunk (byte 8)");
  }
  const uint32_t crc =
      static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(data.data()) + 12, 17));
  if (crc != BigEndian32(data, 29)) return InvalidArgument("PNG IHDR CRC mismatch (byte 29)");
  const uint32_t width = BigEndian32(data, 16);
  const uint32_t height = BigEndian32(data, 20);
  if (width == 0 || height == 0 || width > PNG_UINT_31_MAX || height > PNG_UINT_31_MAX) {
    return InvalidArgument("PNG IHDR size " + std::to_string(width) + "x" + std::to_string(height) +
                           " is not 1..2^31-1 each (byte 16)");
  }
  const auto byte = [&](size_t at) { return static_cast<uint8_t>(data[at]); };
  PngHeader h;
  h.width = static_cast<int>(width);
  h.height = static_cast<int>(height);
  h.bit_depth = byte(24);
  const uint8_t type = byte(25);
  if (type != 0 && type != 2 && type != 3 && type != 4 && type != 6) {
    return InvalidArgument("PNG IHDR colour type " + std::to_string(type) +
                           " is unknown (byte 25)");
  }
  h.color_type = static_cast<PngColorType>(type);
  if (!BitDepthAllowed(h.color_type, h.bit_depth)) {
    return InvalidArgument("PNG IHDR bit depth " + std::to_string(h.bit_depth) +
                           " is not allowed for colour type " +
                           std::string(PngColorTypeName(h.color_type)) + " (byte 24)");
  }
  if (byte(26) != 0 || byte(27) != 0) {
    return InvalidArgument("PNG IHDR compression or filter method is not 0 (byte 26)");
  }
  if (byte(28) > 1) {
    return InvalidArgument("PNG IHDR interlace method " + std::to_string(byte(28)) +
                           " is unknown (byte 28)");
  }
  h.interlaced = byte(28) == 1;
  return h;
}

int64_t EstimatePngDecodeBytes(const PngHeader& header, Alpha alpha) {
  const int64_t w = header.width;
  const int64_t h = header.height;
  // Any colour type may carry alpha to composite (tRNS is found only while decoding).
  const bool rgba = alpha != Alpha::kDrop;
  const int64_t pixels = w * h * (rgba && header.interlaced ? 4 : 3);
  const int64_t libpng_rows = 2 * (w * 8 + 64);  // its current and previous row, 16-bit RGBA
  return pixels + libpng_rows + kLibpngFixedBytes + (rgba ? w * 4 : 0);
}

Status PngDecoder::Decode(std::string_view data, Alpha alpha, Image* out, int64_t max_pixels,
                          const DecodeMemoryGate* gate) {
  ASSIGN_OR_RETURN(const PngHeader header, ReadPngHeader(data));
  const int64_t pixels = int64_t{header.width} * header.height;
  if (pixels > max_pixels) {
    return InvalidArgument("PNG of " + std::to_string(header.width) + "x" +
                           std::to_string(header.height) + " = " + std::to_string(pixels) +
                           " pixels exceeds max_pixels " + std::to_string(max_pixels));
  }
  if (gate != nullptr) RETURN_IF_ERROR((*gate)(EstimatePngDecodeBytes(header, alpha)));
  last_libpng_peak_bytes_ = 0;

  Source source;
  source.data = reinterpret_cast<const uint8_t*>(data.data());
  source.size = data.size();
  ShortenCutIdat(&source);
  ReadStruct read(&source);
  if (!read.ok()) return ResourceExhausted("libpng could not allocate its read state");
  png_set_read_fn(read.png(), &source, ReadData);
  int channels = 0;
  int passes = 0;
  if (!ReadInfoAndTransform(read.png(), read.info(), alpha != Alpha::kDrop, &channels, &passes)) {
    return LibpngError(source);
  }
  // RGBA only when compositing: the estimate counts on it.
  const bool palette = png_get_color_type(read.png(), read.info()) == PNG_COLOR_TYPE_PALETTE;
  if ((palette ? channels != 1 : channels != 3 && (channels != 4 || alpha == Alpha::kDrop)) ||
      png_get_image_width(read.png(), read.info()) != static_cast<uint32_t>(header.width) ||
      png_get_image_height(read.png(), read.info()) != static_cast<uint32_t>(header.height)) {
    return Internal("libpng's transforms gave " + std::to_string(channels) +
                    " channels; expected 8-bit RGB, RGBA to composite, or palette indexes");
  }

  const int w = header.width;
  const int h = header.height;
  if (channels == 4 && passes > 1) {
    // Room for the RGBA image below, exactly (growing from RGB could double the capacity).
    out->pixels.clear();
    out->pixels.reserve(static_cast<size_t>(w) * h * 4);
  }
  out->Resize(w, h);
  uint8_t* base = out->pixels.data();
  bool read_all = false;
  if (palette) {
    // Each row's indexes where its RGB goes, expanded once every pass has filled them.
    const size_t stride = static_cast<size_t>(w) * 3;
    read_all = ReadRows(read.png(), passes, h, base, stride);
    if (read_all || RowsComplete(read.png(), passes, h)) {
      PaletteTable table;
      MakePaletteTable(read.png(), read.info(), alpha, data, &table);
      int largest = 0;
      for (int y = 0; y < h; ++y) {
        largest =
            std::max(largest, ExpandPaletteRow(table, static_cast<size_t>(w), base + y * stride));
      }
      if (largest >= table.entries) {
        return InvalidArgument("invalid PNG: palette index " + std::to_string(largest) +
                               " beyond the PLTE's " + std::to_string(table.entries) + " entries");
      }
    }
  } else if (channels == 3) {
    read_all = ReadRows(read.png(), passes, h, base, static_cast<size_t>(w) * 3);
  } else if (passes == 1) {
    row_.resize(static_cast<size_t>(w) * 4);
    read_all = ReadRowsFlattened(read.png(), w, h, alpha, row_.data(), base);
    // The last row was read but not flattened when libpng stopped after it.
    if (!read_all && RowsComplete(read.png(), passes, h)) {
      FlattenRgba(row_.data(), static_cast<size_t>(w), alpha,
                  base + static_cast<size_t>(h - 1) * w * 3);
    }
    if (row_.capacity() > kKeptRowBytes) std::vector<uint8_t>().swap(row_);
  } else {
    // Adam7 fills the rows pass by pass: the whole RGBA image is assembled, then flattened in
    // place.
    out->pixels.resize(static_cast<size_t>(w) * h * 4);
    base = out->pixels.data();
    read_all = ReadRows(read.png(), passes, h, base, static_cast<size_t>(w) * 4);
    if (read_all || RowsComplete(read.png(), passes, h)) {
      FlattenRgba(base, static_cast<size_t>(w) * h, alpha, base);
    }
    out->Resize(w, h);
  }
  last_libpng_peak_bytes_ = source.libpng_peak_bytes;
  if (!read_all && !(RowsComplete(read.png(), passes, h) && OnlyTheTailIsMissing(source))) {
    return LibpngError(source);
  }
  return Status::OK();
}

}  // namespace sluice
