// What /proc says about this process's I/O: proof that a path did not read a file, where file
// permissions prove nothing (the tests run as root, which chmod 0 does not stop).
#pragma once

#include <cstdint>
#include <fstream>
#include <string>

namespace sluice::testing {

// Bytes this process has read(2) or pread(2) so far (rchar of /proc/self/io).
inline uint64_t ReadChars() {
  std::ifstream io("/proc/self/io");
  std::string key;
  uint64_t value = 0;
  while (io >> key >> value) {
    if (key == "rchar:") return value;
  }
  return 0;
}

}  // namespace sluice::testing
