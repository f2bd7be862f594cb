#include "server/job.h"

#include <algorithm>
#include <utility>

namespace sluice {

// Lockstep and memory. Batches are handed out in the order the pipeline makes them, (e, i) to
// index i mod N; one for an index whose consumer is busy (a write in flight) or away waits in
// that index's held queue while the pump goes on with the next batch for the others. Every held
// batch is a buffer of the pipeline's bounded batch pool, so holding adds no memory: when the
// pool is out, the pipeline waits.
//
// Why that cannot deadlock while every consumer is present: the pipeline stalls only with every
// pool buffer out, i.e. in a write in flight or held for a busy consumer. Writes complete as
// clients read. A client stops reading only when its own read-ahead is full, i.e. when it is
// ahead of the consumer the pipeline's next batch is for; but a consumer that is waiting is
// handed its held batches first, and the pipeline made batches in round-robin order, so every
// consumer's next batch was made before any consumer got a batch of a later round. The
// consumer the next batch is for therefore has nothing held and is at most one round behind;
// the others' clients, at most one round ahead, still read, their writes complete, and they take
// their held batches, which returns the buffers. An absent consumer does stall the job: that is
// what AbortIfAbsent ends, after job_linger_seconds.

Job::Job(std::string name, std::string dataset, std::string options_key, bool shared,
         int64_t start_epoch, int num_consumers, std::unique_ptr<Pipeline> pipeline,
         std::unique_ptr<Iterator> iterator, int64_t memory_budget,
         std::function<void(const Job* job, const StatsSnapshot& last)> on_destroyed)
    : name_(std::move(name)),
      dataset_(std::move(dataset)),
      options_key_(std::move(options_key)),
      shared_(shared),
      start_epoch_(start_epoch),
      num_consumers_(num_consumers),
      memory_budget_(memory_budget),
      on_destroyed_(std::move(on_destroyed)),
      pipeline_(std::move(pipeline)),
      iterator_(std::move(iterator)),
      slots_(static_cast<size_t>(std::max(0, num_consumers))) {
  // Every index is away until a consumer attaches under it.
  const auto now = std::chrono::steady_clock::now();
  for (Slot& s : slots_) s.away_since = now;
  iterator_->SetReadyCallback([this] { OnPipelineReady(); });
}

Job::~Job() {
  {
    // A ready callback may be running on a pipeline thread; new ones return at once.
    std::unique_lock<std::mutex> lock(mu_);
    closing_ = true;
    cv_.wait(lock, [this] { return in_callbacks_ == 0 && !pumping_; });
  }
  stash_.reset();
  slots_.clear();  // held batches go back to the pool before it goes
  std::unique_ptr<Iterator> iterator;
  {
    // Stats() may be called up to on_destroyed_ (the registry counts running jobs' skips until
    // it hands them to the dataset's counters), so it must not see the iterator go.
    std::lock_guard<std::mutex> lock(stats_mu_);
    last_stats_ = iterator_->Stats();
    iterator = std::move(iterator_);
  }
  iterator.reset();  // joins the pipeline's threads; no callback can start after this
  if (on_destroyed_) on_destroyed_(this, last_stats_);
}

StatsSnapshot Job::Stats() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return iterator_ ? iterator_->Stats() : last_stats_;
}

void Job::OnPipelineReady() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closing_) return;
    ++in_callbacks_;
  }
  Pump();
  {
    std::lock_guard<std::mutex> lock(mu_);
    --in_callbacks_;
  }
  cv_.notify_all();
}

void Job::Attach(JobConsumer* c, int consumer_index) {
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    attached_.push_back(c);
    if (!lockstep()) return;
    Slot& s = slots_[static_cast<size_t>(consumer_index)];
    if (s.consumer != nullptr) {
      evicted_.push_back(
          Evicted{s.consumer, s.waiting,
                  Aborted("job '" + name_ + "': another stream took over consumer_index " +
                          std::to_string(consumer_index) + " of its " +
                          std::to_string(num_consumers_) + " consumers; this one ends")});
      index_of_.erase(s.consumer);
      wake = s.waiting;
    }
    s.consumer = c;
    s.waiting = false;
    s.away_since.reset();
    s.ever_attached = true;
    index_of_[c] = consumer_index;
  }
  if (wake) Pump();
}

int Job::Detach(JobConsumer* c) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return delivering_ != c; });
  auto it = std::find(waiting_.begin(), waiting_.end(), c);
  if (it != waiting_.end()) waiting_.erase(it);
  std::erase(attached_, c);
  std::erase_if(evicted_, [c](const Evicted& e) { return e.consumer == c; });
  if (auto at = index_of_.find(c); at != index_of_.end()) {
    Slot& s = slots_[static_cast<size_t>(at->second)];
    s.consumer = nullptr;
    s.waiting = false;
    s.away_since = std::chrono::steady_clock::now();
    index_of_.erase(at);
  }
  return static_cast<int>(attached_.size());
}

void Job::Want(JobConsumer* c) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!lockstep()) {
      waiting_.push_back(c);
    } else if (auto at = index_of_.find(c); at != index_of_.end()) {
      slots_[static_cast<size_t>(at->second)].waiting = true;
    } else {
      for (Evicted& e : evicted_) {
        if (e.consumer == c) e.waiting = true;
      }
    }
  }
  Pump();
}

void Job::Stop(Status status) {
  std::vector<std::unique_ptr<std::deque<Batch>>> dropped;  // destroyed after the lock
  {
    std::lock_guard<std::mutex> lock(mu_);
    bool held = stash_.has_value();
    for (Slot& s : slots_) {
      held = held || s.holds();
      if (s.held) dropped.push_back(std::move(s.held));
    }
    // An end some consumers have not reached yet, their batches dropped, is no end for them.
    if (!final_ || (final_->ok() && held)) final_ = std::move(status);
    stash_.reset();
  }
  Pump();
}

std::optional<std::chrono::steady_clock::time_point> Job::AbsenceDeadline(
    std::chrono::seconds linger) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!lockstep() || (final_ && !final_->ok())) return std::nullopt;
  std::optional<std::chrono::steady_clock::time_point> first;
  for (const Slot& s : slots_) {
    if (s.away_since && !s.ended && (!first || *s.away_since < *first)) first = s.away_since;
  }
  if (!first) return std::nullopt;
  return *first + linger;
}

std::optional<Status> Job::AbortIfAbsent(std::chrono::steady_clock::time_point now,
                                         std::chrono::seconds linger) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!lockstep() || (final_ && !final_->ok())) return std::nullopt;
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Slot& s = slots_[i];
    if (!s.away_since || s.ended || *s.away_since + linger > now) continue;
    std::string where;
    if (!s.ever_attached) {
      where = "it never attached";
    } else if (!s.last) {
      where = "it left before taking a batch";
    } else {
      where = "it left after batch (epoch " + std::to_string(s.last->epoch) + ", index " +
              std::to_string(s.last->index) + ")";
    }
    final_ = Aborted("job '" + name_ + "' of dataset '" + dataset_ + "' (its run from epoch " +
                     std::to_string(start_epoch_) + "): consumer_index " + std::to_string(i) +
                     " of its " + std::to_string(num_consumers_) + " consumers was away for " +
                     std::to_string(linger.count()) + " s (job_linger_seconds; " + where +
                     "), so the job ends for all its consumers");
    // Nothing held is handed out after an error; Stop(), which the caller makes outside its
    // locks, drops the held batches there.
    return *final_;
  }
  return std::nullopt;
}

int Job::consumers() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(attached_.size());
}

JobEvent Job::FinalEvent() {
  JobEvent e;
  e.end = final_->ok();
  e.error = *final_;
  e.skipped = std::exchange(unreported_skips_, 0);
  return e;
}

Job::Delivery Job::NextDelivery() {
  if (lockstep()) return NextLockstepDelivery();
  Delivery d;
  if (waiting_.empty()) return d;
  if (final_) {
    d.event = FinalEvent();
  } else if (stash_) {
    d.event = std::move(*stash_);
    stash_.reset();
  } else {
    return d;
  }
  d.consumer = waiting_.front();
  waiting_.pop_front();
  return d;
}

Job::Delivery Job::NextLockstepDelivery() {
  Delivery d;
  for (Evicted& e : evicted_) {
    if (!e.waiting) continue;
    e.waiting = false;
    d.consumer = e.consumer;
    d.event.error = e.why;
    return d;
  }
  // After an error nothing held is handed out; after the end, what is held comes first.
  const bool failed = final_ && !final_->ok();
  for (size_t i = 0; i < slots_.size(); ++i) {
    Slot& s = slots_[i];
    if (s.consumer == nullptr || !s.waiting) continue;
    if (s.holds() && !failed) {
      d.event.batch = s.TakeFirst();
    } else if (final_) {
      d.event = FinalEvent();
    } else {
      continue;
    }
    s.waiting = false;
    d.consumer = s.consumer;
    d.slot = static_cast<int>(i);
    return d;
  }
  return d;
}

bool Job::NeedsBatch() const {
  if (final_) return false;
  if (!lockstep()) return !waiting_.empty() && !stash_;
  return std::any_of(slots_.begin(), slots_.end(), [](const Slot& s) {
    return s.consumer != nullptr && s.waiting && !s.holds();
  });
}

void Job::Untaken(Delivery& d) {
  if (d.event.end || !d.event.error.ok()) {
    unreported_skips_ += d.event.skipped;  // told with the next consumer's end, if any
    return;
  }
  if (final_ && !final_->ok()) return;  // stopped meanwhile: dropped with the rest
  if (d.slot >= 0) {
    slots_[static_cast<size_t>(d.slot)].Hold(std::move(d.event.batch), /*front=*/true);
  } else {
    stash_ = std::move(d.event);  // empty: only the pumping thread fills it, from here
  }
}

void Job::Pump() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (pumping_) {
      again_ = true;
      return;
    }
    pumping_ = true;
  }
  for (;;) {
    // Declared before the lock, so a batch it still holds goes back to the pool outside it.
    Delivery d;
    {
      std::lock_guard<std::mutex> lock(mu_);
      again_ = false;
      if (!closing_) d = NextDelivery();
      if (d.consumer == nullptr && (closing_ || !NeedsBatch())) {
        // Stop pumping in the same critical section that saw nobody to serve, so a Want that
        // arrives after it finds pumping_ false and pumps itself.
        pumping_ = false;
        cv_.notify_all();
        return;
      }
      if (d.consumer != nullptr) delivering_ = d.consumer;
    }
    if (d.consumer != nullptr) {
      const bool end = d.event.end;
      const bool batch = !end && d.event.error.ok();
      const BatchPosition position = batch ? d.event.batch.position() : BatchPosition{};
      const bool taken = d.consumer->OnEvent(d.event);
      {
        std::lock_guard<std::mutex> lock(mu_);
        delivering_ = nullptr;
        if (!taken) {
          Untaken(d);
        } else if (batch && d.slot >= 0) {
          slots_[static_cast<size_t>(d.slot)].last = position;
        } else if (end && d.slot >= 0) {
          slots_[static_cast<size_t>(d.slot)].ended = true;
        }
      }
      cv_.notify_all();
      continue;
    }
    JobEvent e;
    bool ready = false;
    Status s = iterator_->TryGetNext(&e.batch, &e.end, &ready);
    if (s.ok() && !ready) {
      std::lock_guard<std::mutex> lock(mu_);
      if (again_) continue;
      pumping_ = false;
      cv_.notify_all();
      return;
    }
    const uint64_t skipped_after = (!s.ok() || e.end) ? iterator_->SkippedAfterLastBatch() : 0;
    std::lock_guard<std::mutex> lock(mu_);
    if (!s.ok() || e.end) {
      if (!final_) final_ = s;  // a Stop() meanwhile keeps its status
      unreported_skips_ += skipped_after;
    } else if (final_) {
      continue;  // stopped meanwhile: dropped (e goes after the lock)
    } else if (lockstep()) {
      const auto index = static_cast<size_t>(e.batch.position().index % num_consumers_);
      slots_[index].Hold(std::move(e.batch), /*front=*/false);
    } else {
      stash_ = std::move(e);
    }
  }
}

}  // namespace sluice
