// The server's jobs: starts private and shared (named) jobs within the memory budget and the
// stream limit, keeps a shared job for a while after its last consumer leaves so that consumers
// can reconnect, and destroys finished jobs on its own thread (stopping a pipeline waits for its
// threads, which must not happen on a gRPC thread). Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "server/job.h"
#include "sluice/v1/server_config.pb.h"
#include "sluice/v1/service.pb.h"

namespace sluice {

// What a dataset has served; updated by the streams, read by GetStats and /metrics.
struct DatasetCounters {
  std::atomic<uint64_t> images{0};
  std::atomic<uint64_t> bytes{0};
  std::atomic<uint64_t> batches{0};
  // Records skipped by finished jobs' pipelines (FillStats adds the running ones'), whether or
  // not a batch or a trailer told a client of them; under JobRegistry's mutex.
  std::atomic<uint64_t> skipped{0};
  std::atomic<uint64_t> index_fallbacks{0};  // the same for record index fallbacks
  std::atomic<uint64_t> boxes_dropped{0};    // and for boxes the transforms dropped
  std::atomic<uint64_t> streams_started{0};
  std::atomic<int> active_streams{0};
};

class JobRegistry {
 public:
  // REQUIRES: config validated (ValidateServerConfig).
  explicit JobRegistry(const v1::ServerConfig& config);
  ~JobRegistry();
  JobRegistry(const JobRegistry&) = delete;
  JobRegistry& operator=(const JobRegistry&) = delete;

  // Counts a new stream of `dataset` and gives it its job: the running job `job_name` (which must
  // run the same options), or a new one. ResourceExhausted when the stream limit or the memory
  // budget would be passed; InvalidArgument when options disagree with the named job's.
  // record_ids: the job's batches carry their samples' record ids (ResolvedOptions::record_ids);
  // a shared job's streams must agree on it as on the options. A shared job's start (epoch, 0, 0)
  // names its run: streams of one job_name at different start epochs get different runs.
  // num_consumers: the job's consumers in lockstep (StreamRequest.num_consumers; 0: none), which
  // every stream of a run must give alike (InvalidArgument naming it otherwise).
  Result<std::shared_ptr<Job>> Open(const std::string& dataset, const std::string& job_name,
                                    const v1::PipelineOptions& options, BatchPosition start,
                                    bool record_ids = false, int num_consumers = 0);
  // The stream has detached from its job (Job::Detach) and gives its reference back; the job is
  // destroyed (later, on the registry's thread) when no stream uses it any more — a shared job
  // after job_linger_seconds without streams. A job in lockstep one of whose consumers has been
  // away for job_linger_seconds is ended (Job::AbortIfAbsent) by the same thread and leaves the
  // registry at once, so that a new stream of its name starts a new run.
  // REQUIRES: the server no longer runs streams when the registry is destroyed.
  void Close(std::shared_ptr<Job> job);

  // Ends every job's stream with `status` (the server is draining) and refuses new streams.
  // Not on a gRPC thread (it may destroy a job).
  void StopAll(const Status& status);

  DatasetCounters& counters(const std::string& dataset);
  void FillStats(const std::string& dataset, v1::Stats* out) const;
  // Same-host streams' shared-memory segments, together at most max_shared_memory_bytes:
  // false (nothing reserved) when `bytes` more would pass it.
  bool ReserveSharedMemory(int64_t bytes);
  void ReleaseSharedMemory(int64_t bytes) { shared_memory_bytes_.fetch_sub(bytes); }
  // Streams whose client attached to their segment.
  void CountSharedMemoryStream(int delta) { shared_memory_streams_.fetch_add(delta); }

 private:
  struct Entry {
    std::shared_ptr<Job> job;
    int streams = 0;  // Open()ed and not yet Close()d
    // A shared job without streams is kept until then.
    std::optional<std::chrono::steady_clock::time_point> linger_until;
  };
  // A shared run being started by one Open (outside mu_); the other Opens of its key wait for
  // it (starts_cv_) and join the job, or get its error, so that a run has one pipeline and one
  // budget however many of its consumers connect at once.
  struct Starting {
    std::string options_key;
    int num_consumers = 0;
    bool done = false;  // guarded by mu_
    Status status;      // the start's error; guarded by mu_
  };
  // The registry's thread: ends lingering jobs and lockstep jobs with a consumer away too long,
  // and drops doomed references, sleeping until the next such deadline or a notification.
  void Reap();
  // Under mu_: takes expired jobs out of jobs_ into doomed_, ends (in *aborted, for the caller to
  // Stop outside the lock) lockstep jobs with a consumer away too long, and returns the next
  // deadline, if any.
  std::optional<std::chrono::steady_clock::time_point> ExpireJobs(
      std::chrono::steady_clock::time_point now,
      std::vector<std::pair<std::shared_ptr<Job>, Status>>* aborted);
  // The job's pipeline and iterator, with its memory budget reserved until the job is gone.
  // ResourceExhausted when the budget would pass the server's; the pipeline's errors as they are.
  Result<std::shared_ptr<Job>> StartJob(const std::string& name, const std::string& dataset,
                                        const std::string& options_key, bool shared,
                                        const v1::PipelineOptions& options, BatchPosition start,
                                        bool record_ids, int num_consumers);

  const v1::ServerConfig& config_;
  const std::chrono::steady_clock::time_point start_;
  std::map<std::string, std::unique_ptr<DatasetCounters>> counters_;  // fixed after construction
  std::atomic<int> streams_{0};
  std::atomic<int64_t> shared_memory_bytes_{0};
  std::atomic<int> shared_memory_streams_{0};

  mutable std::mutex mu_;
  std::condition_variable cv_;
  // By dataset, name and start epoch (RunKey); guarded by mu_.
  std::map<std::string, Entry> jobs_;
  // Shared runs being started, by RunKey; guarded by mu_.
  std::map<std::string, std::shared_ptr<Starting>> starting_;
  std::condition_variable starts_cv_;  // a Starting is done
  // References to drop on the reaper's thread (only the last one destroys); guarded by mu_.
  std::vector<std::shared_ptr<Job>> doomed_;
  // Every job not yet destroyed, whether in jobs_ or on its way out; guarded by mu_.
  std::vector<const Job*> live_;
  int64_t reserved_ = 0;          // guarded by mu_
  uint64_t next_private_ = 0;     // guarded by mu_
  bool stopping_ = false;         // guarded by mu_
  std::optional<Status> refuse_;  // StopAll's status; guarded by mu_
  std::thread reaper_;
};

}  // namespace sluice
