// A job: one running pipeline and the streams that consume it. Transport-agnostic (the gRPC
// service is a thin adapter over it): consumers ask for one event at a time with Want() and get
// it through OnEvent() as soon as the pipeline has one, without any thread waiting for it. In a
// job shared by several consumers every batch goes to exactly one of them; the end of the stream
// and an error go to all. A job in lockstep (num_consumers N > 0) gives batch (e, i) to the
// consumer attached under index i mod N, and holds it for that index while its consumer is busy
// or away; see Attach.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
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
  // Returns whether the consumer took the event (and may have moved from it); false, leaving
  // `event` as it was, when its stream has already ended (it may still be waiting until it
  // detaches): the job then keeps the batch for the next consumer (in lockstep: for the same
  // index) and the skipped count for another consumer's end.
  virtual bool OnEvent(JobEvent& event) = 0;
};

class Job {
 public:
  // name: the job_name, or a generated one for a private job. memory_budget: what the job
  // reserved from the server's budget; on_destroyed gives it back, last thing in ~Job, and takes
  // the job and the pipeline's last stats (taken as it stops; the counters that outlive jobs add
  // them up). Stats() still answers during on_destroyed.
  // start_epoch: the epoch the iterator starts at (a shared job's run). num_consumers: the
  // consumers in lockstep (StreamRequest.num_consumers), 0 for none; every epoch of the iterator
  // then holds a multiple of it batches (equal shares).
  Job(std::string name, std::string dataset, std::string options_key, bool shared,
      int64_t start_epoch, int num_consumers, std::unique_ptr<Pipeline> pipeline,
      std::unique_ptr<Iterator> iterator, int64_t memory_budget,
      std::function<void(const Job* job, const StatsSnapshot& last)> on_destroyed);
  // Stops the pipeline and waits for its threads; may take tens of milliseconds, so it is not
  // run on a gRPC thread (see JobRegistry).
  ~Job();
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  // In lockstep, c consumes under consumer_index (REQUIRES: in [0, num_consumers)): it gets the
  // batches held for that index first, in order, then each (e, i) with i mod N == index as the
  // pipeline makes it. A consumer already streaming under the index is taken over: its next
  // event (now, when it is waiting) is ABORTED saying so. Without lockstep the index is unused.
  void Attach(JobConsumer* c, int consumer_index = 0);
  // After Detach returns, c gets no more OnEvent calls (one being delivered is waited for, so
  // never call it from inside OnEvent). Idempotent. Returns the consumers left. In lockstep the
  // index's batches stay held for a consumer that attaches under it again (the one c was
  // writing when its stream went, if any, is c's), and the index counts as away from now.
  int Detach(JobConsumer* c);
  // REQUIRES: c attached, with no Want outstanding.
  void Want(JobConsumer* c);
  // Ends the stream for every consumer with `status` (the server is draining): consumers waiting
  // get it now, the others at their next Want. Batches not yet handed out are dropped (held ones
  // too, so an end already reached then becomes `status`).
  void Stop(Status status);

  // Lockstep: when an index has been away (never attached since the job started, or detached)
  // for `linger` before its consumer took the end of the stream, the time it will have been;
  // nullopt when none is away or the job failed. Any thread.
  std::optional<std::chrono::steady_clock::time_point> AbsenceDeadline(
      std::chrono::seconds linger) const;
  // Lockstep: when an index has been away for `linger` at `now` before its consumer took the
  // end (even once the pipeline has ended: its batches held for it would otherwise go unseen),
  // ends the job with ABORTED naming the job, the index and the last batch it took for every
  // consumer not yet given the end, and returns that status; the consumers waiting get it at the
  // next Stop() (which the caller makes outside its own locks). Nullopt when none is.
  std::optional<Status> AbortIfAbsent(std::chrono::steady_clock::time_point now,
                                      std::chrono::seconds linger);

  const std::string& name() const { return name_; }
  const std::string& dataset() const { return dataset_; }
  // Identifies the pipeline options a joining consumer must match.
  const std::string& options_key() const { return options_key_; }
  bool shared() const { return shared_; }
  int64_t start_epoch() const { return start_epoch_; }
  int num_consumers() const { return num_consumers_; }
  int64_t memory_budget() const { return memory_budget_; }
  const ResolvedOptions& options() const { return pipeline_->options(); }
  int consumers() const;
  // The pipeline's stats; once the job is being destroyed, those taken as it stopped. Any thread.
  StatsSnapshot Stats() const;

 private:
  // One consumer in lockstep: an index of [0, num_consumers).
  struct Slot {
    JobConsumer* consumer = nullptr;  // attached under the index, or null (away)
    bool waiting = false;             // consumer has a Want outstanding
    // Its batches the pipeline made while it was busy or away, in order. Bounded by the
    // pipeline's batch pool (every batch is a pool buffer), so a consumer away for long stalls
    // the pipeline, never grows memory. Allocated only while it holds some: a std::deque takes
    // ~600 bytes even empty, and of a job's up to 4096 slots only as many hold batches at once
    // as the pool has buffers.
    std::unique_ptr<std::deque<Batch>> held;
    std::optional<BatchPosition> last;  // of the last batch it took
    bool ever_attached = false;
    bool ended = false;  // its consumer took the end of the stream (final_ OK)
    // Away since (null while attached): AbsenceDeadline.
    std::optional<std::chrono::steady_clock::time_point> away_since;

    bool holds() const { return held != nullptr && !held->empty(); }
    void Hold(Batch b, bool front) {
      if (!held) held = std::make_unique<std::deque<Batch>>();
      if (front) {
        held->push_front(std::move(b));
      } else {
        held->push_back(std::move(b));
      }
    }
    // REQUIRES: holds().
    Batch TakeFirst() {
      Batch b = std::move(held->front());
      held->pop_front();
      if (held->empty()) held.reset();
      return b;
    }
  };
  // A consumer taken over (Attach under its index) until it detaches: its next event is `why`.
  struct Evicted {
    JobConsumer* consumer = nullptr;
    bool waiting = false;
    Status why;
  };
  // Who gets an event now, and the event: none (consumer null) when nobody waiting has one.
  struct Delivery {
    JobConsumer* consumer = nullptr;
    JobEvent event;
    int slot = -1;  // lockstep: the index it is for, to hold a batch not taken again
  };

  bool lockstep() const { return num_consumers_ > 0; }
  // Hands ready events to waiting consumers until one side runs out. Any thread; never blocks
  // (only this job's short critical sections).
  void Pump();
  void OnPipelineReady();
  // The next event for a waiting consumer, taken out of the job's state. REQUIRES: mu_ held.
  Delivery NextDelivery();
  Delivery NextLockstepDelivery();
  // The end or error for c. REQUIRES: mu_ held, final_ set.
  JobEvent FinalEvent();
  // Whether a consumer waits for a batch the pipeline has yet to make. REQUIRES: mu_ held.
  bool NeedsBatch() const;
  // A delivery the consumer did not take goes back where it came from. REQUIRES: mu_ held.
  void Untaken(Delivery& d);

  const std::string name_;
  const std::string dataset_;
  const std::string options_key_;
  const bool shared_;
  const int64_t start_epoch_;
  const int num_consumers_;
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
  // Without lockstep: consumers with a Want outstanding; guarded by mu_.
  std::deque<JobConsumer*> waiting_;
  // Lockstep: num_consumers_ slots, the index of each attached consumer, the taken-over ones;
  // guarded by mu_. Deliveries scan the slots: O(num_consumers) per batch, a few thousand at most.
  std::vector<Slot> slots_;
  std::unordered_map<JobConsumer*, int> index_of_;
  std::vector<Evicted> evicted_;
  JobConsumer* delivering_ = nullptr;     // guarded by mu_
  bool pumping_ = false;                  // one thread pumps at a time; guarded by mu_
  bool again_ = false;                    // the pipeline became ready while pumping; guarded by mu_
  // Without lockstep: from the pipeline, no consumer yet; guarded by mu_.
  std::optional<JobEvent> stash_;
  std::optional<Status> final_;           // OK = end of stream; guarded by mu_
  uint64_t unreported_skips_ = 0;  // the iterator's skips after its last batch; guarded by mu_
  bool closing_ = false;                  // guarded by mu_
  int in_callbacks_ = 0;                  // pipeline ready callbacks running; guarded by mu_
};

}  // namespace sluice
