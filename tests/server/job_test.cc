// Job in lockstep over a real Pipeline of a small data set, with consumers that stand in for the
// server's streams (JobConsumer is the job's own interface; the gRPC stream is one of its
// implementations): a batch a consumer does not take goes back to the front of its index's
// queue, the end comes after an index's held batches, and Stop drops held batches and ends every
// consumer with its status.
#include "server/job.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "pipeline/options.h"
#include "tests/pipeline/pipeline_test_data.h"

namespace sluice {
namespace {

using Position = std::pair<int64_t, int64_t>;  // epoch, index

// What a stream does with an event: takes it (a batch is kept until the next, as a write in
// flight), or refuses the next one as a stream that has just ended does.
class Consumer : public JobConsumer {
 public:
  bool OnEvent(JobEvent& event) override {
    std::lock_guard<std::mutex> lock(mu_);
    answered_ = true;
    cv_.notify_all();
    if (refuse_next_) {
      refuse_next_ = false;
      return false;
    }
    if (event.end || !event.error.ok()) {
      final_ = event.error;
      ended_ = true;
      return true;
    }
    positions_.emplace_back(event.batch.position().epoch, event.batch.position().index);
    return true;
  }

  // Asks for one event and waits until it has been answered (the pipeline makes it meanwhile);
  // false when it was not within 30 s, a hang.
  bool WantOne(Job& job, bool refuse = false) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      answered_ = false;
      refuse_next_ = refuse;
    }
    job.Want(this);
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(30), [this] { return answered_; });
  }
  // Wants events until the end or an error.
  void ReadToEnd(Job& job) {
    while (!ended()) REQUIRE(WantOne(job));
  }

  std::vector<Position> positions() {
    std::lock_guard<std::mutex> lock(mu_);
    return positions_;
  }
  bool ended() {
    std::lock_guard<std::mutex> lock(mu_);
    return ended_;
  }
  Status final_status() {
    std::lock_guard<std::mutex> lock(mu_);
    return final_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool answered_ = false;            // guarded by mu_
  bool refuse_next_ = false;         // guarded by mu_
  bool ended_ = false;               // guarded by mu_
  Status final_;                     // guarded by mu_
  std::vector<Position> positions_;  // guarded by mu_
};

// A job of 2 consumers in lockstep over 2 files of 8 records, batches of 4: 4 batches per
// epoch, 2 for each consumer, one epoch.
struct Fixture {
  Fixture() {
    testing::WriteTestShards(dir, 2, 8);
    v1::PipelineOptions o = testing::BaseOptions(dir);
    o.set_batch_size(4);
    o.set_memory_budget_bytes(64 << 20);
    Result<ResolvedOptions> resolved = ResolveOptions(o, /*job_consumers=*/2);
    INFO(resolved.status().ToString());
    REQUIRE(resolved.ok());
    std::unique_ptr<Pipeline> pipeline = Pipeline::FromResolved(std::move(*resolved));
    Result<std::unique_ptr<Iterator>> it = pipeline->MakeIterator();
    REQUIRE(it.ok());
    job = std::make_unique<Job>("j", "train", "", /*shared=*/true, /*start_epoch=*/0,
                                /*num_consumers=*/2, std::move(pipeline), std::move(*it),
                                /*memory_budget=*/0, nullptr);
    job->Attach(&a, 0);
    job->Attach(&b, 1);
  }
  ~Fixture() {
    job->Detach(&a);
    job->Detach(&b);
  }

  testing::TempDir dir;
  Consumer a, b;
  std::unique_ptr<Job> job;
};

TEST_CASE("ABatchNotTakenGoesBackToTheFrontOfItsIndexsQueue") {
  Fixture f;
  REQUIRE(f.a.WantOne(*f.job, /*refuse=*/true));  // (0, 0) offered, not taken
  f.b.ReadToEnd(*f.job);
  f.a.ReadToEnd(*f.job);
  CHECK(f.a.positions() == std::vector<Position>{{0, 0}, {0, 2}});
  CHECK(f.b.positions() == std::vector<Position>{{0, 1}, {0, 3}});
  CHECK(f.a.final_status().ok());
  CHECK(f.b.final_status().ok());
}

TEST_CASE("TheEndComesToAnIndexAfterItsHeldBatches") {
  Fixture f;
  // b reads to its end while a asks for nothing: a's batches are held for it (2, within the
  // pool), and the pipeline has ended by then.
  f.b.ReadToEnd(*f.job);
  CHECK(f.b.positions() == std::vector<Position>{{0, 1}, {0, 3}});
  REQUIRE(f.a.WantOne(*f.job));
  CHECK_FALSE(f.a.ended());
  f.a.ReadToEnd(*f.job);
  CHECK(f.a.positions() == std::vector<Position>{{0, 0}, {0, 2}});
  CHECK(f.a.final_status().ok());
}

TEST_CASE("StopDropsHeldBatchesAndEndsEveryConsumerWithItsStatus") {
  Fixture f;
  f.b.ReadToEnd(*f.job);  // a's two batches are held, the pipeline has ended
  f.job->Stop(Aborted("draining"));
  f.a.ReadToEnd(*f.job);
  CHECK(f.a.positions().empty());
  CHECK(f.a.final_status().code() == StatusCode::kAborted);
  CHECK(f.a.final_status().message() == "draining");
  CHECK(f.b.final_status().ok());  // given the end before the stop
}

}  // namespace
}  // namespace sluice
