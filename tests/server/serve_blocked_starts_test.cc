// Stream starts and DescribeStream calls that wait on their files, against a real `sluice serve`:
// they hold no gRPC thread, so other calls (ListDatasets, GetStats, another stream's batches) go
// on; one data set's blocked starts leave a start thread to the other data sets; a start
// cancelled by its client gives back its place at once and everything else once its open
// returns; the bound on starts in flight refuses with RESOURCE_EXHAUSTED, and DescribeStream calls
// have a bound of their own; a bad DescribeStream is answered at once; SIGTERM ends a start in
// flight at once and the server exits 0 even when the start never returns, and stops cleanly when
// it returns during the drain.
//
// The wait is made deterministic with a FIFO: once the server has started, a peer shard's file
// of "train" is replaced by one. Equal shares count every peer file's records, and opening a FIFO
// for reading blocks until a writer opens it, which the test does to release the starts (the
// count of a FIFO is then 0 records: its size).
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "client/wire/shared_segment.h"
#include "tests/server/serve_fixture.h"

namespace sluice {
namespace {

using testing::ServerProcess;
using testing::TempDir;
using testing::WriteTestShards;

constexpr auto kCallDeadline = std::chrono::seconds(20);

// The server's memory_budget_bytes unless a test says otherwise.
constexpr int64_t kServerBudget = 1073741824;

// Datasets "train" (4 files of 40 records) and "other" (2 files), batches of 8.
struct BlockedFixture {
  // server_budget: the server's memory_budget_bytes (a job of either data set reserves 24 MiB).
  explicit BlockedFixture(int max_streams, int64_t server_budget = kServerBudget) {
    WriteTestShards(train, 4, 40);
    WriteTestShards(other, 2, 40);
    config = dir.file("sluice.textproto");
    auto dataset = [](const std::string& name, const TempDir& d) {
      return "datasets {\n  name: \"" + name + "\"\n  pipeline {\n    files: \"" +
             d.file("shard-*.tfrecord") +
             "\"\n    batch_size: 8\n    image_height: 32\n    image_width: 40\n"
             "    threads: 1\n    seed: 7\n    epochs: 1\n    memory_budget_bytes: 25165824\n"
             "  }\n}\n";
    };
    testing::WriteAll(config,
                      "listen: \"127.0.0.1:0\"\nmetrics_address: \"127.0.0.1:0\"\nmax_streams: " +
                          std::to_string(max_streams) + "\nmemory_budget_bytes: " +
                          std::to_string(server_budget) + "\n" +
                          dataset("train", train) + dataset("other", other));
  }

  // Replaces train's shard-3 (a peer file of shard 0 of 2) by a FIFO: counting it blocks.
  void BlockTrain() {
    const std::string path = train.file("shard-3.tfrecord");
    REQUIRE(::unlink(path.c_str()) == 0);
    REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
  }
  // Opens the FIFO as a writer, which lets every open for reading through, then and later.
  void Release() {
    writer = ::open(train.file("shard-3.tfrecord").c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC);
    REQUIRE(writer >= 0);
  }
  ~BlockedFixture() {
    if (writer >= 0) ::close(writer);
  }

  // drain_seconds > 0: the server's --drain-seconds.
  std::vector<std::string> Args(int drain_seconds = 0) const {
    std::vector<std::string> args = {"--config", config};
    if (drain_seconds > 0) {
      args.push_back("--drain-seconds");
      args.push_back(std::to_string(drain_seconds));
    }
    return args;
  }

  TempDir dir, train, other;
  std::string config;
  int writer = -1;
};

// Shard 0 of 2 of train: equal shares (DROP) count shard 1's files, the FIFO among them.
v1::StreamRequest BlockedRequest() {
  v1::StreamRequest r = serve_testing::Request("train");
  r.mutable_shard()->set_index(0);
  r.mutable_shard()->set_count(2);
  return r;
}

std::unique_ptr<v1::DataService::Stub> Stub(const std::string& address) {
  return v1::DataService::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
}

// A BlockedFixture's server, running, and a stub on it; tests bind its parts by name
// (`auto& [f, server, stub] = started;`).
struct BlockedServer {
  explicit BlockedServer(int max_streams, int64_t server_budget = kServerBudget,
                         int drain_seconds = 0)
      : f(max_streams, server_budget), server(f.Args(drain_seconds)) {
    INFO(server.output());
    REQUIRE(server.running());
    stub = Stub(server.address());
  }
  BlockedFixture f;
  ServerProcess server;
  std::unique_ptr<v1::DataService::Stub> stub;
};

// A StreamBatches call read to its end on a thread of its own.
class RawStream {
 public:
  // deadline: none unless given.
  RawStream(v1::DataService::Stub* stub, v1::StreamRequest request, bool deadline = false) {
    if (deadline) context_.set_deadline(std::chrono::system_clock::now() + kCallDeadline);
    thread_ = std::thread([this, stub, request = std::move(request)] {
      auto reader = stub->StreamBatches(&context_, request);
      v1::Batch b;
      while (reader->Read(&b)) {
        std::lock_guard<std::mutex> lock(mu_);
        ++batches_;
        cv_.notify_all();
      }
      status_ = reader->Finish();
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
      cv_.notify_all();
    });
  }
  ~RawStream() {
    context_.TryCancel();
    Join();
  }
  void Cancel() { context_.TryCancel(); }
  void Join() {
    if (thread_.joinable()) thread_.join();
  }
  // Whether n batches came within kCallDeadline.
  bool WaitForBatches(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, kCallDeadline, [&] { return batches_ >= n || done_; });
    return batches_ >= n;
  }
  // After Join.
  const grpc::Status& status() const { return status_; }
  int batches() const {
    std::lock_guard<std::mutex> lock(mu_);
    return batches_;
  }

 private:
  grpc::ClientContext context_;
  std::thread thread_;
  grpc::Status status_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int batches_ = 0;    // guarded by mu_
  bool done_ = false;  // guarded by mu_
};

// A DescribeStream call on a thread of its own.
class RawDescribe {
 public:
  // deadline: none unless given.
  RawDescribe(v1::DataService::Stub* stub, v1::StreamRequest request, bool deadline = false) {
    if (deadline) context_.set_deadline(std::chrono::system_clock::now() + kCallDeadline);
    thread_ = std::thread([this, stub, request = std::move(request)] {
      status_ = stub->DescribeStream(&context_, request, &plan_);
    });
  }
  ~RawDescribe() {
    context_.TryCancel();
    Join();
  }
  void Join() {
    if (thread_.joinable()) thread_.join();
  }
  const grpc::Status& status() const { return status_; }
  const v1::StreamPlan& plan() const { return plan_; }

 private:
  grpc::ClientContext context_;
  std::thread thread_;
  grpc::Status status_;
  v1::StreamPlan plan_;
};

grpc::Status GetStats(v1::DataService::Stub* stub, v1::Stats* stats) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kCallDeadline);
  return stub->GetStats(&context, v1::GetStatsRequest(), stats);
}

// GetStats until `done` holds of them; fails when a call fails or times out. A poll: what it
// waits for happens in another process (a call reaching the server's start threads, an open
// returning there) and nothing there notifies this one; the interval only paces the calls.
template <typename Done>
v1::Stats StatsWhen(v1::DataService::Stub* stub, Done done) {
  const auto deadline = std::chrono::steady_clock::now() + kCallDeadline;
  for (;;) {
    v1::Stats stats;
    const grpc::Status s = GetStats(stub, &stats);
    INFO(s.error_message());
    REQUIRE(s.ok());
    if (done(stats)) return stats;
    REQUIRE(std::chrono::steady_clock::now() < deadline);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// Streams of "train" that run (a stream whose job is being opened is counted in the server's
// active_streams only).
int TrainStreams(const v1::Stats& stats) {
  for (const v1::DatasetStats& d : stats.datasets()) {
    if (d.name() == "train") return d.active_streams();
  }
  return -1;
}

// n streams of "train" started while its file is blocked, returned once all of them are at the
// server and at least `opening` have their job being opened (the others queued behind them).
std::vector<std::unique_ptr<RawStream>> StartBlocked(v1::DataService::Stub* stub, int n,
                                                     int opening) {
  std::vector<std::unique_ptr<RawStream>> starts;
  for (int i = 0; i < n; ++i) {
    starts.push_back(std::make_unique<RawStream>(stub, BlockedRequest()));
  }
  StatsWhen(stub, [n, opening](const v1::Stats& s) {
    return s.starts_in_flight() == n && s.active_streams() >= opening;
  });
  return starts;
}

TEST_CASE("StartsAndDescribesBlockedOnTheirFilesStopNoOtherCall") {
  // More starts than any gRPC build has callback threads (at most 16 on the largest machine).
  constexpr int kStarts = 24;
  constexpr int kDescribes = 4;
  BlockedServer started(/*max_streams=*/64);
  auto& [f, server, stub] = started;
  INFO(server.output());

  // A stream of "other" that runs throughout: its writes are reactions too.
  v1::StreamRequest forever = serve_testing::Request("other");
  forever.set_epochs(0);
  RawStream running(stub.get(), forever);
  REQUIRE(running.WaitForBatches(1));

  f.BlockTrain();
  std::vector<std::unique_ptr<RawStream>> starts;
  std::vector<std::unique_ptr<RawDescribe>> describes;
  for (int i = 0; i < kStarts; ++i) {
    starts.push_back(std::make_unique<RawStream>(stub.get(), BlockedRequest()));
  }
  for (int i = 0; i < kDescribes; ++i) {
    describes.push_back(std::make_unique<RawDescribe>(stub.get(), BlockedRequest()));
  }
  // Every one is at the server, waiting for its job or its plan; a start whose job is being
  // opened counts as a stream from then on.
  StatsWhen(stub.get(), [](const v1::Stats& s) {
    return s.starts_in_flight() == kStarts + kDescribes && s.active_streams() >= 2;
  });

  grpc::ClientContext list_context;
  list_context.set_deadline(std::chrono::system_clock::now() + kCallDeadline);
  v1::ListDatasetsResponse list;
  const grpc::Status listed = stub->ListDatasets(&list_context, {}, &list);
  INFO(listed.error_message());
  REQUIRE(listed.ok());
  CHECK(list.datasets_size() == 2);
  v1::Stats stats;
  REQUIRE(GetStats(stub.get(), &stats).ok());
  CHECK(stats.active_streams() >= 2);
  CHECK(TrainStreams(stats) == 0);
  CHECK(stats.starts_in_flight() == kStarts + kDescribes);
  CHECK(serve_testing::FetchMetrics(server).find("\nsluice_stream_starts_in_flight " +
                                                 std::to_string(kStarts + kDescribes) + "\n") !=
        std::string::npos);
  // The running stream still gets its batches.
  CHECK(running.WaitForBatches(running.batches() + 10));

  f.Release();
  // The FIFO counts as empty: shard 1 holds file 1's 40 records, so DROP gives 5 batches.
  for (const auto& d : describes) {
    d->Join();
    INFO(d->status().error_message());
    REQUIRE(d->status().ok());
    CHECK(d->plan().batches_per_epoch() == 5);
  }
  for (const auto& s : starts) {
    s->Join();
    INFO(s->status().error_message());
    CHECK(s->status().ok());
    CHECK(s->batches() == 5);
  }
  running.Cancel();
  running.Join();
  StatsWhen(stub.get(), [](const v1::Stats& s) {
    return s.active_streams() == 0 && s.starts_in_flight() == 0;
  });
}

TEST_CASE("OneDatasetsBlockedStartsLeaveAStartThreadToTheOtherDatasets") {
  // More blocked starts of "train" than the server has start threads, and plans behind them.
  constexpr int kStarts = 8;
  constexpr int kDescribes = 2;
  BlockedServer started(/*max_streams=*/64);
  auto& [f, server, stub] = started;
  INFO(server.output());
  f.BlockTrain();
  // Three opens of train block (DataService::kStartThreads - 1), the rest wait for them.
  const auto starts = StartBlocked(stub.get(), kStarts, /*opening=*/3);
  std::vector<std::unique_ptr<RawDescribe>> describes;
  for (int i = 0; i < kDescribes; ++i) {
    describes.push_back(std::make_unique<RawDescribe>(stub.get(), BlockedRequest()));
  }
  StatsWhen(stub.get(),
            [](const v1::Stats& s) { return s.starts_in_flight() == kStarts + kDescribes; });
  // A start and a plan of "other" take the thread train leaves; they would otherwise wait until
  // their deadline behind train's.
  RawStream other(stub.get(), serve_testing::Request("other"), /*deadline=*/true);
  RawDescribe plan(stub.get(), serve_testing::Request("other"), /*deadline=*/true);
  other.Join();
  plan.Join();
  INFO(other.status().error_message() << " / " << plan.status().error_message());
  CHECK(other.status().ok());
  CHECK(other.batches() == 10);
  REQUIRE(plan.status().ok());
  CHECK(plan.plan().batches_per_epoch() == 10);
  f.Release();
  for (const auto& d : describes) {
    d->Join();
    INFO(d->status().error_message());
    CHECK(d->status().ok());
  }
  for (const auto& s : starts) {
    s->Join();
    INFO(s->status().error_message());
    CHECK(s->status().ok());
    CHECK(s->batches() == 5);
  }
}

TEST_CASE("ConsumersOfARunStartingTogetherJoinOneStartWithinABudgetForOneJob") {
  // Room for one job: a second start of the run would be refused RESOURCE_EXHAUSTED, and the
  // job in lockstep would then wait for the refused consumer until it ended for all.
  constexpr int kConsumers = 3;  // DataService::kStartThreads - 1: all of them start at once
  BlockedServer started(/*max_streams=*/64, /*server_budget=*/40000000);
  auto& [f, server, stub] = started;
  INFO(server.output());
  f.BlockTrain();
  std::vector<std::unique_ptr<RawStream>> consumers;
  for (int i = 0; i < kConsumers; ++i) {
    v1::StreamRequest r = BlockedRequest();
    r.set_job_name("together");
    r.set_consumer_index(i);
    r.set_num_consumers(kConsumers);
    consumers.push_back(std::make_unique<RawStream>(stub.get(), std::move(r)));
  }
  // Every consumer's open is in the registry before the first start can finish.
  StatsWhen(stub.get(), [](const v1::Stats& s) { return s.active_streams() == kConsumers; });
  f.Release();
  std::vector<int> batches;
  for (const auto& c : consumers) {
    c->Join();
    INFO(c->status().error_message());
    CHECK(c->status().ok());
    batches.push_back(c->batches());
  }
  CHECK(batches[0] > 0);
  CHECK(batches == std::vector<int>(kConsumers, batches[0]));
  // One run, one budget, lingering.
  v1::Stats stats;
  REQUIRE(GetStats(stub.get(), &stats).ok());
  REQUIRE(stats.jobs_size() == 1);
  CHECK(stats.memory_reserved_bytes() == stats.jobs(0).memory_budget_bytes());
}

TEST_CASE("BadDescribesAreAnsweredAtOnceWhileTheStartThreadsWait") {
  constexpr int kStarts = 6;
  BlockedServer started(/*max_streams=*/64);
  auto& [f, server, stub] = started;
  INFO(server.output());
  f.BlockTrain();
  const auto starts = StartBlocked(stub.get(), kStarts, /*opening=*/3);
  struct Case {
    const char* name;
    v1::StreamRequest request;
    grpc::StatusCode code;
    const char* message;
  };
  std::vector<Case> cases;
  cases.push_back(
      {"unknown dataset", serve_testing::Request("nope"), grpc::StatusCode::NOT_FOUND, "nope"});
  v1::StreamRequest bad_shard = BlockedRequest();
  bad_shard.mutable_shard()->set_index(2);
  cases.push_back(
      {"shard.index out of range", bad_shard, grpc::StatusCode::INVALID_ARGUMENT, "shard.index"});
  v1::StreamRequest bad_position = BlockedRequest();
  bad_position.mutable_start_position()->set_epoch(-1);
  cases.push_back(
      {"negative start position", bad_position, grpc::StatusCode::INVALID_ARGUMENT, "negative"});
  for (const Case& c : cases) {
    INFO(c.name);
    // Train's starts hold the threads train may use: a deferred check of a train request would
    // wait behind them until its deadline.
    RawDescribe describe(stub.get(), c.request, /*deadline=*/true);
    describe.Join();
    INFO(describe.status().error_message());
    CHECK(describe.status().error_code() == c.code);
    CHECK(describe.status().error_message().find(c.message) != std::string::npos);
  }
  v1::Stats stats;
  REQUIRE(GetStats(stub.get(), &stats).ok());
  CHECK(stats.starts_in_flight() == kStarts);
  f.Release();
  for (const auto& s : starts) {
    s->Join();
    CHECK(s->status().ok());
  }
}

TEST_CASE("StreamsCancelledWhileTheirJobsOpenGiveBackTheirPlaceAtOnceAndLeaveNothingBehind") {
  // More than the server's start threads, so some are still queued when cancelled; max_streams
  // as many, so a stream the cancels leaked would refuse the next round.
  constexpr int kStarts = 6;
  BlockedServer started(/*max_streams=*/kStarts);
  auto& [f, server, stub] = started;
  INFO(server.output());
  f.BlockTrain();
  v1::StreamRequest shared_memory = BlockedRequest();
  shared_memory.set_shared_memory(true);
  shared_memory.set_shared_memory_slots(2);
  std::vector<std::unique_ptr<RawStream>> starts;
  for (int i = 0; i < kStarts; ++i) {
    starts.push_back(std::make_unique<RawStream>(stub.get(), shared_memory));
  }
  // Some jobs are being opened, the others wait for a start thread.
  StatsWhen(stub.get(), [](const v1::Stats& s) {
    return s.starts_in_flight() == kStarts && s.active_streams() >= 1;
  });
  for (const auto& s : starts) s->Cancel();
  for (const auto& s : starts) {
    s->Join();
    CHECK(s->status().error_code() == grpc::StatusCode::CANCELLED);
    CHECK(s->batches() == 0);
  }
  // The queued starts gave back their place when their calls ended, not when a thread reaches
  // them; the opens that run still block (holding their threads and registry streams). A start
  // and a plan of "other" are neither refused nor kept waiting.
  StatsWhen(stub.get(), [](const v1::Stats& s) { return s.starts_in_flight() == 0; });
  {
    RawStream other(stub.get(), serve_testing::Request("other"), /*deadline=*/true);
    RawDescribe plan(stub.get(), serve_testing::Request("other"), /*deadline=*/true);
    other.Join();
    plan.Join();
    INFO(other.status().error_message() << " / " << plan.status().error_message());
    CHECK(other.status().ok());
    CHECK(other.batches() == 10);
    CHECK(plan.status().ok());
  }
  v1::Stats during;
  REQUIRE(GetStats(stub.get(), &during).ok());
  CHECK(during.starts_in_flight() == 0);
  // The opens still block; once they return, their jobs go straight back.
  f.Release();
  const v1::Stats after = StatsWhen(stub.get(), [](const v1::Stats& s) {
    return s.starts_in_flight() == 0 && s.active_streams() == 0 && s.memory_reserved_bytes() == 0 &&
           s.jobs_size() == 0;
  });
  CHECK(TrainStreams(after) == 0);
  CHECK(after.shared_memory_bytes() == 0);
  CHECK(after.shared_memory_streams() == 0);
  // Every stream slot is free: max_streams streams run to their end.
  std::vector<std::unique_ptr<RawStream>> again;
  for (int i = 0; i < kStarts; ++i) {
    again.push_back(std::make_unique<RawStream>(stub.get(), BlockedRequest()));
  }
  for (const auto& s : again) {
    s->Join();
    INFO(s->status().error_message());
    CHECK(s->status().ok());
    CHECK(s->batches() == 5);
  }
}

TEST_CASE("SharedMemoryStreamCancelledOnceItsJobOpenedGivesBackItsSegment") {
  // The cancels above all come while the job is being opened, before a segment exists. This one
  // comes once the job is open and the segment offered (named in the initial metadata, its bytes
  // reserved), before the client maps it. The instant between Open's return and the offer (the
  // stream's kStarting phase) has nothing a test can hold it at: no file is read there. A leaked
  // segment would still go back at the server's attach deadline (2 s, within StatsWhen's wait),
  // so what can fail here is the stream and its job: both must be gone, not just the bytes.
  BlockedServer started(/*max_streams=*/4);
  auto& [f, server, stub] = started;
  INFO(server.output());
  v1::StreamRequest request = serve_testing::Request("other");
  request.set_shared_memory(true);
  request.set_shared_memory_slots(2);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kCallDeadline);
  auto reader = stub->StreamBatches(&context, request);
  reader->WaitForInitialMetadata();
  const auto& metadata = context.GetServerInitialMetadata();
  REQUIRE(metadata.find(kSharedSegmentKey) != metadata.end());
  // Reserved before the name was sent, and until the server's attach deadline (seconds away).
  v1::Stats offered;
  REQUIRE(GetStats(stub.get(), &offered).ok());
  CHECK(offered.shared_memory_bytes() > 0);
  CHECK(offered.active_streams() == 1);
  context.TryCancel();
  v1::Batch b;
  CHECK_FALSE(reader->Read(&b));
  CHECK(reader->Finish().error_code() == grpc::StatusCode::CANCELLED);
  const v1::Stats after = StatsWhen(stub.get(), [](const v1::Stats& s) {
    // The job leaves the registry's list first; its budget goes back when the reaper destroys it.
    return s.active_streams() == 0 && s.jobs_size() == 0 && s.shared_memory_bytes() == 0 &&
           s.memory_reserved_bytes() == 0;
  });
  CHECK(after.shared_memory_streams() == 0);
  CHECK(after.starts_in_flight() == 0);
}

TEST_CASE("StartsInFlightPastMaxStreamsAreRefusedResourceExhausted") {
  BlockedServer started(/*max_streams=*/2);
  auto& [f, server, stub] = started;
  INFO(server.output());
  f.BlockTrain();
  RawStream a(stub.get(), BlockedRequest());
  RawStream b(stub.get(), BlockedRequest());
  // Both jobs are being opened (fewer than the start threads): the bound is reached.
  StatsWhen(stub.get(), [](const v1::Stats& s) {
    return s.starts_in_flight() == 2 && s.active_streams() == 2;
  });
  // A start on a healthy dataset is refused, at once, not queued.
  RawStream c(stub.get(), serve_testing::Request("other"));
  c.Join();
  CHECK(c.status().error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  CHECK(c.status().error_message().find("stream starts waiting for their files") !=
        std::string::npos);
  CHECK(c.status().error_message().find("max_streams") != std::string::npos);
  // DescribeStream calls are not under max_streams: one of train waits with the starts, one of
  // "other" is answered.
  RawDescribe blocked(stub.get(), BlockedRequest());
  RawDescribe healthy(stub.get(), serve_testing::Request("other"), /*deadline=*/true);
  healthy.Join();
  INFO(healthy.status().error_message());
  CHECK(healthy.status().ok());
  StatsWhen(stub.get(), [](const v1::Stats& s) { return s.starts_in_flight() == 3; });
  f.Release();
  a.Join();
  b.Join();
  blocked.Join();
  CHECK(a.status().ok());
  CHECK(b.status().ok());
  CHECK(a.batches() == 5);
  CHECK(blocked.status().ok());
}

TEST_CASE("DescribesWaitingOnTheirFilesNeverTakeAStartsPlace") {
  // More plans waiting than max_streams: before they had a bound of their own, the third was
  // refused and a start after them too.
  constexpr int kDescribes = 8;
  BlockedServer started(/*max_streams=*/2);
  auto& [f, server, stub] = started;
  INFO(server.output());
  f.BlockTrain();
  std::vector<std::unique_ptr<RawDescribe>> describes;
  for (int i = 0; i < kDescribes; ++i) {
    describes.push_back(std::make_unique<RawDescribe>(stub.get(), BlockedRequest()));
  }
  StatsWhen(stub.get(), [](const v1::Stats& s) { return s.starts_in_flight() == kDescribes; });
  // max_streams starts are accepted: one of train waits behind the plans, one of "other" runs.
  RawStream train(stub.get(), BlockedRequest());
  RawStream other(stub.get(), serve_testing::Request("other"), /*deadline=*/true);
  other.Join();
  INFO(other.status().error_message());
  CHECK(other.status().ok());
  CHECK(other.batches() == 10);
  StatsWhen(stub.get(), [](const v1::Stats& s) { return s.starts_in_flight() == kDescribes + 1; });
  f.Release();
  for (const auto& d : describes) {
    d->Join();
    INFO(d->status().error_message());
    CHECK(d->status().ok());
    CHECK(d->plan().batches_per_epoch() == 5);
  }
  train.Join();
  INFO(train.status().error_message());
  CHECK(train.status().ok());
  CHECK(train.batches() == 5);
}

TEST_CASE("SigtermWhileStartsBlockEndsTheirCallsAndExitsZeroWithoutThem") {
  BlockedServer started(/*max_streams=*/8, /*server_budget=*/kServerBudget, /*drain_seconds=*/1);
  auto& [f, server, stub] = started;
  INFO(server.output());
  f.BlockTrain();
  RawStream start(stub.get(), BlockedRequest());
  RawDescribe describe(stub.get(), BlockedRequest());
  StatsWhen(stub.get(), [](const v1::Stats& s) {
    return s.starts_in_flight() == 2 && s.active_streams() == 1;
  });
  // The FIFO is never released: the open blocks until the process exits.
  CHECK(server.Stop(SIGTERM, std::chrono::seconds(20)) == 0);
  start.Join();
  describe.Join();
  INFO(server.output());
  CHECK(start.status().error_code() == grpc::StatusCode::UNAVAILABLE);
  CHECK(start.status().error_message().find("shutting down") != std::string::npos);
  CHECK(describe.status().error_code() == grpc::StatusCode::UNAVAILABLE);
  CHECK(server.output().find("2 stream start(s) or DescribeStream call(s) still waiting on "
                             "their files after the drain; exiting without "
                             "them") != std::string::npos);
  CHECK(server.output().find("stopped") != std::string::npos);
}

TEST_CASE("StartReturningDuringTheDrainLetsTheServerStopWithoutAbandoningIt") {
  BlockedServer started(/*max_streams=*/8, /*server_budget=*/kServerBudget, /*drain_seconds=*/60);
  auto& [f, server, stub] = started;
  INFO(server.output());
  f.BlockTrain();
  RawStream start(stub.get(), BlockedRequest());
  StatsWhen(stub.get(), [](const v1::Stats& s) {
    return s.starts_in_flight() == 1 && s.active_streams() == 1;
  });
  REQUIRE(::kill(server.pid(), SIGTERM) == 0);
  // The drain ended the call; its open still blocks.
  start.Join();
  CHECK(start.status().error_code() == grpc::StatusCode::UNAVAILABLE);
  f.Release();
  // Signal 0 sends nothing: the server exits on its own once the open has returned.
  CHECK(server.Stop(0, std::chrono::seconds(30)) == 0);
  INFO(server.output());
  CHECK(server.output().find("stopped") != std::string::npos);
  CHECK(server.output().find("exiting without them") == std::string::npos);
}

}  // namespace
}  // namespace sluice
