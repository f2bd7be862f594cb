#include "server/job.h"

#include <algorithm>
#include <utility>

namespace sluice {

Job::Job(std::string name, std::string dataset, std::string options_key, bool shared,
         std::unique_ptr<Pipeline> pipeline, std::unique_ptr<Iterator> iterator,
         int64_t memory_budget,
         std::function<void(const Job* job, const StatsSnapshot& last)> on_destroyed)
    : name_(std::move(name)),
      dataset_(std::move(dataset)),
      options_key_(std::move(options_key)),
      shared_(shared),
      memory_budget_(memory_budget),
      on_destroyed_(std::move(on_destroyed)),
      pipeline_(std::move(pipeline)),
      iterator_(std::move(iterator)) {
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

void Job::Attach(JobConsumer* c) {
  std::lock_guard<std::mutex> lock(mu_);
  attached_.push_back(c);
}

int Job::Detach(JobConsumer* c) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return delivering_ != c; });
  auto it = std::find(waiting_.begin(), waiting_.end(), c);
  if (it != waiting_.end()) waiting_.erase(it);
  std::erase(attached_, c);
  return static_cast<int>(attached_.size());
}

void Job::Want(JobConsumer* c) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    waiting_.push_back(c);
  }
  Pump();
}

void Job::Stop(Status status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!final_) final_ = std::move(status);
    stash_.reset();
  }
  Pump();
}

int Job::consumers() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(attached_.size());
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
    std::optional<JobEvent> event;
    {
      std::lock_guard<std::mutex> lock(mu_);
      again_ = false;
      if (waiting_.empty() || closing_) {
        // Stop pumping in the same critical section that saw nobody waiting, so a Want that
        // arrives after it finds pumping_ false and pumps itself.
        pumping_ = false;
        cv_.notify_all();
        return;
      }
      if (final_) {
        event.emplace();
        event->end = final_->ok();
        event->error = *final_;
        event->skipped = std::exchange(unreported_skips_, 0);
      } else if (stash_) {
        event = std::move(stash_);
        stash_.reset();
      }
    }
    if (!event) {
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
      if (!s.ok() || e.end) {
        e.error = s;
        std::lock_guard<std::mutex> lock(mu_);
        if (!final_) final_ = s;  // a Stop() meanwhile keeps its status
        e.skipped = std::exchange(unreported_skips_, 0) + iterator_->SkippedAfterLastBatch();
      }
      event = std::move(e);
    }
    JobConsumer* c = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (waiting_.empty()) {  // the consumer detached meanwhile: keep it for the next one
        if (!event->end && event->error.ok()) {
          stash_ = std::move(event);
        } else {
          unreported_skips_ += event->skipped;  // final_ makes the next consumer's event
        }
        continue;
      }
      c = waiting_.front();
      waiting_.pop_front();
      delivering_ = c;
    }
    const uint64_t skipped = event->skipped;
    const bool taken = c->OnEvent(std::move(*event));
    {
      std::lock_guard<std::mutex> lock(mu_);
      delivering_ = nullptr;
      if (!taken) unreported_skips_ += skipped;  // told with the next consumer's end, if any
    }
    cv_.notify_all();
  }
}

}  // namespace sluice
