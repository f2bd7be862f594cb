#include "formats/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace sluice::crc32c {
namespace {

// Reflected Castagnoli polynomial.
constexpr uint32_t kPoly = 0x82f63b78u;

// The functions below work on the raw CRC register, without the pre- and post-inversion that
// Extend adds. On the raw register the CRC is linear: crc(A ++ B) = Shift(crc(A), |B|) ^ crc(B)
// with crc(B) started from 0, which is what lets the hardware path run three streams at once.

using Table = std::array<uint32_t, 256>;

constexpr uint32_t ShiftZeroByte(const Table& t, uint32_t crc) {
  return t[crc & 0xff] ^ (crc >> 8);
}

constexpr Table MakeByteTable() {
  Table t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t crc = i;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1) ? kPoly : 0);
    t[i] = crc;
  }
  return t;
}

// kSlice[k][b]: the raw CRC of byte b followed by k zero bytes.
constexpr std::array<Table, 8> MakeSlicingTables() {
  std::array<Table, 8> s{};
  s[0] = MakeByteTable();
  for (int k = 1; k < 8; ++k) {
    for (int b = 0; b < 256; ++b) s[k][b] = ShiftZeroByte(s[0], s[k - 1][b]);
  }
  return s;
}

constexpr std::array<Table, 8> kSlice = MakeSlicingTables();

// Tables that advance a raw CRC over `zero_bytes` zero bytes in four lookups, one per byte of the
// register: the shift is linear, so it is the XOR of the shifts of each byte.
using ShiftTables = std::array<Table, 4>;

constexpr ShiftTables MakeShiftTables(size_t zero_bytes) {
  std::array<uint32_t, 32> column{};  // the shift of each single bit of the register
  for (int bit = 0; bit < 32; ++bit) {
    uint32_t crc = uint32_t{1} << bit;
    for (size_t i = 0; i < zero_bytes; ++i) crc = ShiftZeroByte(kSlice[0], crc);
    column[bit] = crc;
  }
  ShiftTables tables{};
  for (int byte = 0; byte < 4; ++byte) {
    for (uint32_t v = 0; v < 256; ++v) {
      uint32_t out = 0;
      for (int bit = 0; bit < 8; ++bit) {
        if (v & (1u << bit)) out ^= column[byte * 8 + bit];
      }
      tables[byte][v] = out;
    }
  }
  return tables;
}

inline uint32_t LoadLE32(const uint8_t* p) {
  return uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24);
}

uint32_t ExtendRawPortable(uint32_t crc, const uint8_t* p, size_t n) {
  const uint8_t* end = p + n;
  while (p != end && (reinterpret_cast<uintptr_t>(p) & 7) != 0) {
    crc = kSlice[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
  }
  while (end - p >= 8) {
    uint32_t lo = LoadLE32(p) ^ crc;
    uint32_t hi = LoadLE32(p + 4);
    crc = kSlice[7][lo & 0xff] ^ kSlice[6][(lo >> 8) & 0xff] ^ kSlice[5][(lo >> 16) & 0xff] ^
          kSlice[4][lo >> 24] ^ kSlice[3][hi & 0xff] ^ kSlice[2][(hi >> 8) & 0xff] ^
          kSlice[1][(hi >> 16) & 0xff] ^ kSlice[0][hi >> 24];
    p += 8;
  }
  while (p != end) crc = kSlice[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
  return crc;
}

#if defined(__x86_64__)

// Stream lengths for the three-way interleave. The crc32 instruction has a latency of 3 cycles
// and a throughput of 1 per cycle, so three independent streams keep it busy; combining them costs
// two table shifts, which is negligible against kLongBytes and affordable against kShortBytes.
constexpr size_t kLongBytes = 8192;
constexpr size_t kShortBytes = 256;

constexpr ShiftTables kShiftLong = MakeShiftTables(kLongBytes);
constexpr ShiftTables kShiftShort = MakeShiftTables(kShortBytes);

inline uint32_t Shift(const ShiftTables& t, uint32_t crc) {
  return t[0][crc & 0xff] ^ t[1][(crc >> 8) & 0xff] ^ t[2][(crc >> 16) & 0xff] ^ t[3][crc >> 24];
}

__attribute__((target("sse4.2"))) inline uint64_t Crc64(uint64_t crc, const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof(v));
  return _mm_crc32_u64(crc, v);
}

// Runs three streams of `block` bytes each, starting at p, p + block, p + 2 * block, while
// n >= 3 * block; returns the combined raw CRC and advances p and n.
template <size_t kBlock>
__attribute__((target("sse4.2"))) inline uint32_t ThreeWay(uint32_t crc, const ShiftTables& shift,
                                                           const uint8_t*& p, size_t& n) {
  while (n >= 3 * kBlock) {
    uint64_t c0 = crc, c1 = 0, c2 = 0;
    const uint8_t* end = p + kBlock;
    do {
      c0 = Crc64(c0, p);
      c1 = Crc64(c1, p + kBlock);
      c2 = Crc64(c2, p + 2 * kBlock);
      p += 8;
    } while (p != end);
    crc = Shift(shift, static_cast<uint32_t>(c0)) ^ static_cast<uint32_t>(c1);
    crc = Shift(shift, crc) ^ static_cast<uint32_t>(c2);
    p += 2 * kBlock;
    n -= 3 * kBlock;
  }
  return crc;
}

__attribute__((target("sse4.2"))) uint32_t ExtendRawHardware(uint32_t crc, const uint8_t* p,
                                                             size_t n) {
  while (n > 0 && (reinterpret_cast<uintptr_t>(p) & 7) != 0) {
    crc = _mm_crc32_u8(crc, *p++);
    --n;
  }
  crc = ThreeWay<kLongBytes>(crc, kShiftLong, p, n);
  crc = ThreeWay<kShortBytes>(crc, kShiftShort, p, n);
  uint64_t c = crc;
  while (n >= 8) {
    c = Crc64(c, p);
    p += 8;
    n -= 8;
  }
  crc = static_cast<uint32_t>(c);
  while (n > 0) {
    crc = _mm_crc32_u8(crc, *p++);
    --n;
  }
  return crc;
}

bool CpuHasSse42() {
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
}

#else

bool CpuHasSse42() { return false; }

#endif

}  // namespace

uint32_t ExtendPortable(uint32_t crc, const void* data, size_t n) {
  return ~ExtendRawPortable(~crc, static_cast<const uint8_t*>(data), n);
}

uint32_t Extend(uint32_t crc, const void* data, size_t n) {
#if defined(__x86_64__)
  if (CpuHasSse42()) return ~ExtendRawHardware(~crc, static_cast<const uint8_t*>(data), n);
#endif
  return ExtendPortable(crc, data, n);
}

bool IsHardwareAccelerated() { return CpuHasSse42(); }

}  // namespace sluice::crc32c
