// How much memory this process may use before the kernel kills it: the memory limit of its cgroup
// (v2 `memory.max`, v1 `memory.limit_in_bytes`, the smallest of its own and its ancestors') or the
// machine's physical memory, whichever is smaller. `sluice serve`'s default memory budget and
// shared-memory cap are derived from it (server_config.h), so that a server in a pod or a systemd
// unit limited to 4 GiB refuses jobs before the OOM killer ends it.
#pragma once

#include <cstdint>
#include <string>

namespace sluice {

enum class MemoryLimitSource {
  kUnknown,   // neither a cgroup limit nor /proc/meminfo could be read
  kPhysical,  // /proc/meminfo MemTotal: no cgroup limit, or one above physical memory
  kCgroupV2,  // a memory.max of the process's cgroup or an ancestor
  kCgroupV1,  // a memory.limit_in_bytes of the process's memory cgroup or an ancestor
};

// "physical", "cgroup v2", ...
const char* MemoryLimitSourceName(MemoryLimitSource source);

struct MemoryLimit {
  int64_t bytes = 0;  // 0 when source is kUnknown
  MemoryLimitSource source = MemoryLimitSource::kUnknown;
  std::string file;  // the file the limit was read from, as the process sees it ("" if unknown)

  // "4 GiB (cgroup v2 /sys/fs/cgroup/user.slice/memory.max)"
  std::string ToString() const;
};

// Reads the limit from the files under `root` ("" or "/" for this machine's own; tests pass a tree
// with proc/self/cgroup, proc/self/mountinfo, proc/meminfo and the cgroup files where mountinfo
// says they are mounted). The cgroup is found through proc/self/cgroup and the mount points of
// proc/self/mountinfo (cgroup2 for v2; cgroup with the memory option for v1); "max" and values of
// 2^60 or more mean no limit; a cgroup directory that does not exist (a cgroup namespace or a
// sandbox that hides it) is looked for from its nearest existing ancestor. Never fails: what
// cannot be read is left out, and kUnknown says that nothing could.
MemoryLimit DetectMemoryLimit(const std::string& root = "");

}  // namespace sluice
