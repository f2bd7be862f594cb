// The element types and layouts a batch's images may have (service.proto DType and Layout; the
// values are the proto's), and their sizes. Header-only: the client and trainer use it too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace sluice {

enum class DType : int32_t { kUint8 = 0, kFloat16 = 1, kBFloat16 = 2, kFloat32 = 3 };
enum class Layout : int32_t { kNhwc = 0, kNchw = 1 };

inline constexpr bool IsKnownDType(int32_t v) { return v >= 0 && v <= 3; }
inline constexpr bool IsKnownLayout(int32_t v) { return v == 0 || v == 1; }

inline constexpr size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kUint8: return 1;
    case DType::kFloat16:
    case DType::kBFloat16: return 2;
    case DType::kFloat32: return 4;
  }
  return 1;
}

inline constexpr std::string_view DTypeName(DType t) {
  switch (t) {
    case DType::kUint8: return "uint8";
    case DType::kFloat16: return "float16";
    case DType::kBFloat16: return "bfloat16";
    case DType::kFloat32: return "float32";
  }
  return "?";
}

inline constexpr std::string_view LayoutName(Layout l) {
  return l == Layout::kNchw ? "NCHW" : "NHWC";
}

}  // namespace sluice
