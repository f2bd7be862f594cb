#include "server/memory_limit.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <charconv>
#include <cstdio>
#include <optional>
#include <string_view>
#include <vector>

#include "formats/file.h"
#include "server/format_bytes.h"

namespace sluice {
namespace {

// A limit this large is "no limit": v1 writes PAGE_COUNTER_MAX (about 2^63) rounded to pages.
constexpr int64_t kNoLimit = int64_t{1} << 60;

bool IsDirectory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  for (size_t start = 0;;) {
    const size_t end = s.find(sep, start);
    parts.push_back(s.substr(start, end == std::string_view::npos ? end : end - start));
    if (end == std::string_view::npos) return parts;
    start = end + 1;
  }
}

// A limit file's value in bytes; nullopt for "max", a huge value, or anything unreadable.
std::optional<int64_t> ReadLimit(const std::string& path) {
  Result<std::string> text = ReadFileToString(path);
  if (!text.ok()) return std::nullopt;
  const std::string_view s(*text);
  int64_t value = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || value <= 0 || value >= kNoLimit) return std::nullopt;
  return value;
}

// A cgroup hierarchy this process is in: where it is mounted and the process's path in it.
struct Hierarchy {
  std::string mount_root;   // the hierarchy's path that is mounted ("/" unless bind-mounted)
  std::string mount_point;  // where, e.g. /sys/fs/cgroup or /sys/fs/cgroup/memory
  std::string path;         // the process's cgroup, from /proc/self/cgroup
};

// The process's cgroup path in the v2 hierarchy ("0::/path") or in the v1 hierarchy that has
// the memory controller ("4:memory:/path").
std::optional<std::string> CgroupPath(const std::string& proc_self_cgroup, bool v2) {
  for (std::string_view line : Split(proc_self_cgroup, '\n')) {
    std::vector<std::string_view> f = Split(line, ':');
    if (f.size() < 3) continue;
    // The path itself may hold ':'.
    const std::string path(line.substr(f[0].size() + f[1].size() + 2));
    if (v2 && f[0] == "0" && f[1].empty()) return path;
    if (!v2) {
      for (std::string_view c : Split(f[1], ',')) {
        if (c == "memory") return path;
      }
    }
  }
  return std::nullopt;
}

// mountinfo: "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTS".
std::optional<Hierarchy> FindMount(const std::string& mountinfo, bool v2) {
  std::optional<Hierarchy> found;
  for (std::string_view line : Split(mountinfo, '\n')) {
    std::vector<std::string_view> f = Split(line, ' ');
    size_t dash = 0;
    while (dash < f.size() && f[dash] != "-") ++dash;
    if (dash < 5 || dash + 3 > f.size()) continue;
    const std::string_view type = f[dash + 1];
    bool match = v2 ? type == "cgroup2" : false;
    if (!v2 && type == "cgroup") {
      for (std::string_view o : Split(f[dash + 3], ',')) match = match || o == "memory";
    }
    // The last such mount is the one in effect.
    if (match) found = Hierarchy{std::string(f[3]), std::string(f[4]), ""};
  }
  return found;
}

struct Found {
  int64_t bytes;
  std::string file;
};

// The smallest limit of `name` in the process's cgroup directory and its ancestors up to the
// mount point. `root` prefixes every path read; `file` is reported without it.
std::optional<Found> SmallestLimit(const std::string& root, const Hierarchy& h,
                                   const std::string& name) {
  std::string rel = h.path;
  // A bind mount of part of the hierarchy (a container's own cgroup mounted as the root): the
  // path from /proc/self/cgroup starts with the mounted part.
  if (h.mount_root != "/" && rel.starts_with(h.mount_root)) rel = rel.substr(h.mount_root.size());
  while (rel.size() > 1 && rel.back() == '/') rel.pop_back();
  if (rel == "/") rel.clear();
  // Looked for from the nearest directory that exists.
  while (!rel.empty() && !IsDirectory(root + h.mount_point + rel)) {
    rel = rel.substr(0, rel.rfind('/'));
  }
  std::optional<Found> best;
  for (;;) {
    const std::string file = h.mount_point + rel + "/" + name;
    if (std::optional<int64_t> v = ReadLimit(root + file); v && (!best || *v < best->bytes)) {
      best = Found{*v, file};
    }
    if (rel.empty()) return best;
    rel = rel.substr(0, rel.rfind('/'));
  }
}

std::optional<Found> CgroupLimit(const std::string& root, bool v2) {
  Result<std::string> cgroup = ReadFileToString(root + "/proc/self/cgroup");
  Result<std::string> mountinfo = ReadFileToString(root + "/proc/self/mountinfo");
  if (!cgroup.ok() || !mountinfo.ok()) return std::nullopt;
  std::optional<std::string> path = CgroupPath(*cgroup, v2);
  std::optional<Hierarchy> h = FindMount(*mountinfo, v2);
  if (!path || !h) return std::nullopt;
  h->path = *path;
  return SmallestLimit(root, *h, v2 ? "memory.max" : "memory.limit_in_bytes");
}

std::optional<int64_t> PhysicalMemory(const std::string& root) {
  Result<std::string> meminfo = ReadFileToString(root + "/proc/meminfo");
  if (!meminfo.ok()) return std::nullopt;
  const size_t at = meminfo->find("MemTotal:");
  if (at == std::string::npos) return std::nullopt;
  long long kib = 0;
  if (std::sscanf(meminfo->c_str() + at, "MemTotal: %lld kB", &kib) != 1 || kib <= 0) {
    return std::nullopt;
  }
  return static_cast<int64_t>(kib) * 1024;
}

}  // namespace

const char* MemoryLimitSourceName(MemoryLimitSource source) {
  switch (source) {
    case MemoryLimitSource::kPhysical:
      return "physical";
    case MemoryLimitSource::kCgroupV2:
      return "cgroup v2";
    case MemoryLimitSource::kCgroupV1:
      return "cgroup v1";
    case MemoryLimitSource::kUnknown:
      break;
  }
  return "unknown";
}

std::string MemoryLimit::ToString() const {
  if (source == MemoryLimitSource::kUnknown) return "unknown";
  return fmt::format("{} ({} {})", FormatBytes(bytes), MemoryLimitSourceName(source), file);
}

MemoryLimit DetectMemoryLimit(const std::string& root_arg) {
  const std::string root = root_arg == "/" ? "" : root_arg;
  MemoryLimit limit;
  if (std::optional<int64_t> physical = PhysicalMemory(root)) {
    limit = {*physical, MemoryLimitSource::kPhysical, "/proc/meminfo"};
  }
  for (bool v2 : {true, false}) {
    std::optional<Found> found = CgroupLimit(root, v2);
    if (!found) continue;
    if (limit.source == MemoryLimitSource::kUnknown || found->bytes < limit.bytes) {
      limit = {found->bytes, v2 ? MemoryLimitSource::kCgroupV2 : MemoryLimitSource::kCgroupV1,
               found->file};
    }
  }
  return limit;
}

}  // namespace sluice
