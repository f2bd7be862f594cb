// CRC-32C (Castagnoli), as TFRecord and leveldb frame their records. Uses the SSE4.2 crc32
// instruction when the CPU has it (checked once at run time), a slicing-by-8 table otherwise.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace sluice::crc32c {

// Returns the CRC-32C of data[0, n) continuing from `crc` (the CRC of the bytes before it; 0 to
// start). Extend(Extend(0, a), b) == Value(a + b).
uint32_t Extend(uint32_t crc, const void* data, size_t n);

inline uint32_t Value(const void* data, size_t n) { return Extend(0, data, n); }
inline uint32_t Value(std::string_view s) { return Extend(0, s.data(), s.size()); }

// TFRecord stores masked CRCs: a CRC of data that itself holds CRCs is poor, so the stored value
// is rotated right by 15 bits and offset by a constant.
constexpr uint32_t kMaskDelta = 0xa282ead8u;
inline uint32_t Mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + kMaskDelta; }
inline uint32_t Unmask(uint32_t masked) {
  uint32_t rot = masked - kMaskDelta;
  return (rot >> 17) | (rot << 15);
}

// True when Extend runs on the SSE4.2 instruction.
bool IsHardwareAccelerated();

// The table implementation, exposed so tests can check both paths agree.
uint32_t ExtendPortable(uint32_t crc, const void* data, size_t n);

}  // namespace sluice::crc32c
