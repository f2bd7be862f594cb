// DetectMemoryLimit over fake /proc and /sys/fs/cgroup trees (v2, v1, nested, "max", bind-mounted
// container roots, hidden cgroups, no cgroup at all) and once over this machine's own files.
#include "server/memory_limit.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/test_support.h"

namespace sluice {
namespace {

using testing::TempDir;

constexpr int64_t kGiB = int64_t{1} << 30;

// A fake root: files given as path -> contents, relative to the root; every tree has 16 GiB of
// physical memory unless it says otherwise.
struct FakeRoot {
  explicit FakeRoot(std::vector<std::pair<std::string, std::string>> files) {
    bool meminfo = false;
    for (const auto& [path, text] : files) {
      Write(path, text);
      meminfo = meminfo || path == "proc/meminfo";
    }
    if (!meminfo) Write("proc/meminfo", "MemTotal:       16777216 kB\nMemFree: 1 kB\n");
  }
  void Write(const std::string& path, const std::string& text) {
    const std::filesystem::path p = dir.path() / path;
    std::filesystem::create_directories(p.parent_path());
    testing::WriteAll(p.string(), text);
  }
  std::string root() const { return dir.path().string(); }

  TempDir dir;
};

const char kV2Mount[] =
    "24 1 0:22 / /sys/fs/cgroup rw,nosuid shared:9 - cgroup2 cgroup2 rw,nsdelegate\n";
const char kV1Mounts[] =
    "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct\n"
    "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n";

struct Case {
  std::string name;
  std::vector<std::pair<std::string, std::string>> files;
  int64_t bytes;
  MemoryLimitSource source;
  std::string file;
};

TEST_CASE("MemoryLimitIsTheSmallestOfCgroupAndPhysical") {
  const std::vector<Case> cases = {
      {"v2 limit",
       {{"proc/self/cgroup", "0::/kubepods/pod1\n"},
        {"proc/self/mountinfo", kV2Mount},
        {"sys/fs/cgroup/kubepods/pod1/memory.max", "4294967296\n"}},
       4 * kGiB,
       MemoryLimitSource::kCgroupV2,
       "/sys/fs/cgroup/kubepods/pod1/memory.max"},
      {"v2 max means none: physical memory",
       {{"proc/self/cgroup", "0::/user.slice\n"},
        {"proc/self/mountinfo", kV2Mount},
        {"sys/fs/cgroup/user.slice/memory.max", "max\n"}},
       16 * kGiB,
       MemoryLimitSource::kPhysical,
       "/proc/meminfo"},
      {"v2 nested: a parent's lower limit holds",
       {{"proc/self/cgroup", "0::/system.slice/sluice.service/worker\n"},
        {"proc/self/mountinfo", kV2Mount},
        {"sys/fs/cgroup/system.slice/memory.max", "max\n"},
        {"sys/fs/cgroup/system.slice/sluice.service/memory.max", "2147483648\n"},
        {"sys/fs/cgroup/system.slice/sluice.service/worker/memory.max", "max\n"}},
       2 * kGiB,
       MemoryLimitSource::kCgroupV2,
       "/sys/fs/cgroup/system.slice/sluice.service/memory.max"},
      {"v2 limit above physical memory: physical",
       {{"proc/self/cgroup", "0::/big\n"},
        {"proc/self/mountinfo", kV2Mount},
        {"sys/fs/cgroup/big/memory.max", "68719476736\n"}},
       16 * kGiB,
       MemoryLimitSource::kPhysical,
       "/proc/meminfo"},
      {"v2 in a cgroup namespace: the path is / and the mount is the pod's cgroup",
       {{"proc/self/cgroup", "0::/\n"},
        {"proc/self/mountinfo", kV2Mount},
        {"sys/fs/cgroup/memory.max", "1073741824\n"}},
       1 * kGiB,
       MemoryLimitSource::kCgroupV2,
       "/sys/fs/cgroup/memory.max"},
      {"v1 limit",
       {{"proc/self/cgroup", "12:pids:/docker/abc\n4:memory:/docker/abc\n0::/\n"},
        {"proc/self/mountinfo", kV1Mounts},
        {"sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n"},
        {"sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes", "3221225472\n"}},
       3 * kGiB,
       MemoryLimitSource::kCgroupV1,
       "/sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes"},
      {"v1 unlimited (PAGE_COUNTER_MAX): physical",
       {{"proc/self/cgroup", "4:memory:/\n"},
        {"proc/self/mountinfo", kV1Mounts},
        {"sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n"}},
       16 * kGiB,
       MemoryLimitSource::kPhysical,
       "/proc/meminfo"},
      {"v1 bind-mounted container root: the path starts with the mounted part",
       {{"proc/self/cgroup", "4:memory:/docker/abc\n"},
        {"proc/self/mountinfo",
         "35 31 0:32 /docker/abc /sys/fs/cgroup/memory ro - cgroup cgroup rw,memory\n"},
        {"sys/fs/cgroup/memory/memory.limit_in_bytes", "536870912\n"}},
       kGiB / 2,
       MemoryLimitSource::kCgroupV1,
       "/sys/fs/cgroup/memory/memory.limit_in_bytes"},
      {"v1 cgroup hidden by a sandbox: read from its nearest existing ancestor",
       {{"proc/self/cgroup", "4:memory:/process_api/ee49\n"},
        {"proc/self/mountinfo", kV1Mounts},
        {"sys/fs/cgroup/memory/memory.limit_in_bytes", "8589934592\n"},
        {"sys/fs/cgroup/memory/process_api/other/memory.limit_in_bytes", "1\n"}},
       8 * kGiB,
       MemoryLimitSource::kCgroupV1,
       "/sys/fs/cgroup/memory/memory.limit_in_bytes"},
      {"hybrid: v2 mounted without the memory controller, v1 has the limit",
       {{"proc/self/cgroup", "4:memory:/user\n0::/user\n"},
        {"proc/self/mountinfo",
         std::string(kV1Mounts) +
             "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"},
        {"sys/fs/cgroup/unified/user/cgroup.procs", "1\n"},
        {"sys/fs/cgroup/memory/user/memory.limit_in_bytes", "6442450944\n"}},
       6 * kGiB,
       MemoryLimitSource::kCgroupV1,
       "/sys/fs/cgroup/memory/user/memory.limit_in_bytes"},
      {"no cgroup files at all: physical",
       {{"proc/meminfo", "MemTotal:        8388608 kB\n"}},
       8 * kGiB,
       MemoryLimitSource::kPhysical,
       "/proc/meminfo"},
      {"garbage in memory.max: physical",
       {{"proc/self/cgroup", "0::/x\n"},
        {"proc/self/mountinfo", kV2Mount},
        {"sys/fs/cgroup/x/memory.max", "lots\n"}},
       16 * kGiB,
       MemoryLimitSource::kPhysical,
       "/proc/meminfo"},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    FakeRoot fake(c.files);
    const MemoryLimit limit = DetectMemoryLimit(fake.root());
    CHECK(limit.bytes == c.bytes);
    CHECK(MemoryLimitSourceName(limit.source) == std::string(MemoryLimitSourceName(c.source)));
    CHECK(limit.file == c.file);
  }
}

TEST_CASE("NothingReadableIsUnknown") {
  TempDir empty;
  const MemoryLimit limit = DetectMemoryLimit(empty.path().string());
  CHECK(limit.source == MemoryLimitSource::kUnknown);
  CHECK(limit.ToString() == "unknown");
}

TEST_CASE("ThisMachinesLimitIsPositiveAndAtMostPhysicalMemory") {
  const MemoryLimit limit = DetectMemoryLimit();
  INFO(limit.ToString());
  REQUIRE(limit.source != MemoryLimitSource::kUnknown);
  CHECK(limit.bytes > 0);
  const int64_t physical = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
  CHECK(limit.bytes <= physical);
  CHECK(std::filesystem::exists(limit.file));
}

}  // namespace
}  // namespace sluice
