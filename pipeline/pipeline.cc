#include "pipeline/pipeline.h"

#include <tbb/enumerable_thread_specific.h>
#include <tbb/flow_graph.h>
#include <tbb/global_control.h>
#include <tbb/task_arena.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <thread>

#include "pipeline/augmenter.h"
#include "pipeline/autotuner.h"
#include "pipeline/batch_pool.h"
#include "pipeline/batcher.h"
#include "pipeline/caches.h"
#include "pipeline/decode_budget.h"
#include "pipeline/equal_shares.h"
#include "pipeline/in_flight_window.h"
#include "pipeline/io_pool.h"
#include "pipeline/notification.h"
#include "pipeline/parallelism_gate.h"
#include "pipeline/prefetch_queue.h"
#include "pipeline/record_source.h"
#include "pipeline/source_loop.h"
#include "pipeline/transform.h"
#include "pipeline/work_item_pool.h"

namespace sluice {
namespace {

using Clock = std::chrono::steady_clock;

int64_t NanosSince(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t).count();
}

// What the batches handed out share with their iterator: the buffer pool and the in-flight
// window. Kept alive by every Batch, so a batch may outlive its iterator.
class Loans : public BatchRecycler {
 public:
  Loans(const ResolvedOptions& o, PipelineStats* stats, std::function<void()> on_pool_wait)
      : pool(o, &stats->pool(Pool::kBatchPool), std::move(on_pool_wait)),
        window(static_cast<int64_t>(o.prefetch + 2) * o.batch_size, o.window_bytes()) {}

  void Recycle(BatchBuffer* buffer, uint64_t items) override {
    pool.BatchReturned();
    pool.Release(buffer);
    window.ReleaseItems(items);
  }

  BatchPool pool;
  InFlightWindow window;
};

// oneTBB caps its workers at cores - 1 by default (one core is left for the thread that called
// in). Our decode threads are all workers, so the cap must allow `threads`. The cap is
// process-wide and the smallest live global_control wins, so a pipeline never asks for less
// than the cap in force: one with fewer threads must not throttle the others in the process
// (the server holds one for its whole thread budget), and each keeps its own cap alive.
tbb::global_control AllowWorkers(int threads) {
  const size_t active =
      tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism);
  return tbb::global_control(tbb::global_control::max_allowed_parallelism,
                             std::max(active, static_cast<size_t>(threads) + 1));
}

// One run: the source thread (SourceLoop) feeds the oneTBB graph (decode → sequencer → batch),
// whose batcher fills the prefetch queue the consumer takes batches from.
class PipelineIterator : public Iterator, private BatcherSink {
 public:
  // equal_batches: see Batcher (0: off).
  PipelineIterator(const ResolvedOptions& options, BatchPosition start, int64_t equal_batches)
      : options_(options),
        decode_gate_(options.threads),
        workers_(AllowWorkers(options.threads)),
        arena_(options.threads, 0),
        queue_(&stats_),
        loans_(std::make_shared<Loans>(options_, &stats_, [this] { queue_.Recheck(); })),
        batcher_(options_, &stats_, this, start, equal_batches) {
    stats_.threads = options.threads;
    stats_.decode_parallelism = options.threads;
    stats_.decode_parallelism_max = options.threads;
    stats_.queue_capacity = options.prefetch;
    stats_.pool(Pool::kReadBuffers).limit = kReadBytesPerOpenFile * options.cycle_length;
    stats_.pool(Pool::kRecordsInFlight).limit = options.window_bytes();
    std::fprintf(stderr,
                 "sluice: %s: memory budget %lld bytes: records in flight %lld, one record at "
                 "most %lld, decoding %lld, shuffle buffer %lld\n",
                 options.name.c_str(),
                 static_cast<long long>(options.memory_budget_bytes),    // NOLINT
                 static_cast<long long>(options.window_bytes()),         // NOLINT
                 static_cast<long long>(options.max_held_record_bytes),  // NOLINT
                 static_cast<long long>(options.decode_budget_bytes),    // NOLINT
                 static_cast<long long>(options.shuffle_budget_bytes));  // NOLINT
    MakeCaches();
    io_pool_ = std::make_unique<IoPool>(std::min(options.cycle_length, kMaxIoThreads));
    source_ = std::make_unique<RecordSource>(options_, &stats_, record_cache_.get(),
                                             decoded_cache_.get(), io_pool_.get());
    // One Transform per decode thread: the fused decode and augment (Augmenter).
    TransformFactory make_transform = [this]() -> std::unique_ptr<Transform> {
      return std::make_unique<Augmenter>(options_, decoded_cache_.get(), &stats_, &decode_budget_);
    };
    transforms_.emplace(make_transform);
    arena_.execute([this] { BuildGraph(); });
    loop_ = std::make_unique<SourceLoop>(
        options_, start,
        SourceLoop::Parts{source_.get(), &items_, &loans_->window, &loans_->pool, &stats_,
                          &first_epoch_done_, &epochs_ended_},
        [this](WorkItem* w) { decode_->try_put(w); }, &stop_);
    source_thread_ = std::thread([this] { RunSource(); });
    if (options.autotune && options.threads > 1) {
      autotuner_ =
          std::make_unique<DecodeAutotuner>(&stats_, &decode_gate_, DecodeAutotuner::Options{});
    }
  }

  ~PipelineIterator() override {
    autotuner_.reset();
    RequestStop();
    decode_gate_.SetLimit(decode_gate_.max());  // drain at full width
    source_thread_.join();                      // it waits for the graph to drain
    queue_.Clear();
    loans_->pool.Detach();
  }

  Status GetNext(Batch* batch, bool* end_of_sequence) override {
    *end_of_sequence = false;
    if (!final_.ok()) return final_;
    if (ended_) {
      *end_of_sequence = true;
      return Status::OK();
    }
    Ready r;
    const auto start = Clock::now();
    // A stall only the consumer can end: the source waits for a buffer and every batch not in the
    // (empty) queue is held by the consumer.
    if (!queue_.Pop(&r, [this] { return loans_->pool.ConsumerHoldsThePool(0); })) {
      final_ = ResourceExhausted(
          "the consumer holds " + std::to_string(loans_->pool.lent()) +
          " batches and the pipeline needs a buffer back; release batches before asking for "
          "more (prefetch + 2 = " +
          std::to_string(options_.prefetch + 2) + " may be held at once)");
      return final_;
    }
    stats_.stage(Stage::kConsumer).starved_ns.fetch_add(NanosSince(start));
    return Deliver(std::move(r), batch, end_of_sequence);
  }

  Status TryGetNext(Batch* batch, bool* end_of_sequence, bool* ready) override {
    *end_of_sequence = false;
    *ready = true;
    if (!final_.ok()) return final_;
    if (ended_) {
      *end_of_sequence = true;
      return Status::OK();
    }
    Ready r;
    if (!queue_.TryPop(&r)) {
      // A polling consumer waits from its first empty poll until a batch is there.
      if (!polling_since_) polling_since_ = Clock::now();
      *ready = false;
      return Status::OK();
    }
    if (polling_since_) {
      stats_.stage(Stage::kConsumer).starved_ns.fetch_add(NanosSince(*polling_since_));
      polling_since_.reset();
    }
    return Deliver(std::move(r), batch, end_of_sequence);
  }

  void SetReadyCallback(std::function<void()> callback) override {
    queue_.SetReadyCallback(std::move(callback));
  }

  StatsSnapshot Stats() const override { return stats_.Snapshot(); }
  uint64_t SkippedAfterLastBatch() const override { return skipped_after_last_; }

 private:
  void MakeCaches() {
    if (options_.cache == CacheKind::kRecords) {
      record_cache_ = std::make_unique<RecordCache>(options_.files.size(),
                                                    options_.cache_budget_bytes, &stats_);
    }
    if (options_.cache == CacheKind::kDecoded) {
      // Keyed by record number, so it holds the records of this shard when records are sharded.
      const RecordShard shard = PlanSharding(options_).records;
      const bool by_record = shard.count > 1;
      decoded_cache_ = std::make_unique<DecodedCache>(
          options_.files.size(), by_record ? shard.index : 0, by_record ? shard.count : 1,
          options_.cache_budget_bytes, &stats_);
    }
  }

  Status Deliver(Ready r, Batch* batch, bool* end_of_sequence) {
    skipped_after_last_ = r.skipped;
    if (!r.error.ok()) {
      final_ = r.error;
      return final_;
    }
    if (r.end) {
      ended_ = true;
      *end_of_sequence = true;
      return Status::OK();
    }
    stats_.stage(Stage::kConsumer).items.fetch_add(1, std::memory_order_relaxed);
    *batch = std::move(r.batch);
    return Status::OK();
  }

  void BuildGraph() {
    using namespace tbb::flow;
    graph_ = std::make_unique<graph>();
    graph& g = *graph_;
    decode_ = std::make_unique<function_node<WorkItem*, WorkItem*>>(
        g, options_.threads, [this](WorkItem* w) {
          if (w->kind == WorkKind::kRecord && !stop_.load(std::memory_order_relaxed)) {
            // Apply only computes: a holder of the gate never waits for another node, so
            // threads held back at the gate cannot stall the one that is inside.
            GatePass pass(decode_gate_);
            StageTimer timer(stats_.stage(Stage::kDecode));
            transforms_->local()->Apply(w);
            stats_.stage(Stage::kDecode).items.fetch_add(1, std::memory_order_relaxed);
            stats_.stage(Stage::kDecode)
                .bytes.fetch_add(w->bytes.size(), std::memory_order_relaxed);
          }
          return w;
        });
    sequencer_ = std::make_unique<sequencer_node<WorkItem*>>(
        g, [](WorkItem* const& w) { return static_cast<size_t>(w->sequence); });
    batch_ = std::make_unique<function_node<WorkItem*>>(g, serial, [this](WorkItem* w) {
      stats_.pool(Pool::kRecordsInFlight).Remove(w->held_bytes());
      loans_->window.ReleaseBytes(w->held_bytes());
      batcher_.Add(*w);
      // Epochs end in order, so the first end seen is the run's first epoch's.
      if (w->kind == WorkKind::kEpochEnd) {
        first_epoch_done_.Notify();
        epochs_ended_.Add();
      }
      items_.Recycle(w);
      return continue_msg();
    });
    make_edge(*decode_, *sequencer_);
    make_edge(*sequencer_, *batch_);
  }

  void RunSource() {
    loop_->Run();
    arena_.execute([this] { graph_->wait_for_all(); });
    if (!stop_ && !batcher_.failed()) {
      queue_.Push(Ready{Batch(), Status::OK(), true, batcher_.unreported_skips()});
    }
  }

  // Ends the run early: wakes the source wherever it waits.
  void RequestStop() {
    stop_ = true;
    loans_->window.Stop();
    loans_->pool.Stop();
    first_epoch_done_.Notify();
    epochs_ended_.Cancel();
  }

  // BatcherSink, called on the batch stage.
  void EmitBatch(BatchBuffer* buffer, int size, BatchPosition position, uint64_t skipped,
                 int padded) override {
    stats_.batches.fetch_add(1, std::memory_order_relaxed);
    stats_.images.fetch_add(size, std::memory_order_relaxed);
    stats_.image_bytes.fetch_add(static_cast<uint64_t>(size) * buffer->image_bytes,
                                 std::memory_order_relaxed);
    loans_->pool.BatchLent();
    queue_.Push(Ready{Batch(loans_, buffer, size, position, skipped, padded), Status::OK(), false});
  }
  BatchBuffer* AcquireBuffer() override { return loans_->pool.Acquire(); }
  void EmitError(Status status, uint64_t skipped) override {
    RequestStop();
    queue_.Push(Ready{Batch(), std::move(status), false, skipped});
  }
  void DropBuffer(BatchBuffer* buffer) override { loans_->pool.Release(buffer); }
  void DropItems(uint64_t items) override { loans_->window.ReleaseItems(items); }

  const ResolvedOptions options_;
  PipelineStats stats_;
  // Decode threads allowed to work at once, tuned by autotuner_ (made last, stopped first).
  ParallelismGate decode_gate_;
  tbb::global_control workers_;
  tbb::task_arena arena_;
  PrefetchQueue queue_;
  std::shared_ptr<Loans> loans_;
  std::unique_ptr<RecordCache> record_cache_;
  std::unique_ptr<DecodedCache> decoded_cache_;
  // Shared by the transforms (declared after it, so destroyed first).
  DecodeBudget decode_budget_{options_.decode_budget_bytes, &stats_.pool(Pool::kDecode)};
  // Reads the cycle's files ahead; outlives source_, whose open files have tasks on it.
  std::unique_ptr<IoPool> io_pool_;
  std::unique_ptr<RecordSource> source_;
  // Owns every WorkItem; outlives the graph and the loop, which hold pointers to them.
  WorkItemPool items_;
  std::optional<tbb::enumerable_thread_specific<std::unique_ptr<Transform>>> transforms_;
  Batcher batcher_;
  Notification first_epoch_done_;
  CountGate epochs_ended_;
  // Made inside arena_ (BuildGraph), so the graph's tasks run on the arena's threads.
  std::unique_ptr<tbb::flow::graph> graph_;
  std::unique_ptr<tbb::flow::function_node<WorkItem*, WorkItem*>> decode_;
  std::unique_ptr<tbb::flow::sequencer_node<WorkItem*>> sequencer_;
  std::unique_ptr<tbb::flow::function_node<WorkItem*>> batch_;

  std::atomic<bool> stop_{false};
  std::unique_ptr<SourceLoop> loop_;
  std::thread source_thread_;

  Status final_;                                    // consumer only
  std::optional<Clock::time_point> polling_since_;  // consumer only (TryGetNext)
  bool ended_ = false;                              // consumer only
  uint64_t skipped_after_last_ = 0;                 // consumer only

  std::unique_ptr<DecodeAutotuner> autotuner_;  // null when off or with one thread
};

}  // namespace

Result<std::unique_ptr<Pipeline>> Pipeline::Create(const v1::PipelineOptions& options) {
  ASSIGN_OR_RETURN(ResolvedOptions resolved, ResolveOptions(options));
  return FromResolved(std::move(resolved));
}

std::unique_ptr<Pipeline> Pipeline::FromResolved(ResolvedOptions options) {
  return std::unique_ptr<Pipeline>(new Pipeline(std::move(options)));
}

Status CheckResumePosition(const ResolvedOptions& options, BatchPosition start) {
  if (start.epoch < 0 || start.index < 0 || start.end_record < 0 || start.shuffle_bytes < 0) {
    return InvalidArgument("start position {epoch " + std::to_string(start.epoch) + ", index " +
                           std::to_string(start.index) + ", end_record " +
                           std::to_string(start.end_record) + ", shuffle_bytes " +
                           std::to_string(start.shuffle_bytes) + "} has a negative field");
  }
  // Once the shuffle buffer's byte share binds, the epoch's order depends on it: resuming under
  // another share would cut a different permutation at end_record, losing and repeating records.
  // A position carries the share only then; at end_record 0 nothing is cut.
  if (start.end_record != 0 && start.shuffle_bytes != 0 &&
      start.shuffle_bytes != options.shuffle_budget_bytes) {
    return FailedPrecondition(
        "start_position.shuffle_bytes " + std::to_string(start.shuffle_bytes) +
        " is not this job's shuffle share " + std::to_string(options.shuffle_budget_bytes) +
        " bytes: the epoch's order was made with another share (it follows from the dataset's "
        "memory_budget_bytes, batch and image size, prefetch, cycle_length and cache settings); "
        "resume with the same memory_budget_bytes, batch and image size, prefetch and cache, or "
        "start the epoch over");
  }
  return Status::OK();
}

Result<std::unique_ptr<Iterator>> Pipeline::MakeIterator(BatchPosition start) const {
  RETURN_IF_ERROR(CheckResumePosition(options_, start));
  int64_t equal_batches = 0;
  if (options_.equalizes()) {
    ASSIGN_OR_RETURN(SharePlan plan, PlanSharesForFiles(options_));
    equal_batches = plan.batches_per_epoch;
  }
  return std::unique_ptr<Iterator>(new PipelineIterator(options_, start, equal_batches));
}

}  // namespace sluice
