#include "server/tools/profile_target.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "client/client.h"
#include "client/wire/token_file.h"
#include "formats/file.h"
#include "pipeline/stats_proto.h"
#include "server/tools/profile_report.h"
#include "server/tools/progress.h"

namespace sluice {
namespace {

using Clock = std::chrono::steady_clock;

int Fail(const Status& s) {
  fmt::print(stderr, "sluice profile: {}\n", s.ToString());
  return 1;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

// The server-side job this profile started: present after, absent before.
const v1::JobStats* FindJob(const v1::Stats& after, const std::set<std::string>& before,
                            const std::string& job_name) {
  for (const v1::JobStats& j : after.jobs()) {
    if (!job_name.empty() ? j.name() == job_name : before.count(j.name()) == 0) return &j;
  }
  return nullptr;
}

Result<std::unique_ptr<Client>> Connect(const RemoteProfileFlags& f) {
  ClientOptions co;
  co.targets = f.targets;
  if (f.prefetch > 0) co.prefetch = f.prefetch;
  co.shared_memory = f.shared_memory;
  co.allow_partial_fleet = f.allow_partial_fleet;
  if (!f.token_file.empty()) {
    ASSIGN_OR_RETURN(co.token, ReadTokenFile(f.token_file));
  }
  if (!f.tls_ca_file.empty()) {
    ASSIGN_OR_RETURN(co.tls_root_certs, ReadFileToString(f.tls_ca_file));
  }
  return Client::Create(co);
}

v1::StreamRequest MakeRequest(const RemoteProfileFlags& f) {
  v1::StreamRequest request;
  request.set_dataset(f.dataset);
  request.set_batch_size(f.batch_size);
  request.set_image_height(f.height);
  request.set_image_width(f.width);
  if (!f.mode.empty()) request.set_mode(f.mode == "eval" ? v1::MODE_EVAL : v1::MODE_TRAIN);
  if (f.seed) request.set_seed(*f.seed);
  request.set_epochs(0);
  request.set_job_name(f.job_name);
  request.set_transform_set(f.transform_set);
  request.set_consumer_index(f.consumer_index);
  request.set_num_consumers(f.num_consumers);
  return request;
}

// What the client saw over the measured window, and the server's job at both ends of it.
struct RemoteMeasurement {
  std::vector<double> waits_ms;  // per batch
  uint64_t images = 0;
  uint64_t bytes = 0;
  int height = 0;
  int width = 0;
  int batch_size = 0;
  double wall = 0;
  std::optional<v1::JobStats> job_start;
  std::optional<v1::JobStats> job_end;
};

// The server's view of the job this profile started (or joined), when GetStats shows it.
Result<std::optional<v1::JobStats>> JobNow(Client* client, const RemoteProfileFlags& f,
                                           const std::set<std::string>& jobs_before) {
  ASSIGN_OR_RETURN(const v1::Stats stats, client->GetStats(f.dataset));
  const v1::JobStats* job = FindJob(stats, jobs_before, f.job_name);
  if (job == nullptr) return std::optional<v1::JobStats>();
  return std::optional<v1::JobStats>(*job);
}

// Reads the warm-up batches, then measures until --batches or --seconds.
Result<RemoteMeasurement> Measure(Client* client, BatchStream* stream, const RemoteProfileFlags& f,
                                  const std::set<std::string>& jobs_before) {
  RemoteMeasurement m;
  ReceivedBatch batch;
  bool end = false;
  for (int64_t i = 0; i < f.warmup_batches && !end; ++i)
    RETURN_IF_ERROR(stream->Next(&batch, &end));
  ASSIGN_OR_RETURN(m.job_start, JobNow(client, f, jobs_before));
  const int64_t target_batches = f.batches > 0 ? f.batches : (f.seconds > 0 ? 0 : 30);
  const auto start = Clock::now();
  Progress progress("profile", static_cast<uint64_t>(target_batches), "batches");
  while (!end) {
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    if (target_batches > 0 ? static_cast<int64_t>(m.waits_ms.size()) >= target_batches
                           : elapsed >= f.seconds) {
      break;
    }
    const auto t = Clock::now();
    RETURN_IF_ERROR(stream->Next(&batch, &end));
    if (end) break;
    m.waits_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t).count());
    m.images += static_cast<uint64_t>(batch.meta.n);
    m.bytes += batch.images.size();
    m.height = batch.meta.height;
    m.width = batch.meta.width;
    m.batch_size = std::max(m.batch_size, batch.meta.n);
    progress.Add(1);
  }
  progress.Finish();
  m.wall = std::chrono::duration<double>(Clock::now() - start).count();
  ASSIGN_OR_RETURN(m.job_end, JobNow(client, f, jobs_before));
  return m;
}

// The report on the server's job, with the client's own waits as the consumer's.
ProfileReport RemoteReport(const RemoteMeasurement& m) {
  double wait_total_ms = 0;
  for (double w : m.waits_ms) wait_total_ms += w;
  const double wait_fraction = m.wall > 0 ? wait_total_ms / 1000 / m.wall : 0;
  ProfileContext context;
  context.side = ProfileSide::kRemote;
  if (!m.job_end) return MakeProfileReport({}, {}, wait_fraction, context);
  StatsSnapshot start = SnapshotFromJobStats(m.job_start.value_or(v1::JobStats()));
  StatsSnapshot end = SnapshotFromJobStats(*m.job_end);
  // JobStats carries no image bytes; every image of the job has the size (RGB) of the batches
  // received.
  const uint64_t image_bytes = static_cast<uint64_t>(m.height) * m.width * 3;
  start.image_bytes = start.images * image_bytes;
  end.image_bytes = end.images * image_bytes;
  return MakeProfileReport(start, end, wait_fraction, context);
}

struct Waits {
  double p50, p90, p99, max;
};

Waits WaitPercentiles(const std::vector<double>& waits_ms) {
  return {Percentile(waits_ms, 0.5), Percentile(waits_ms, 0.9), Percentile(waits_ms, 0.99),
          waits_ms.empty() ? 0 : *std::max_element(waits_ms.begin(), waits_ms.end())};
}

void PrintJson(const RemoteProfileFlags& f, const RemoteMeasurement& m, const BatchStream& stream,
               const ProfileReport& report) {
  const Waits w = WaitPercentiles(m.waits_ms);
  nlohmann::json j = {
      {"target", fmt::format("{}", fmt::join(f.targets, ","))},
      {"dataset", f.dataset},
      {"images_per_sec", static_cast<double>(m.images) / m.wall},
      {"bytes_per_sec", static_cast<double>(m.bytes) / m.wall},
      {"batches", m.waits_ms.size()},
      {"images", m.images},
      {"seconds", m.wall},
      {"batch_size", m.batch_size},
      {"height", m.height},
      {"width", m.width},
      {"servers", stream.servers()},
      {"reconnects", stream.reconnects()},
      {"shared_memory_batches", stream.shared_memory_batches()},
      {"client_wait_fraction", report.consumer_wait_fraction},
      {"batch_wait_ms", {{"p50", w.p50}, {"p90", w.p90}, {"p99", w.p99}, {"max", w.max}}},
      {"stages", StagesJson(report)},
      {"decode_parallelism", m.job_end ? m.job_end->decode_parallelism() : 0},
      {"decode_parallelism_max", m.job_end ? m.job_end->decode_parallelism_max() : 0},
      {"bottleneck", BottleneckJson(report)}};
  fmt::print("{}\n", j.dump());
}

void PrintText(const RemoteProfileFlags& f, const RemoteMeasurement& m, const BatchStream& stream,
               const ProfileReport& report) {
  const Waits w = WaitPercentiles(m.waits_ms);
  fmt::print(
      "sluice profile: {} batches of {} at {}x{} from {} (dataset {}, "
      "{} server{})\n",
      m.waits_ms.size(), m.batch_size, m.height, m.width, fmt::join(f.targets, ", "), f.dataset,
      stream.servers(), stream.servers() == 1 ? "" : "s");
  fmt::print(
      "  {:.0f} images/s   {:.1f} MB/s   {:.2f} batches/s   {:.2f} s "
      "measured\n",
      static_cast<double>(m.images) / m.wall, static_cast<double>(m.bytes) / m.wall / 1e6,
      static_cast<double>(m.waits_ms.size()) / m.wall, m.wall);
  fmt::print("  images {}\n", stream.shared_memory_batches() > 0
                                  ? "through shared memory (same host)"
                                  : "through the socket");
  fmt::print(
      "  wait per batch: p50 {:.2f} ms  p90 {:.2f} ms  p99 {:.2f} ms  "
      "max {:.2f} ms; "
      "waiting {:.0f}% of the time\n\n",
      w.p50, w.p90, w.p99, w.max, 100 * report.consumer_wait_fraction);
  if (m.job_end && !report.stages.empty()) {
    fmt::print("  server job {} (decode parallelism {} of {}):\n", m.job_end->name(),
               m.job_end->decode_parallelism(), m.job_end->decode_parallelism_max());
    fmt::print("{}", FormatStageTable(report));
  }
  fmt::print("{}", FormatBottleneck(report));
}

Status Profile(const RemoteProfileFlags& f) {
  ASSIGN_OR_RETURN(std::unique_ptr<Client> client, Connect(f));
  std::set<std::string> jobs_before;
  ASSIGN_OR_RETURN(const v1::Stats before, client->GetStats(f.dataset));
  for (const v1::JobStats& j : before.jobs()) jobs_before.insert(j.name());
  ASSIGN_OR_RETURN(std::unique_ptr<BatchStream> stream, client->Stream(MakeRequest(f)));
  ASSIGN_OR_RETURN(const RemoteMeasurement m, Measure(client.get(), stream.get(), f, jobs_before));
  const ProfileReport report = RemoteReport(m);
  if (f.json) {
    PrintJson(f, m, *stream, report);
  } else {
    PrintText(f, m, *stream, report);
  }
  return Status::OK();
}

}  // namespace

int RunRemoteProfile(const RemoteProfileFlags& f) {
  const Status s = Profile(f);
  return s.ok() ? 0 : Fail(s);
}

}  // namespace sluice
