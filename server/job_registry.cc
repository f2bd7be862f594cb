#include "server/job_registry.h"

#include <algorithm>

#include "pipeline/equal_shares.h"
#include "pipeline/options.h"
#include "pipeline/stats_proto.h"
#include "server/format_bytes.h"
#include "server/server_config.h"

namespace sluice {
namespace {

// A shared job's run: one per start epoch of a job_name.
std::string RunKey(const std::string& dataset, const std::string& name, int64_t start_epoch) {
  return dataset + "/" + name + "@" + std::to_string(start_epoch);
}
std::string RunKey(const Job& job) { return RunKey(job.dataset(), job.name(), job.start_epoch()); }

void FillJobStats(const Job& job, v1::JobStats* out) {
  out->set_name(job.name());
  out->set_dataset(job.dataset());
  out->set_consumers(job.consumers());
  out->set_num_consumers(job.num_consumers());
  out->set_start_epoch(job.start_epoch());
  out->set_memory_budget_bytes(job.memory_budget());
  FillJobStats(job.Stats(), out);
}

}  // namespace

JobRegistry::JobRegistry(const v1::ServerConfig& config)
    : config_(config), start_(std::chrono::steady_clock::now()) {
  for (const v1::DatasetConfig& d : config.datasets()) {
    counters_[d.name()] = std::make_unique<DatasetCounters>();
  }
  reaper_ = std::thread([this] { Reap(); });
}

JobRegistry::~JobRegistry() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  reaper_.join();
  // References handed back after the reaper left; their jobs give back to reserved_.
  std::vector<std::shared_ptr<Job>> doomed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    doomed.swap(doomed_);
    for (auto& [key, e] : jobs_) doomed.push_back(std::move(e.job));
    jobs_.clear();
  }
  doomed.clear();
}

DatasetCounters& JobRegistry::counters(const std::string& dataset) {
  return *counters_.at(dataset);
}

Result<std::shared_ptr<Job>> JobRegistry::StartJob(const std::string& name,
                                                   const std::string& dataset,
                                                   const std::string& options_key, bool shared,
                                                   const v1::PipelineOptions& options,
                                                   BatchPosition start, bool record_ids,
                                                   int num_consumers) {
  ASSIGN_OR_RETURN(ResolvedOptions resolved, ResolveOptions(options, num_consumers));
  // The record counts are what a start waits for on a slow file; counted first (cached, so
  // MakeIterator reads no file again), a start that returns during a drain builds no pipeline.
  if (resolved.equalizes()) RETURN_IF_ERROR(PlanSharesForFiles(resolved).status());
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (refuse_) return *refuse_;
  }
  resolved.record_ids = record_ids;
  resolved.name = "dataset '" + dataset + "', job '" + name + "'";
  std::unique_ptr<Pipeline> pipeline = Pipeline::FromResolved(std::move(resolved));
  const int64_t budget = pipeline->options().memory_budget_bytes;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (reserved_ + budget > config_.memory_budget_bytes()) {
      return ResourceExhausted("starting this job would reserve " + FormatBytes(budget) +
                               " on top of the " + FormatBytes(reserved_) +
                               " its running jobs hold, over the server's memory_budget_bytes " +
                               FormatBytes(config_.memory_budget_bytes()) +
                               "; try again when a stream ends");
    }
    reserved_ += budget;
  }
  Result<std::unique_ptr<Iterator>> iterator = pipeline->MakeIterator(start);
  if (!iterator.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    reserved_ -= budget;
    return iterator.status();
  }
  auto job = std::make_shared<Job>(
      name, dataset, options_key, shared, start.epoch, num_consumers, std::move(pipeline),
      std::move(*iterator), budget,
      [this, budget, &c = counters(dataset)](const Job* gone, const StatsSnapshot& last) {
        std::lock_guard<std::mutex> lock(mu_);
        // In one critical section with FillStats: its counts move from the running job to the
        // dataset's counters, neither missing nor counted twice.
        c.skipped.fetch_add(last.skipped);
        c.index_fallbacks.fetch_add(last.index_fallbacks);
        c.boxes_dropped.fetch_add(last.boxes_dropped);
        std::erase(live_, gone);
        reserved_ -= budget;
      });
  std::lock_guard<std::mutex> lock(mu_);
  live_.push_back(job.get());
  return job;
}

Result<std::shared_ptr<Job>> JobRegistry::Open(const std::string& dataset,
                                               const std::string& job_name,
                                               const v1::PipelineOptions& requested,
                                               BatchPosition start, bool record_ids,
                                               int num_consumers) {
  if (streams_.fetch_add(1) >= config_.max_streams()) {
    streams_.fetch_sub(1);
    return ResourceExhausted(
        "this server already serves its max_streams = " + std::to_string(config_.max_streams()) +
        " streams; try again later or another server");
  }
  auto fail = [this](Status s) {
    streams_.fetch_sub(1);
    return s;
  };
  auto joined = [this, &dataset](Entry& e) {
    ++e.streams;
    e.linger_until.reset();
    counters(dataset).active_streams.fetch_add(1);
    counters(dataset).streams_started.fetch_add(1);
    return e.job;
  };
  v1::PipelineOptions options = requested;
  if (options.threads() <= 0 || options.threads() > config_.threads()) {
    options.set_threads(config_.threads());
  }
  std::string options_key;
  options.SerializeToString(&options_key);  // same code, same message: same bytes
  if (record_ids) options_key += "+record_ids";
  options_key += "+consumers=" + std::to_string(num_consumers);
  const bool shared = !job_name.empty();
  // Why a stream cannot join the run it names (running with, or being started with, these
  // options), or OK.
  auto mismatch = [&](const std::string& run_options, int run_consumers) {
    if (run_consumers != num_consumers) {
      return InvalidArgument("job '" + job_name + "' of dataset '" + dataset + "' runs with " +
                             "num_consumers " + std::to_string(run_consumers) +
                             "; this stream gives " + std::to_string(num_consumers) +
                             ": every consumer of a job in lockstep gives the same num_consumers");
    }
    if (run_options == options_key) return Status::OK();
    return InvalidArgument("job '" + job_name + "' of dataset '" + dataset +
                           "' runs with other options (batch size, image size, mode, seed, "
                           "epochs, shard, drop_remainder, equal_shares, record_ids or transform_set); join "
                           "it with the same request or choose another job_name");
  };
  std::string name = job_name;
  const std::string key = RunKey(dataset, name, start.epoch);
  std::shared_ptr<Starting> mine;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (refuse_) return fail(*refuse_);
    if (!shared) name = "private-" + std::to_string(++next_private_);
    while (shared) {
      if (auto it = jobs_.find(key); it != jobs_.end()) {
        const Job& job = *it->second.job;
        if (Status s = mismatch(job.options_key(), job.num_consumers()); !s.ok()) return fail(s);
        return joined(it->second);
      }
      auto at = starting_.find(key);
      if (at == starting_.end()) {
        mine = std::make_shared<Starting>();
        mine->options_key = options_key;
        mine->num_consumers = num_consumers;
        starting_.emplace(key, mine);
        break;
      }
      const std::shared_ptr<Starting> other = at->second;
      if (Status s = mismatch(other->options_key, other->num_consumers); !s.ok()) return fail(s);
      // On a start thread (DataService defers starts), which the start would take as long.
      starts_cv_.wait(lock, [&] { return other->done; });
      if (!other->status.ok()) return fail(other->status);
      // Started: joined at the top (or, when it has ended already, started again).
      if (refuse_) return fail(*refuse_);
    }
  }

  // Resolving the options and starting the pipeline take a while: not under the lock, which
  // every stream's end and every stats call need.
  Result<std::shared_ptr<Job>> started =
      StartJob(name, dataset, options_key, shared, options, start, record_ids, num_consumers);
  std::shared_ptr<Job> result;
  Status refused;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!started.ok()) {
      refused = started.status();
    } else if (refuse_) {
      refused = *refuse_;
    } else {
      // Under the key's Starting, no other Open adds the run.
      Entry& e = jobs_[RunKey(**started)];
      e.job = *started;
      result = joined(e);
    }
    if (mine) {
      mine->done = true;
      mine->status = refused;
      starting_.erase(key);
    }
    // This reference; the job lives on in jobs_ if kept.
    if (started.ok()) doomed_.push_back(std::move(*started));
  }
  cv_.notify_all();
  starts_cv_.notify_all();
  if (!refused.ok()) return fail(refused);
  return result;
}

void JobRegistry::StopAll(const Status& status) {
  // Called by the thread that handles signals, not a gRPC thread: it may drop a job's last
  // reference.
  std::vector<std::shared_ptr<Job>> jobs;
  {
    std::lock_guard<std::mutex> lock(mu_);
    refuse_ = status;
    for (auto& [key, e] : jobs_) jobs.push_back(e.job);
  }
  for (auto& j : jobs) j->Stop(status);
}

void JobRegistry::Close(std::shared_ptr<Job> job) {
  streams_.fetch_sub(1);
  counters(job->dataset()).active_streams.fetch_sub(1);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = jobs_.find(RunKey(*job));
    if (it != jobs_.end() && it->second.job == job && --it->second.streams == 0) {
      if (job->shared() && !stopping_ && !refuse_) {
        it->second.linger_until =
            std::chrono::steady_clock::now() + std::chrono::seconds(config_.job_linger_seconds());
      } else {
        doomed_.push_back(std::move(it->second.job));
        jobs_.erase(it);
      }
    }
    // Never drop a reference on the caller's (gRPC) thread: the reaper drops it.
    doomed_.push_back(std::move(job));
  }
  cv_.notify_all();
}

std::optional<std::chrono::steady_clock::time_point> JobRegistry::ExpireJobs(
    std::chrono::steady_clock::time_point now,
    std::vector<std::pair<std::shared_ptr<Job>, Status>>* aborted) {
  const std::chrono::seconds linger(config_.job_linger_seconds());
  std::optional<std::chrono::steady_clock::time_point> next;
  auto consider = [&next](std::chrono::steady_clock::time_point t) {
    if (!next || t < *next) next = t;
  };
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    Entry& e = it->second;
    const bool expired = e.linger_until && *e.linger_until <= now;
    if (expired || stopping_) {
      doomed_.push_back(std::move(e.job));
      it = jobs_.erase(it);
      continue;
    }
    if (e.linger_until) consider(*e.linger_until);
    if (e.job->num_consumers() > 0) {
      if (std::optional<Status> why = e.job->AbortIfAbsent(now, linger)) {
        // Out of the registry now: its streams end, and a restart of the job is a new run.
        aborted->emplace_back(e.job, std::move(*why));
        doomed_.push_back(std::move(e.job));
        it = jobs_.erase(it);
        continue;
      }
      if (auto deadline = e.job->AbsenceDeadline(linger)) consider(*deadline);
    }
    ++it;
  }
  return next;
}

void JobRegistry::Reap() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    std::vector<std::pair<std::shared_ptr<Job>, Status>> aborted;
    const std::optional<std::chrono::steady_clock::time_point> next =
        ExpireJobs(std::chrono::steady_clock::now(), &aborted);
    if (doomed_.empty() && aborted.empty()) {
      if (stopping_ && jobs_.empty()) return;
      // Every change to a deadline (a job opened, a stream closed) or to doomed_ notifies, under
      // mu_, which is held from ExpireJobs to here.
      if (next) {
        cv_.wait_until(lock, *next);
      } else {
        cv_.wait(lock);
      }
      continue;
    }
    std::vector<std::shared_ptr<Job>> doomed;
    doomed.swap(doomed_);
    lock.unlock();
    // Not under mu_: a stream told of the end may close (Close) at once, and a job's last
    // reference, dropped here, gives its budget back under mu_. A stream still holding a job
    // (only while stopping) hands it back through Close().
    for (auto& [job, why] : aborted) job->Stop(why);
    aborted.clear();
    doomed.clear();
    lock.lock();
  }
}

bool JobRegistry::ReserveSharedMemory(int64_t bytes) {
  int64_t used = shared_memory_bytes_.load();
  do {
    if (used + bytes > config_.max_shared_memory_bytes()) return false;
  } while (!shared_memory_bytes_.compare_exchange_weak(used, used + bytes));
  return true;
}

void JobRegistry::FillStats(const std::string& dataset, v1::Stats* out) const {
  out->set_uptime_seconds(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
  out->set_memory_budget_bytes(config_.memory_budget_bytes());
  out->set_max_streams(config_.max_streams());
  out->set_active_streams(streams_.load());
  out->set_shared_memory_bytes(shared_memory_bytes_.load());
  out->set_shared_memory_streams(shared_memory_streams_.load());
  for (const auto& [name, c] : counters_) {
    if (!dataset.empty() && name != dataset) continue;
    v1::DatasetStats* d = out->add_datasets();
    d->set_name(name);
    d->set_images_served(c->images.load());
    d->set_bytes_served(c->bytes.load());
    d->set_batches_served(c->batches.load());
    d->set_active_streams(c->active_streams.load());
    d->set_streams_started(c->streams_started.load());
  }
  // Under the lock, without taking references: the last reference to a job must be dropped by
  // the reaper, never on a gRPC thread.
  std::lock_guard<std::mutex> lock(mu_);
  for (v1::DatasetStats& d : *out->mutable_datasets()) {
    // Every record the pipelines skipped, every index fallback and every box dropped: finished
    // jobs' (added as each is destroyed, under mu_) and running ones', whether or not a client
    // heard of them.
    const DatasetCounters& c = *counters_.at(d.name());
    uint64_t skipped = c.skipped.load();
    uint64_t fallbacks = c.index_fallbacks.load();
    uint64_t boxes_dropped = c.boxes_dropped.load();
    for (const Job* j : live_) {
      if (j->dataset() != d.name()) continue;
      const StatsSnapshot s = j->Stats();
      skipped += s.skipped;
      fallbacks += s.index_fallbacks;
      boxes_dropped += s.boxes_dropped;
    }
    d.set_skipped_records(skipped);
    d.set_record_index_fallbacks(fallbacks);
    d.set_boxes_dropped(boxes_dropped);
  }
  out->set_memory_reserved_bytes(reserved_);
  for (const auto& [key, e] : jobs_) {
    if (dataset.empty() || e.job->dataset() == dataset) FillJobStats(*e.job, out->add_jobs());
  }
}

}  // namespace sluice
