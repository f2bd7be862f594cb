#include "server/tools/profile_target.h"

#include <algorithm>
#include <chrono>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "client/client.h"
#include "client/wire/token_file.h"
#include "formats/file.h"
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

}  // namespace

int RunRemoteProfile(const RemoteProfileFlags& f) {
  ClientOptions co;
  co.targets = f.targets;
  if (f.prefetch > 0) co.prefetch = f.prefetch;
  co.shared_memory = f.shared_memory;
  if (!f.token_file.empty()) {
    Result<std::string> token = ReadTokenFile(f.token_file);
    if (!token.ok()) return Fail(token.status());
    co.token = *token;
  }
  if (!f.tls_ca_file.empty()) {
    Result<std::string> ca = ReadFileToString(f.tls_ca_file);
    if (!ca.ok()) return Fail(ca.status());
    co.tls_root_certs = *ca;
  }
  Result<std::unique_ptr<Client>> client = Client::Create(co);
  if (!client.ok()) return Fail(client.status());

  v1::StreamRequest request;
  request.set_dataset(f.dataset);
  request.set_batch_size(f.batch_size);
  request.set_image_height(f.height);
  request.set_image_width(f.width);
  if (!f.mode.empty()) request.set_mode(f.mode == "eval" ? v1::MODE_EVAL : v1::MODE_TRAIN);
  if (f.seed) request.set_seed(*f.seed);
  request.set_epochs(0);
  request.set_job_name(f.job_name);

  std::set<std::string> jobs_before;
  Result<v1::Stats> before = (*client)->GetStats(f.dataset);
  if (!before.ok()) return Fail(before.status());
  for (const v1::JobStats& j : before->jobs()) jobs_before.insert(j.name());

  Result<std::unique_ptr<BatchStream>> stream = (*client)->Stream(request);
  if (!stream.ok()) return Fail(stream.status());
  ReceivedBatch batch;
  bool end = false;
  for (int64_t i = 0; i < f.warmup_batches; ++i) {
    Status s = (*stream)->Next(&batch, &end);
    if (!s.ok()) return Fail(s);
    if (end) break;
  }
  Result<v1::Stats> mid = (*client)->GetStats(f.dataset);
  if (!mid.ok()) return Fail(mid.status());
  const v1::JobStats* job_mid = FindJob(*mid, jobs_before, f.job_name);
  v1::JobStats job_start = job_mid ? *job_mid : v1::JobStats();

  const int64_t target_batches = f.batches > 0 ? f.batches : (f.seconds > 0 ? 0 : 30);
  std::vector<double> waits_ms;
  uint64_t images = 0, bytes = 0;
  int height = 0, width = 0, batch_size = 0;
  const auto start = Clock::now();
  {
    Progress progress("profile", static_cast<uint64_t>(target_batches), "batches");
    while (!end) {
      const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
      if (target_batches > 0 ? static_cast<int64_t>(waits_ms.size()) >= target_batches
                             : elapsed >= f.seconds) {
        break;
      }
      const auto t = Clock::now();
      Status s = (*stream)->Next(&batch, &end);
      if (!s.ok()) return Fail(s);
      if (end) break;
      waits_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t).count());
      images += static_cast<uint64_t>(batch.meta.n);
      bytes += batch.images.size();
      height = batch.meta.height;
      width = batch.meta.width;
      batch_size = std::max(batch_size, batch.meta.n);
      progress.Add(1);
    }
  }
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();
  Result<v1::Stats> after = (*client)->GetStats(f.dataset);
  if (!after.ok()) return Fail(after.status());
  const v1::JobStats* job = FindJob(*after, jobs_before, f.job_name);

  const double images_per_sec = static_cast<double>(images) / wall;
  const double bytes_per_sec = static_cast<double>(bytes) / wall;
  double wait_total_ms = 0;
  for (double w : waits_ms) wait_total_ms += w;
  const double wait_fraction = wait_total_ms / 1000 / wall;

  struct Row {
    std::string name;
    double items_per_sec = 0, busy = 0;
    int parallelism = 0;
  };
  std::vector<Row> rows;
  if (job) {
    const double job_wall = job->wall_seconds() - job_start.wall_seconds();
    for (int i = 0; i < job->stages_size(); ++i) {
      const v1::StageStats& a = job->stages(i);
      if (a.name() == "consumer" || a.name() == "shuffle") continue;
      const v1::StageStats* b = nullptr;
      for (const auto& s : job_start.stages()) {
        if (s.name() == a.name()) b = &s;
      }
      Row r;
      r.name = a.name();
      const double items = static_cast<double>(a.items() - (b ? b->items() : 0));
      const double busy = a.busy_seconds() - (b ? b->busy_seconds() : 0);
      r.items_per_sec = job_wall > 0 ? items / job_wall : 0;
      r.parallelism = a.max_parallelism();
      r.busy = job_wall > 0 ? busy / (job_wall * std::max(1, a.max_parallelism())) : 0;
      rows.push_back(r);
    }
  }
  std::string stage = "client", reason;
  std::vector<std::string> fixes;
  double decode_busy = 0;
  for (const Row& r : rows) {
    if (r.name == "decode") decode_busy = r.busy;
  }
  if (wait_fraction < 0.05) {
    reason = fmt::format("batches waited for this client; it read them {:.0f}% of the time",
                         100 * (1 - wait_fraction));
    fixes.push_back("the service keeps up; the consumer is the limit");
  } else if (decode_busy > 0.7) {
    stage = "server decode";
    reason = fmt::format("the server's decode threads were {:.0f}% busy", 100 * decode_busy);
    fixes.push_back("more decode threads on the server (ServerConfig.threads) or more servers "
                    "(--target A --target B, each serving a shard)");
    fixes.push_back("cache { mode: CACHE_DECODED } on the dataset when it fits in memory");
  } else {
    stage = "transport";
    reason = fmt::format("the client waited {:.0f}% of the time while the server's decode was "
                         "only {:.0f}% busy",
                         100 * wait_fraction, 100 * decode_busy);
    fixes.push_back("a unix: socket when client and server share a machine");
    fixes.push_back("a larger client prefetch (--prefetch), or a faster network");
  }

  const double p50 = Percentile(waits_ms, 0.5), p90 = Percentile(waits_ms, 0.9),
               p99 = Percentile(waits_ms, 0.99),
               max = waits_ms.empty() ? 0 : *std::max_element(waits_ms.begin(), waits_ms.end());
  if (f.json) {
    nlohmann::json stages = nlohmann::json::array();
    for (const Row& r : rows) {
      stages.push_back({{"name", r.name},
                        {"items_per_sec", r.items_per_sec},
                        {"busy_fraction", r.busy},
                        {"parallelism", r.parallelism}});
    }
    nlohmann::json j = {{"target", fmt::format("{}", fmt::join(f.targets, ","))},
                        {"dataset", f.dataset},
                        {"images_per_sec", images_per_sec},
                        {"bytes_per_sec", bytes_per_sec},
                        {"batches", waits_ms.size()},
                        {"images", images},
                        {"seconds", wall},
                        {"batch_size", batch_size},
                        {"height", height},
                        {"width", width},
                        {"servers", (*stream)->servers()},
                        {"reconnects", (*stream)->reconnects()},
                        {"shared_memory_batches", (*stream)->shared_memory_batches()},
                        {"client_wait_fraction", wait_fraction},
                        {"batch_wait_ms", {{"p50", p50}, {"p90", p90}, {"p99", p99}, {"max", max}}},
                        {"stages", stages},
                        {"decode_parallelism", job ? job->decode_parallelism() : 0},
                        {"decode_parallelism_max", job ? job->decode_parallelism_max() : 0},
                        {"bottleneck", {{"stage", stage}, {"reason", reason}, {"fixes", fixes}}}};
    fmt::print("{}\n", j.dump());
    return 0;
  }
  fmt::print("sluice profile: {} batches of {} at {}x{} from {} (dataset {}, {} server{})\n",
             waits_ms.size(), batch_size, height, width, fmt::join(f.targets, ", "), f.dataset,
             (*stream)->servers(), (*stream)->servers() == 1 ? "" : "s");
  fmt::print("  {:.0f} images/s   {:.1f} MB/s   {:.2f} batches/s   {:.2f} s measured\n",
             images_per_sec, bytes_per_sec / 1e6, static_cast<double>(waits_ms.size()) / wall,
             wall);
  fmt::print("  images {}\n", (*stream)->shared_memory_batches() > 0
                                  ? "through shared memory (same host)"
                                  : "through the socket");
  fmt::print("  wait per batch: p50 {:.2f} ms  p90 {:.2f} ms  p99 {:.2f} ms  max {:.2f} ms; "
             "waiting {:.0f}% of the time\n\n",
             p50, p90, p99, max, 100 * wait_fraction);
  if (!rows.empty()) {
    fmt::print("  server job {} (decode parallelism {} of {}):\n", job->name(),
               job->decode_parallelism(), job->decode_parallelism_max());
    fmt::print("  {:<9} {:>11} {:>7} {:>6}\n", "stage", "items/s", "busy", "par");
    for (const Row& r : rows) {
      fmt::print("  {:<9} {:>11.0f} {:>6.0f}% {:>6}\n", r.name, r.items_per_sec, 100 * r.busy,
                 r.parallelism);
    }
  }
  fmt::print("\n  bottleneck: {} — {}\n", stage, reason);
  for (const std::string& fix : fixes) fmt::print("    try: {}\n", fix);
  return 0;
}

}  // namespace sluice
