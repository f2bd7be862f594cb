// A job: one running pipeline and the streams that consume it. Transport-agnostic (the gRPC
// service is a thin adapter over it): consumers ask for one event at a time with Want() and get
// it through OnEvent() as soon as the pipeline has one, without any thread waiting for it. In a
// job shared by several consumers every batch goes to exactly one of them; the end of the stream
// and an error go to all.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "formats/status.h"
#include "pipeline/pipeline.h"

namespace sluice {

// What a consumer receives: a batch, or the end of the stream (end = true), or the error that
// ended it (!error.ok()).
struct JobEvent {
  Batch batch;
  bool end = false;
  Status error;
  // With the end or an error: records the job skipped after its last batch, which no batch
  // carries. Given to one consumer of the job only, so that counting them once counts them all.
  uint64_t skipped = 0;
};

class JobConsumer {
 public:
  virtual ~JobConsumer() = default;
  // The answer to one Want(): called exactly once per Want (unless the consumer detaches first),
  // on whatever thread makes the event available — possibly inside Want() itself. Must not block.
  // Returns whether the consumer took the event; false when its stream has already ended (it may
  // still be waiting until it detaches), and then the job keeps the event's skipped count for
  // another consumer's end.
  virtual bool OnEvent(JobEvent event) = 0;
};

class Job {
 public:
  // name: the job_name, or a generated one for a private job. memory_budget: what the job
  // reserved from the server's budget; on_destroyed gives it back, last thing in ~Job, and takes
  // the job and the pipeline's last stats (taken as it stops; the counters that outlive jobs add
  // them up). Stats() still answers during on_destroyed.
  Job(std::string name, std::string dataset, std::string options_key, bool shared,
      std::unique_ptr<Pipeline> pipeline, std::unique_ptr<Iterator> iterator, int64_t memory_budget,
      std::function<void(const Job* job, const StatsSnapshot& last)> on_destroyed);
  // Stops the pipeline and waits for its threads; may take tens of milliseconds, so it is not
  // run on a gRPC thread (see JobRegistry).
  ~Job();
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  void Attach(JobConsumer* c);
  // After Detach returns, c gets no more OnEvent calls (one being delivered is waited for, so
  // never call it from inside OnEvent). Idempotent. Returns the consumers left.
  int Detach(JobConsumer* c);
  // REQUIRES: c attached, with no Want outstanding.
  void Want(JobConsumer* c);
  // Ends the stream for every consumer with `status` (the server is draining): consumers waiting
  // get it now, the others at their next Want. Batches not yet handed out are dropped.
  void Stop(Status status);

  const std::string& name() const { return name_; }
  const std::string& dataset() const { return dataset_; }
  // Identifies the pipeline options a joining consumer must match.
  const std::string& options_key() const { return options_key_; }
  bool shared() const { return shared_; }
  int64_t memory_budget() const { return memory_budget_; }
  const ResolvedOptions& options() const { return pipeline_->options(); }
  int consumers() const;
  // The pipeline's stats; once the job is being destroyed, those taken as it stopped. Any thread.
  StatsSnapshot Stats() const;

 private:
  // Hands ready events to waiting consumers until one side runs out. Any thread; never blocks
  // (only this job's short critical sections).
  void Pump();
  void OnPipelineReady();

  const std::string name_;
  const std::string dataset_;
  const std::string options_key_;
  const bool shared_;
  const int64_t memory_budget_;
  const std::function<void(const Job* job, const StatsSnapshot& last)> on_destroyed_;
  std::unique_ptr<Pipeline> pipeline_;
  // TryGetNext only by the thread holding pumping_; reset (under stats_mu_) by ~Job.
  std::unique_ptr<Iterator> iterator_;
  mutable std::mutex stats_mu_;  // taken alone, never while mu_ is held
  StatsSnapshot last_stats_;     // Stats() once iterator_ is gone; guarded by stats_mu_

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<JobConsumer*> attached_;    // guarded by mu_
  std::deque<JobConsumer*> waiting_;      // consumers with a Want outstanding; guarded by mu_
  JobConsumer* delivering_ = nullptr;     // guarded by mu_
  bool pumping_ = false;                  // one thread pumps at a time; guarded by mu_
  bool again_ = false;                    // the pipeline became ready while pumping; guarded by mu_
  std::optional<JobEvent> stash_;         // from the pipeline, no consumer yet; guarded by mu_
  std::optional<Status> final_;           // OK = end of stream; guarded by mu_
  uint64_t unreported_skips_ = 0;  // the iterator's skips after its last batch; guarded by mu_
  bool closing_ = false;                  // guarded by mu_
  int in_callbacks_ = 0;                  // pipeline ready callbacks running; guarded by mu_
};

}  // namespace sluice
