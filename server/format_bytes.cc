#include "server/format_bytes.h"

#include <fmt/format.h>

namespace sluice {

std::string FormatBytes(int64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (u < 4 && bytes >= (int64_t{1} << (10 * (u + 1)))) ++u;
  const int64_t unit = int64_t{1} << (10 * u);
  if (bytes % unit == 0) return fmt::format("{} {}", bytes / unit, kUnits[u]);
  return fmt::format("{:.1f} {}", static_cast<double>(bytes) / static_cast<double>(unit),
                     kUnits[u]);
}

}  // namespace sluice
