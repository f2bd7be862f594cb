// Byte counts for people: start-up lines, status pages and error messages.
#pragma once

#include <cstdint>
#include <string>

namespace sluice {

// "256 MiB", "3.0 GiB", "512 B": whole numbers of a unit stay whole.
std::string FormatBytes(int64_t bytes);

}  // namespace sluice
