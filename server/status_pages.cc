#include "server/status_pages.h"

#include <fmt/format.h>

#include <algorithm>

#include "server/prometheus.h"

namespace sluice {
namespace {

double BusyFraction(const v1::StageStats& s, double wall) {
  if (wall <= 0) return 0;
  return s.busy_seconds() / (wall * std::max(1, s.max_parallelism()));
}

}  // namespace

StatusPages::StatusPages(const JobRegistry* registry, MemoryLimit limit,
                         std::function<int()> starts_in_flight)
    : registry_(registry),
      limit_(std::move(limit)),
      starts_in_flight_(std::move(starts_in_flight)),
      last_scrape_(std::chrono::steady_clock::now()) {}

HttpResponse StatusPages::Handle(const HttpRequest& request) {
  const std::string path = request.target.substr(0, request.target.find('?'));
  if (path == "/metrics") return {200, std::string(kPrometheusContentType), Metrics()};
  if (path == "/healthz") {
    if (draining_) return {503, "", "draining\n"};
    return {200, "", "ok\n"};
  }
  if (path == "/") return {200, "", StatusText()};
  return {404, "", "not found; try /, /metrics or /healthz\n"};
}

namespace {

using L = PrometheusWriter::Labels;

void WriteServerGauges(const v1::Stats& stats, PrometheusWriter& w) {
  w.Family("sluice_uptime_seconds", "Seconds since the server started.", MetricType::kGauge);
  w.Sample("sluice_uptime_seconds", {}, stats.uptime_seconds());
  w.Family("sluice_memory_budget_bytes", "The server's memory budget for all jobs.",
           MetricType::kGauge);
  w.Sample("sluice_memory_budget_bytes", {}, static_cast<double>(stats.memory_budget_bytes()));
  w.Family("sluice_memory_reserved_bytes", "Memory budgets of the running jobs.",
           MetricType::kGauge);
  w.Sample("sluice_memory_reserved_bytes", {}, static_cast<double>(stats.memory_reserved_bytes()));
  w.Family("sluice_shared_memory_bytes", "Shared-memory segments (memfds) of same-host streams.",
           MetricType::kGauge);
  w.Sample("sluice_shared_memory_bytes", {}, static_cast<double>(stats.shared_memory_bytes()));
  w.Family("sluice_shared_memory_streams", "Streams delivering through shared memory.",
           MetricType::kGauge);
  w.Sample("sluice_shared_memory_streams", {}, stats.shared_memory_streams());
  w.Family("sluice_stream_starts_in_flight",
           "Stream starts and DescribeStream calls waiting for their files (GetStats "
           "starts_in_flight).",
           MetricType::kGauge);
  w.Sample("sluice_stream_starts_in_flight", {}, stats.starts_in_flight());
}

void WriteDatasetMetrics(const v1::Stats& stats, const std::map<std::string, double>& rates,
                         PrometheusWriter& w) {
  struct Counter {
    const char* name;
    const char* help;
    MetricType type;
    double (*value)(const v1::DatasetStats&);
  };
  const Counter counters[] = {
      {"sluice_images_served_total", "Images delivered to clients.", MetricType::kCounter,
       [](const v1::DatasetStats& d) { return static_cast<double>(d.images_served()); }},
      {"sluice_bytes_served_total", "Image bytes delivered to clients.", MetricType::kCounter,
       [](const v1::DatasetStats& d) { return static_cast<double>(d.bytes_served()); }},
      {"sluice_batches_served_total", "Batches delivered to clients.", MetricType::kCounter,
       [](const v1::DatasetStats& d) { return static_cast<double>(d.batches_served()); }},
      {"sluice_skipped_records_total",
       "Corrupt or unusable records skipped (whether or not a batch followed).",
       MetricType::kCounter,
       [](const v1::DatasetStats& d) { return static_cast<double>(d.skipped_records()); }},
      {"sluice_record_index_fallbacks_total",
       "Record indexes found not to match their file (the file was read instead), running and "
       "finished jobs.",
       MetricType::kCounter,
       [](const v1::DatasetStats& d) { return static_cast<double>(d.record_index_fallbacks()); }},
      {"sluice_boxes_dropped_total",
       "Boxes the transforms dropped (BoxOptions min_overlap or min_size, or nothing of the box "
       "left in the crop).",
       MetricType::kCounter,
       [](const v1::DatasetStats& d) { return static_cast<double>(d.boxes_dropped()); }},
      {"sluice_streams_started_total", "StreamBatches calls accepted.", MetricType::kCounter,
       [](const v1::DatasetStats& d) { return static_cast<double>(d.streams_started()); }},
      {"sluice_active_streams", "Streams open now.", MetricType::kGauge,
       [](const v1::DatasetStats& d) { return static_cast<double>(d.active_streams()); }},
  };
  for (const Counter& c : counters) {
    w.Family(c.name, c.help, c.type);
    for (const v1::DatasetStats& d : stats.datasets()) {
      w.Sample(c.name, L{{"dataset", d.name()}}, c.value(d));
    }
  }
  w.Family("sluice_images_per_second", "Images delivered per second since the previous scrape.",
           MetricType::kGauge);
  for (const v1::DatasetStats& d : stats.datasets()) {
    w.Sample("sluice_images_per_second", L{{"dataset", d.name()}}, rates.at(d.name()));
  }
}

// A job's series: its dataset and name and, for a shared job's run from a later epoch (which may
// run beside the run from 0 under the same name), its start epoch; then `extra`, if any.
L JobLabels(const v1::JobStats& j, L extra = {}) {
  L labels{{"dataset", j.dataset()}, {"job", j.name()}};
  if (j.start_epoch() > 0) labels.emplace_back("start_epoch", std::to_string(j.start_epoch()));
  labels.insert(labels.end(), extra.begin(), extra.end());
  return labels;
}

void WriteJobMetrics(const v1::Stats& stats, PrometheusWriter& w) {
  struct JobGauge {
    const char* name;
    const char* help;
    double (*value)(const v1::JobStats&);
  };
  const JobGauge job_gauges[] = {
      {"sluice_job_queue_fill", "Ready batches waiting in a job's prefetch queue.",
       [](const v1::JobStats& j) { return static_cast<double>(j.queue_fill()); }},
      {"sluice_job_queue_capacity", "Capacity of a job's prefetch queue.",
       [](const v1::JobStats& j) { return static_cast<double>(j.queue_capacity()); }},
      {"sluice_job_decode_parallelism",
       "Decode threads a job's autotuner allows now (of sluice_job_decode_threads).",
       [](const v1::JobStats& j) { return static_cast<double>(j.decode_parallelism()); }},
      {"sluice_job_decode_threads", "A job's decode threads.",
       [](const v1::JobStats& j) { return static_cast<double>(j.decode_parallelism_max()); }},
      {"sluice_job_consumers", "Streams consuming a job.",
       [](const v1::JobStats& j) { return static_cast<double>(j.consumers()); }},
      {"sluice_job_num_consumers",
       "A job's consumers in lockstep (StreamRequest.num_consumers); 0 when not in lockstep.",
       [](const v1::JobStats& j) { return static_cast<double>(j.num_consumers()); }},
  };
  for (const JobGauge& g : job_gauges) {
    w.Family(g.name, g.help, MetricType::kGauge);
    for (const v1::JobStats& j : stats.jobs()) {
      w.Sample(g.name, JobLabels(j), g.value(j));
    }
  }
  struct JobCounter {
    const char* name;
    const char* help;
    uint64_t (v1::JobStats::*value)() const;
  };
  const JobCounter job_counters[] = {
      {"sluice_job_dropped_records_total",
       "Equal shares: usable records a job dropped after an epoch's equal batches.",
       &v1::JobStats::dropped_records},
      {"sluice_job_padded_samples_total",
       "Equal shares: repeated samples, marked invalid, that filled a job's epochs.",
       &v1::JobStats::padded_samples},
  };
  for (const JobCounter& c : job_counters) {
    w.Family(c.name, c.help, MetricType::kCounter);
    for (const v1::JobStats& j : stats.jobs()) {
      w.Sample(c.name, JobLabels(j), static_cast<double>((j.*c.value)()));
    }
  }
  w.Family("sluice_job_stage_busy_fraction",
           "Fraction of a stage's threads' time spent working, over the job's life.",
           MetricType::kGauge);
  for (const v1::JobStats& j : stats.jobs()) {
    for (const v1::StageStats& s : j.stages()) {
      w.Sample("sluice_job_stage_busy_fraction", JobLabels(j, {{"stage", s.name()}}),
               BusyFraction(s, j.wall_seconds()));
    }
  }
  w.Family("sluice_job_memory_bytes", "Bytes a job's memory pool holds now.", MetricType::kGauge);
  for (const v1::JobStats& j : stats.jobs()) {
    for (const v1::PoolStats& p : j.pools()) {
      w.Sample("sluice_job_memory_bytes", JobLabels(j, {{"pool", p.name()}}),
               static_cast<double>(p.bytes()));
    }
  }
}

}  // namespace

// Images per second of each dataset over the last second at least; a quicker second scrape
// reuses the previous rate.
std::map<std::string, double> StatusPages::ScrapeRates(const v1::Stats& stats) {
  std::map<std::string, double> rates;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto now = std::chrono::steady_clock::now();
    const double dt = std::chrono::duration<double>(now - last_scrape_).count();
    for (const v1::DatasetStats& d : stats.datasets()) {
      uint64_t& last = last_images_[d.name()];
      if (dt >= 1.0) rate_[d.name()] = static_cast<double>(d.images_served() - last) / dt;
      rates[d.name()] = rate_[d.name()];
      if (dt >= 1.0) last = d.images_served();
    }
    if (dt >= 1.0) last_scrape_ = now;
  }
  return rates;
}

std::string StatusPages::Metrics() {
  v1::Stats stats;
  registry_->FillStats("", &stats);
  stats.set_starts_in_flight(starts_in_flight_());
  const std::map<std::string, double> rates = ScrapeRates(stats);
  PrometheusWriter w;
  WriteServerGauges(stats, w);
  w.Family("sluice_memory_limit_bytes",
           "The memory this process may use (cgroup limit or physical memory, the smaller); the "
           "default memory budget is half of it.",
           MetricType::kGauge);
  w.Sample("sluice_memory_limit_bytes",
           L{{"source", MemoryLimitSourceName(limit_.source)}, {"file", limit_.file}},
           static_cast<double>(limit_.bytes));
  WriteDatasetMetrics(stats, rates, w);
  WriteJobMetrics(stats, w);
  return w.Take();
}

std::string StatusPages::StatusText() {
  v1::Stats stats;
  registry_->FillStats("", &stats);
  std::string out =
      fmt::format("sluice serve — up {:.0f} s, {} of {} streams, memory reserved {} of {} MiB{}\n",
                  stats.uptime_seconds(), stats.active_streams(), stats.max_streams(),
                  stats.memory_reserved_bytes() >> 20, stats.memory_budget_bytes() >> 20,
                  draining_ ? ", DRAINING" : "");
  out += fmt::format("memory limit {}\n\n", limit_.ToString());
  out += fmt::format("{:<16} {:>8} {:>14} {:>12} {:>10}\n", "dataset", "streams", "images",
                     "GB served", "skipped");
  for (const v1::DatasetStats& d : stats.datasets()) {
    out += fmt::format("{:<16} {:>8} {:>14} {:>12.2f} {:>10}\n", d.name(), d.active_streams(),
                       d.images_served(), static_cast<double>(d.bytes_served()) / 1e9,
                       d.skipped_records());
  }
  out += fmt::format("\n{:<16} {:<14} {:>9} {:>10} {:>7} {:>6}  busy by stage\n", "job", "dataset",
                     "consumers", "img/s", "queue", "decode");
  for (const v1::JobStats& j : stats.jobs()) {
    std::string busy;
    for (const v1::StageStats& s : j.stages()) {
      busy += fmt::format(" {} {:.0f}%", s.name(), 100 * BusyFraction(s, j.wall_seconds()));
    }
    out +=
        fmt::format("{:<16} {:<14} {:>9} {:>10.0f} {:>3}/{:<3} {:>2}/{:<3} {}\n", j.name(),
                    j.dataset(), j.consumers(), j.images_per_sec(), j.queue_fill(),
                    j.queue_capacity(), j.decode_parallelism(), j.decode_parallelism_max(), busy);
  }
  out +=
      "\nMachine-readable: /metrics (Prometheus), /healthz; gRPC: sluice.v1.DataService/GetStats\n";
  return out;
}

}  // namespace sluice
