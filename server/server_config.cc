#include "server/server_config.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <filesystem>
#include <set>
#include <thread>

#include "client/wire/token_file.h"
#include "formats/dtype.h"
#include "formats/file.h"
#include "pipeline/options.h"
#include "pipeline/tunables.h"
#include "server/format_bytes.h"
#include "server/textproto.h"

namespace sluice {
namespace {

Status Bad(std::string_view field, std::string_view what) {
  return InvalidArgument(fmt::format("{}: {}", field, what));
}

bool IsDatasetName(const std::string& name) {
  if (name.empty() || name.size() > 64 || name.front() == '.') return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '.' || c == '-';
  });
}

// "HOST:PORT" with a name or IPv4 host, or "[IPV6]:PORT"; port 0 picks a free one.
Status CheckHostPort(std::string_view field, const std::string& address) {
  auto bad = [&](std::string_view why) {
    return Bad(field, fmt::format("\"{}\" {}", address, why));
  };
  size_t colon = address.rfind(':');
  if (colon == std::string::npos) return bad("is not HOST:PORT");
  const std::string host = address.substr(0, colon);
  const std::string port = address.substr(colon + 1);
  if (!host.empty() && host.front() == '[') {
    in6_addr ip{};
    if (host.size() < 2 || host.back() != ']' ||
        inet_pton(AF_INET6, host.substr(1, host.size() - 2).c_str(), &ip) != 1) {
      return bad("has no IPv6 address between [ and ]");
    }
  } else if (host.empty()) {
    return bad("has no host (0.0.0.0 or [::] listens on every interface)");
  } else if (host.find(':') != std::string::npos) {
    return bad("is an IPv6 address without brackets; write it as [::1]:50051");
  } else if (!std::all_of(host.begin(), host.end(), [](char c) {
               return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '.' || c == '-' ||
                      c == '_';
             })) {
    return bad("has a host that is neither a name nor an address");
  }
  if (port.empty() || port.size() > 5 ||
      !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
      std::stoi(port) > 65535) {
    return bad("has no port in 0..65535");
  }
  return Status::OK();
}

Status CheckListen(std::string_view field, const std::string& address) {
  if (address.rfind("unix:", 0) != 0) return CheckHostPort(field, address);
  std::string path = address.substr(5);
  if (path.empty() || path.front() != '/') {
    return Bad(field, fmt::format("\"{}\" needs an absolute path: unix:/run/sluice.sock", address));
  }
  if (path.size() >= sizeof(sockaddr_un::sun_path)) {
    return Bad(field, fmt::format("\"{}\" is longer than a unix socket path may be ({} bytes)",
                                  address, sizeof(sockaddr_un::sun_path) - 1));
  }
  return Status::OK();
}

// A pattern glob() (as ExpandGlobs calls it) matches to exactly `path`.
std::string GlobEscape(const std::string& path) {
  std::string out;
  for (char c : path) {
    if (std::string_view("\\*?[]{}~").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

Status ReadNonEmptyFile(std::string_view field, const std::string& path) {
  Result<std::string> text = ReadFileToString(path);
  if (!text.ok()) return text.status().WithContext(field);
  if (text->empty()) return Bad(field, path + " is empty");
  return Status::OK();
}

// A limit must lie within what a pipeline can make: the bounds of the tunable it limits.
Status CheckLimit(const std::string& ds, std::string_view name, int64_t value, Tunable bounds) {
  const TunableSpec& spec = Spec(bounds);
  if (value >= spec.min && value <= spec.max) return Status::OK();
  return Bad(ds + ".limits." + std::string(name),
             fmt::format("{} is outside [{}, {}]", value, spec.min, spec.max));
}

Status CheckLimits(const std::string& ds, v1::ClientLimits* l) {
  if (l->max_batch_size() == 0) l->set_max_batch_size(kDefaultMaxBatchSize);
  if (l->min_image_size() == 0) l->set_min_image_size(kDefaultMinImageSize);
  if (l->max_image_size() == 0) l->set_max_image_size(kDefaultMaxImageSize);
  RETURN_IF_ERROR(CheckLimit(ds, "max_batch_size", l->max_batch_size(), Tunable::kBatchSize));
  RETURN_IF_ERROR(CheckLimit(ds, "min_image_size", l->min_image_size(), Tunable::kImageHeight));
  RETURN_IF_ERROR(CheckLimit(ds, "max_image_size", l->max_image_size(), Tunable::kImageHeight));
  if (l->min_image_size() > l->max_image_size()) {
    return Bad(ds + ".limits.min_image_size",
               fmt::format("{} is over limits.max_image_size {}", l->min_image_size(),
                           l->max_image_size()));
  }
  return Status::OK();
}

// Replaces the patterns by the regular, readable files they match. A file list is made absolute
// (its entries are checked when the pipeline options are, by ResolveOptions).
Status ExpandFiles(const std::string& ds, v1::PipelineOptions* p) {
  const std::string field = ds + ".pipeline.files";
  if (!p->file_list().empty()) {
    if (!p->files().empty()) {
      return Bad(ds + ".pipeline.file_list",
                 "give files or file_list, not both (a list labels its files itself; file "
                 "patterns are labelled by folder name)");
    }
    std::error_code ec;
    const std::filesystem::path list = std::filesystem::absolute(p->file_list(), ec);
    if (ec) return Bad(ds + ".pipeline.file_list", p->file_list() + ": " + ec.message());
    p->set_file_list(list.lexically_normal().string());
    return Status::OK();
  }
  if (p->files().empty()) return Bad(field, "no file pattern given (nor a file_list)");
  Result<std::vector<std::string>> files = ExpandGlobs({p->files().begin(), p->files().end()});
  if (!files.ok()) return files.status().WithContext(field);
  p->clear_files();
  for (const std::string& f : *files) {
    struct stat st {};
    if (::stat(f.c_str(), &st) != 0) return ErrnoStatus(errno, "stat", f).WithContext(field);
    if (!S_ISREG(st.st_mode)) return Bad(field, "'" + f + "' is not a regular file");
    if (::access(f.c_str(), R_OK) != 0) return ErrnoStatus(errno, "read", f).WithContext(field);
    p->add_files(GlobEscape(f));
  }
  return Status::OK();
}

// Checks and completes one dataset; returns the size of the Batch message its defaults make.
Result<int64_t> CheckDataset(const v1::ServerConfig& server, v1::DatasetConfig* d) {
  const std::string ds = fmt::format("datasets[\"{}\"]", d->name());
  v1::ClientLimits* limits = d->mutable_limits();
  RETURN_IF_ERROR(CheckLimits(ds, limits));
  v1::PipelineOptions* p = d->mutable_pipeline();
  RETURN_IF_ERROR(ExpandFiles(ds, p));

  if (p->memory_budget_bytes() < 0) {
    return Bad(ds + ".pipeline.memory_budget_bytes",
               fmt::format("{} is negative", p->memory_budget_bytes()));
  }
  if (p->memory_budget_bytes() == 0) {
    p->set_memory_budget_bytes(std::min(kDefaultDatasetMemoryBudget, server.memory_budget_bytes()));
  }
  if (p->memory_budget_bytes() > server.memory_budget_bytes()) {
    return Bad(ds + ".pipeline.memory_budget_bytes",
               fmt::format("{} is over the server's memory_budget_bytes {}",
                           FormatBytes(p->memory_budget_bytes()),
                           FormatBytes(server.memory_budget_bytes())));
  }

  for (auto [name, v] :
       {std::pair{"batch_size", p->batch_size()}, std::pair{"image_height", p->image_height()},
        std::pair{"image_width", p->image_width()}}) {
    if (v < 0) return Bad(ds + ".pipeline." + name, fmt::format("{} is negative", v));
  }
  p->set_batch_size(static_cast<int>(ValueOrDefault(Tunable::kBatchSize, p->batch_size())));
  p->set_image_height(static_cast<int>(ValueOrDefault(Tunable::kImageHeight, p->image_height())));
  p->set_image_width(WidthOrHeight(p->image_width(), p->image_height()));
  if (p->batch_size() > limits->max_batch_size()) {
    return Bad(ds + ".pipeline.batch_size", fmt::format("{} is over limits.max_batch_size {}",
                                                        p->batch_size(), limits->max_batch_size()));
  }
  for (auto [name, v] :
       {std::pair{"image_height", p->image_height()}, std::pair{"image_width", p->image_width()}}) {
    if (v < limits->min_image_size()) {
      return Bad(ds + ".pipeline." + name,
                 fmt::format("{} is under limits.min_image_size {}", v, limits->min_image_size()));
    }
    if (v > limits->max_image_size()) {
      return Bad(ds + ".pipeline." + name,
                 fmt::format("{} is over limits.max_image_size {}", v, limits->max_image_size()));
    }
  }

  // Every stream of the dataset serves the list as read now.
  if (!p->file_list().empty()) {
    RETURN_IF_ERROR(
        FreezeFileList(p->file_list(), p->unlabeled() ? ListLabels::kIgnore : ListLabels::kRead)
            .WithContext(ds + ".pipeline"));
  }
  // Checked with the dataset's num_classes, as requests are resolved.
  v1::PipelineOptions check = *p;
  if (check.num_classes() == 0) check.set_num_classes(d->num_classes());
  Result<ResolvedOptions> resolved = ResolveOptions(check);
  if (!resolved.ok()) return resolved.status().WithContext(ds + ".pipeline");
  // An image folder's classes are its folders: ListDatasets and DescribeDataset say how many.
  if (d->num_classes() == 0) d->set_num_classes(resolved->num_classes);
  const int64_t features = FeatureMessageBytes(resolved->features, p->batch_size());
  int64_t largest = BatchMessageBytes(p->batch_size(), p->image_height(), p->image_width(),
                                      DTypeSize(resolved->transforms.output.dtype)) +
                    features;
  std::set<std::string> names = {std::string(kDefaultTransformSet)};
  for (int i = 0; i < d->transform_sets_size(); ++i) {
    const v1::TransformSet& set = d->transform_sets(i);
    const std::string where = fmt::format("{}.transform_sets[{}]", ds, i);
    if (!IsDatasetName(set.name())) {
      return Bad(where + ".name",
                 fmt::format("\"{}\" is not 1 to 64 of A-Z a-z 0-9 _ . - (not starting with .)",
                             set.name()));
    }
    if (!names.insert(set.name()).second) {
      return Bad(where + ".name", fmt::format("'{}' is taken (\"default\" is pipeline.transforms)",
                                              set.name()));
    }
    *check.mutable_transforms() = set.transforms();
    Result<ResolvedOptions> r = ResolveOptions(check);
    if (!r.ok()) return r.status().WithContext(where);
    largest =
        std::max(largest, BatchMessageBytes(p->batch_size(), p->image_height(), p->image_width(),
                                            DTypeSize(r->transforms.output.dtype)) +
                              features);
  }
  return largest;
}

// Applies the defaults of the server-wide limits and checks them.
Status CheckServerLimits(v1::ServerConfig* c, const MemoryLimit& limit,
                         std::vector<std::string>* warnings) {
  if (c->max_shared_memory_bytes() < 0) {
    return Bad("max_shared_memory_bytes",
               fmt::format("{} is negative", c->max_shared_memory_bytes()));
  }
  if (c->max_shared_memory_bytes() == 0) {
    c->set_max_shared_memory_bytes(DefaultMaxSharedMemory(limit));
  }
  if (c->memory_budget_bytes() < 0) {
    return Bad("memory_budget_bytes", fmt::format("{} is negative", c->memory_budget_bytes()));
  }
  const int64_t segments = c->disable_shared_memory() ? 0 : c->max_shared_memory_bytes();
  if (c->memory_budget_bytes() == 0) {
    c->set_memory_budget_bytes(DefaultMemoryBudget(limit, segments));
    if (c->memory_budget_bytes() <= 0) {
      return Bad("max_shared_memory_bytes",
                 fmt::format("{} leaves no memory budget under this process's memory limit, {}",
                             FormatBytes(segments), limit.ToString()));
    }
  }
  if (limit.source != MemoryLimitSource::kUnknown &&
      c->memory_budget_bytes() > limit.bytes - segments) {
    const std::string what = fmt::format(
        "memory_budget_bytes {} plus max_shared_memory_bytes {} is over this process's memory "
        "limit, {}",
        FormatBytes(c->memory_budget_bytes()), FormatBytes(segments), limit.ToString());
    if (limit.source != MemoryLimitSource::kPhysical) {
      return Bad("memory_budget_bytes",
                 what +
                     "; the kernel would kill the server before the budget refused a job "
                     "(leave both unset for defaults that fit)");
    }
    if (warnings) warnings->push_back(what + ": the machine may swap or kill the server");
  }
  if (c->max_streams() < 0)
    return Bad("max_streams", fmt::format("{} is under 1", c->max_streams()));
  if (c->max_streams() == 0) c->set_max_streams(kDefaultMaxStreams);
  if (c->max_batch_bytes() < 0) {
    return Bad("max_batch_bytes", fmt::format("{} is negative", c->max_batch_bytes()));
  }
  if (c->max_batch_bytes() == 0) c->set_max_batch_bytes(kDefaultMaxBatchBytes);
  if (c->max_batch_bytes() > INT_MAX) {
    return Bad("max_batch_bytes",
               fmt::format("{} is over gRPC's largest message, {}", c->max_batch_bytes(), INT_MAX));
  }
  if (c->job_linger_seconds() < 0) {
    return Bad("job_linger_seconds", fmt::format("{} is negative", c->job_linger_seconds()));
  }
  if (c->job_linger_seconds() == 0) c->set_job_linger_seconds(kDefaultJobLingerSeconds);
  // The server's decode threads per pipeline: 0 (every core) or within the pipeline's bounds.
  const int64_t max_threads = Spec(Tunable::kThreads).max;
  if (c->threads() < 0 || c->threads() > max_threads) {
    return Bad("threads", fmt::format("{} is outside [0, {}]", c->threads(), max_threads));
  }
  if (c->threads() == 0) {
    c->set_threads(static_cast<int>(std::clamp<int64_t>(std::thread::hardware_concurrency(),
                                                        Spec(Tunable::kThreads).min, max_threads)));
  }
  return Status::OK();
}

}  // namespace

int64_t BatchMessageBytes(int64_t batch, int64_t height, int64_t width, size_t value_bytes) {
  // Per sample: a label, a valid flag, record ids, a mixed label and its weight, varints at most.
  return batch * height * width * 3 * static_cast<int64_t>(value_bytes) + 40 * batch + 128;
}

int64_t FeatureMessageBytes(const FeatureSchema& schema, int64_t batch) {
  if (schema.empty()) return 0;
  const std::vector<ArrayInfo> arrays = schema.arrays();
  // Per array: its FeatureArray's tag and length, name, type and row_shape, and the tags and
  // lengths of row_lengths, values and value_lengths.
  int64_t framing = 0;
  for (const ArrayInfo& a : arrays) {
    framing += 64 + static_cast<int64_t>(a.name.size() + 5 * a.row_shape.size());
  }
  // Per sample: its slot's values (a bytes value's length is a varint of at most 5 bytes where
  // the slot counts 4) and one row length per array.
  const int64_t sample =
      schema.slot_bytes() + schema.slot_bytes() / 4 + 5 * static_cast<int64_t>(arrays.size());
  return framing + batch * sample;
}

int64_t DefaultMaxSharedMemory(const MemoryLimit& limit) {
  if (limit.source == MemoryLimitSource::kUnknown) return kDefaultMaxSharedMemoryBytes;
  return std::min(kDefaultMaxSharedMemoryBytes, limit.bytes / 4);
}

int64_t DefaultMemoryBudget(const MemoryLimit& limit, int64_t max_shared_memory_bytes) {
  if (limit.source == MemoryLimitSource::kUnknown) return kDefaultServerMemoryBudget;
  return (limit.bytes - max_shared_memory_bytes) / 2;
}

Result<v1::ServerConfig> LoadServerConfig(const std::string& path, const MemoryLimit& limit,
                                          std::vector<std::string>* warnings) {
  v1::ServerConfig config;
  RETURN_IF_ERROR(ParseTextProtoFile(path, &config));
  if (config.has_fleet_shard()) {
    return InvalidArgument(path +
                           ": fleet_shard is set by `sluice serve --shard I/N`, not in a config "
                           "file (a dataset's own part is its pipeline.shard)");
  }
  return ValidateServerConfig(std::move(config), limit, warnings);
}

Result<v1::ServerConfig> QuickServerConfig(const MemoryLimit& limit,
                                           const std::vector<std::string>& file_globs,
                                           const std::string& name, int port,
                                           const std::string& metrics_address,
                                           const std::string& file_list) {
  if (port < 0 || port > 65535) {
    return InvalidArgument(fmt::format("port {} is outside [0, 65535]", port));
  }
  v1::ServerConfig config;
  config.add_listen(fmt::format("127.0.0.1:{}", port));
  config.set_metrics_address(metrics_address);
  v1::DatasetConfig* d = config.add_datasets();
  d->set_name(name);
  for (const std::string& g : file_globs) d->mutable_pipeline()->add_files(g);
  d->mutable_pipeline()->set_file_list(file_list);
  return ValidateServerConfig(std::move(config), limit);
}

Result<v1::ServerConfig> ValidateServerConfig(v1::ServerConfig c, const MemoryLimit& limit,
                                              std::vector<std::string>* warnings) {
  if (c.listen().empty()) c.add_listen(kDefaultListen);
  std::set<std::string> listen;
  for (int i = 0; i < c.listen_size(); ++i) {
    const std::string field = fmt::format("listen[{}]", i);
    RETURN_IF_ERROR(CheckListen(field, c.listen(i)));
    if (!listen.insert(c.listen(i)).second) {
      return Bad(field, fmt::format("\"{}\" is listed twice", c.listen(i)));
    }
  }
  if (!c.metrics_address().empty()) {
    RETURN_IF_ERROR(CheckHostPort("metrics_address", c.metrics_address()));
  }

  RETURN_IF_ERROR(CheckServerLimits(&c, limit, warnings));

  const v1::TlsConfig& tls = c.tls();
  if (tls.cert_file().empty() != tls.key_file().empty()) {
    return Bad("tls", tls.cert_file().empty() ? "key_file is set but cert_file is not"
                                              : "cert_file is set but key_file is not");
  }
  if (!tls.cert_file().empty()) {
    RETURN_IF_ERROR(ReadNonEmptyFile("tls.cert_file", tls.cert_file()));
    RETURN_IF_ERROR(ReadNonEmptyFile("tls.key_file", tls.key_file()));
  }
  RETURN_IF_ERROR(ReadToken(c).status());

  if (c.datasets().empty()) return Bad("datasets", "the configuration names no dataset");
  std::set<std::string> names;
  int64_t largest_batch = 0;
  const v1::DatasetConfig* largest = nullptr;
  for (int i = 0; i < c.datasets_size(); ++i) {
    v1::DatasetConfig* d = c.mutable_datasets(i);
    if (!IsDatasetName(d->name())) {
      return Bad(fmt::format("datasets[{}].name", i),
                 fmt::format("\"{}\" is not 1 to 64 of A-Z a-z 0-9 _ . - (not starting with .)",
                             d->name()));
    }
    if (!names.insert(d->name()).second) {
      return Bad(fmt::format("datasets[{}].name", i),
                 fmt::format("\"{}\" names two datasets", d->name()));
    }
    ASSIGN_OR_RETURN(int64_t batch_bytes, CheckDataset(c, d));
    if (batch_bytes > largest_batch) {
      largest_batch = batch_bytes;
      largest = d;
    }
  }
  if (c.max_batch_bytes() < largest_batch) {
    const v1::PipelineOptions& p = largest->pipeline();
    const bool features = !p.features().empty() || p.boxes().enabled();
    return Bad("max_batch_bytes",
               fmt::format("{} is under dataset \"{}\"'s default batch of {} at {}x{}{} ({})",
                           FormatBytes(c.max_batch_bytes()), largest->name(), p.batch_size(),
                           p.image_height(), p.image_width(), features ? " with its features" : "",
                           FormatBytes(largest_batch)));
  }
  return c;
}

Result<std::string> ReadToken(const v1::ServerConfig& config) {
  if (config.token_file().empty()) return std::string();
  Result<std::string> token = ReadTokenFile(config.token_file());
  if (!token.ok()) return token.status().WithContext("token_file");
  return token;
}

}  // namespace sluice
