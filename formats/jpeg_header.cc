#include "formats/jpeg_header.h"

#include <cstdio>
#include <string>

namespace sluice {
namespace {

// Marker codes (ITU T.81 table B.1).
constexpr uint8_t kSoi = 0xD8;
constexpr uint8_t kEoi = 0xD9;
constexpr uint8_t kSos = 0xDA;
constexpr uint8_t kTem = 0x01;
constexpr uint8_t kApp0 = 0xE0;
constexpr uint8_t kApp14 = 0xEE;

bool IsSof(uint8_t m) { return m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC; }
bool IsProgressiveSof(uint8_t m) { return m == 0xC2 || m == 0xC6 || m == 0xCA || m == 0xCE; }
// Markers without a length field: TEM and RST0..RST7.
bool IsStandalone(uint8_t m) { return m == kTem || (m >= 0xD0 && m <= 0xD7); }

uint8_t Byte(std::string_view d, size_t i) { return static_cast<uint8_t>(d[i]); }
int BigEndian16(std::string_view d, size_t i) { return (Byte(d, i) << 8) | Byte(d, i + 1); }

std::string Hex(uint8_t b) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "0x%02X", b);
  return buf;
}

Status Malformed(const std::string& what, size_t offset) {
  return InvalidArgument("JPEG header " + what + " at offset " + std::to_string(offset));
}

// What libjpeg learns from APP0/APP14 markers to decide the colour space of 3- and 4-component
// images (jdapimin.c, default_decompress_parms).
struct MarkerHints {
  bool saw_jfif = false;
  bool saw_adobe = false;
  int adobe_transform = 0;
};

// Records JFIF (APP0 "JFIF\0", at least 14 bytes of data) and Adobe (APP14 "Adobe", at least 12
// bytes) markers with the same length thresholds libjpeg applies. `body` is the segment payload.
void NoteAppMarker(uint8_t marker, std::string_view body, MarkerHints* hints) {
  if (marker == kApp0 && body.size() >= 14 && body.substr(0, 5) == std::string_view("JFIF\0", 5)) {
    hints->saw_jfif = true;
  } else if (marker == kApp14 && body.size() >= 12 && body.substr(0, 5) == "Adobe") {
    hints->saw_adobe = true;
    hints->adobe_transform = Byte(body, 11);
  }
}

JpegColorSpace GuessColorSpace(int components, const int* component_ids, const MarkerHints& h) {
  switch (components) {
    case 1:
      return JpegColorSpace::kGray;
    case 3:
      if (h.saw_jfif) return JpegColorSpace::kYCbCr;
      if (h.saw_adobe) {
        return h.adobe_transform == 0 ? JpegColorSpace::kRGB : JpegColorSpace::kYCbCr;
      }
      if (component_ids[0] == 'R' && component_ids[1] == 'G' && component_ids[2] == 'B') {
        return JpegColorSpace::kRGB;
      }
      return JpegColorSpace::kYCbCr;
    case 4:
      if (h.saw_adobe) {
        return h.adobe_transform == 0 ? JpegColorSpace::kCMYK : JpegColorSpace::kYCCK;
      }
      return JpegColorSpace::kCMYK;
    default:
      return JpegColorSpace::kUnknown;
  }
}

// A marker segment found by the walk: its code, the offset of its 0xFF, and for segments with a
// length field, the payload after the two length bytes.
struct Segment {
  uint8_t marker = 0;
  size_t offset = 0;
  std::string_view body;
};

// Steps over one marker segment of `data` starting at *pos, skipping stray bytes and 0xFF fill
// bytes before the marker as libjpeg does. On success *pos is past the segment.
Status NextSegment(std::string_view data, size_t* pos, Segment* seg) {
  size_t p = *pos;
  while (p < data.size() && Byte(data, p) != 0xFF) ++p;  // libjpeg warns and skips these.
  for (;;) {
    while (p < data.size() && Byte(data, p) == 0xFF) ++p;  // fill bytes
    if (p >= data.size()) return Malformed("truncated before a marker", p);
    if (Byte(data, p) != 0x00) break;
    // FF00 is stuffed entropy data, not a marker: keep scanning as libjpeg does.
    while (p < data.size() && Byte(data, p) != 0xFF) ++p;
  }
  seg->marker = Byte(data, p);
  seg->offset = p - 1;
  ++p;
  seg->body = {};
  if (IsStandalone(seg->marker) || seg->marker == kSoi || seg->marker == kEoi) {
    *pos = p;
    return Status::OK();
  }
  if (p + 2 > data.size()) {
    return Malformed("truncated in the length of marker " + Hex(seg->marker), p);
  }
  const int length = BigEndian16(data, p);
  if (length < 2) {
    return Malformed("has bad length " + std::to_string(length) + " for marker " + Hex(seg->marker),
                     p);
  }
  if (p + length > data.size()) {
    return Malformed("truncated in marker " + Hex(seg->marker) + " segment (" +
                         std::to_string(length) + " bytes from offset " + std::to_string(p) + ")",
                     data.size());
  }
  seg->body = data.substr(p + 2, length - 2);
  *pos = p + length;
  return Status::OK();
}

Status ParseSof(const Segment& seg, JpegHeader* header, int* component_ids) {
  const std::string_view b = seg.body;
  const size_t body_offset = seg.offset + 4;
  if (b.size() < 6) return Malformed("truncated SOF segment", body_offset + b.size());
  const int height = BigEndian16(b, 1);
  const int width = BigEndian16(b, 3);
  const int components = Byte(b, 5);
  if (width == 0 || height == 0) {
    return Malformed(
        "has empty image size " + std::to_string(width) + "x" + std::to_string(height) + " in SOF",
        body_offset + 1);
  }
  if (components == 0) return Malformed("has no components in SOF", body_offset + 5);
  if (b.size() < 6 + 3 * static_cast<size_t>(components)) {
    return Malformed("has SOF too short for " + std::to_string(components) + " components",
                     body_offset + b.size());
  }
  for (int i = 0; i < components && i < 4; ++i) component_ids[i] = Byte(b, 6 + 3 * i);
  header->width = width;
  header->height = height;
  header->components = components;
  header->progressive = IsProgressiveSof(seg.marker);
  return Status::OK();
}

}  // namespace

std::string_view JpegColorSpaceName(JpegColorSpace c) {
  switch (c) {
    case JpegColorSpace::kGray:
      return "Gray";
    case JpegColorSpace::kYCbCr:
      return "YCbCr";
    case JpegColorSpace::kRGB:
      return "RGB";
    case JpegColorSpace::kCMYK:
      return "CMYK";
    case JpegColorSpace::kYCCK:
      return "YCCK";
    case JpegColorSpace::kUnknown:
      return "unknown";
  }
  return "unknown";
}

std::string_view SniffImageFormat(std::string_view data) {
  auto starts = [data](std::string_view magic) { return data.substr(0, magic.size()) == magic; };
  if (data.empty()) return "empty";
  if (starts("\xFF\xD8")) return "JPEG";
  if (starts("\x89PNG\r\n\x1A\n")) return "PNG";
  if (starts("GIF87a") || starts("GIF89a")) return "GIF";
  if (starts("RIFF") && data.size() >= 12 && data.substr(8, 4) == "WEBP") return "WebP";
  if (starts("BM")) return "BMP";
  if (starts(std::string_view("II*\0", 4)) || starts(std::string_view("MM\0*", 4))) return "TIFF";
  return "unknown";
}

// The walk stops at the first SOFn for the size, then goes on to the first SOS only to catch an
// APP0/APP14 that follows the SOF (libjpeg reads every marker before SOS to pick the colour
// space). Problems past the SOF end that second walk quietly: the size is already known, and the
// decoder reports damage there with its own message.
Result<JpegHeader> ReadJpegHeader(std::string_view data) {
  const std::string_view format = SniffImageFormat(data);
  if (format == "empty") return InvalidArgument("empty data, not JPEG");
  if (format != "JPEG") {
    if (format == "unknown") {
      std::string m = "not a JPEG image (starts with";
      for (size_t i = 0; i < data.size() && i < 4; ++i) m += " " + Hex(Byte(data, i));
      return InvalidArgument(m + ")");
    }
    return InvalidArgument(std::string(format) + " image, not JPEG");
  }

  JpegHeader header;
  MarkerHints hints;
  int component_ids[4] = {0, 0, 0, 0};
  size_t pos = 2;
  Segment seg;
  for (;;) {
    RETURN_IF_ERROR(NextSegment(data, &pos, &seg));
    if (IsSof(seg.marker)) {
      RETURN_IF_ERROR(ParseSof(seg, &header, component_ids));
      break;
    }
    switch (seg.marker) {
      case kSoi:
        return Malformed("has a second SOI marker", seg.offset);
      case kEoi:
        return Malformed("ends (EOI) before any SOF marker", seg.offset);
      case kSos:
        return Malformed("has SOS before any SOF marker", seg.offset);
      default:
        NoteAppMarker(seg.marker, seg.body, &hints);
    }
  }
  while (NextSegment(data, &pos, &seg).ok() && seg.marker != kSos && seg.marker != kEoi) {
    NoteAppMarker(seg.marker, seg.body, &hints);
  }
  header.color_space = GuessColorSpace(header.components, component_ids, hints);
  return header;
}

}  // namespace sluice
