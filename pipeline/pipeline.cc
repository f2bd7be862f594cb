#include "pipeline/pipeline.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include <tbb/enumerable_thread_specific.h>
#include <tbb/flow_graph.h>
#include <tbb/global_control.h>
#include <tbb/task_arena.h>

#include "formats/seed.h"
#include "pipeline/augmenter.h"
#include "pipeline/autotuner.h"
#include "pipeline/batcher.h"
#include "pipeline/caches.h"
#include "pipeline/io_pool.h"
#include "pipeline/parallelism_gate.h"
#include "pipeline/record_source.h"
#include "pipeline/shuffle_buffer.h"

namespace sluice {
namespace {

using Clock = std::chrono::steady_clock;

int64_t NanosSince(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t).count();
}

// State shared with the batches handed out: the buffer pool and the in-flight window. Kept alive
// by every Batch, so a batch may outlive its iterator.
class Core : public BatchRecycler {
 public:
  Core(const ResolvedOptions& o, PipelineStats* stats) : stats_(stats) {
    const int buffers = o.prefetch + kBatchPoolExtra;
    for (int i = 0; i < buffers; ++i) {
      buffers_.push_back(std::make_unique<BatchBuffer>(o.batch_size, o.height, o.width));
      free_.push_back(buffers_.back().get());
    }
    stats_->pool(Pool::kBatchPool).limit =
        static_cast<int64_t>(buffers) * static_cast<int64_t>(buffers_[0]->bytes());
    window_ = static_cast<int64_t>(o.prefetch + 2) * o.batch_size;
    bytes_window_ = o.records_budget_bytes;
    burst_ = std::min<int64_t>(32, std::max<int64_t>(1, window_ / 8));
  }
  ~Core() override {
    for (BatchBuffer* b : in_use_) stats_->pool(Pool::kBatchPool).Remove(b->bytes());
  }

  // Blocks until a buffer is free; nullptr only when stopping. Buffers run out only when the
  // consumer holds batches (see ConsumerHoldsThePool).
  BatchBuffer* AcquireBuffer(const std::atomic<bool>& stop) {
    std::unique_lock<std::mutex> lock(mu_);
    while (free_.empty()) {
      if (stop.load()) return nullptr;
      ++buffer_waiters_;
      cv_.wait_for(lock, std::chrono::milliseconds(50));
      --buffer_waiters_;
    }
    BatchBuffer* b = free_.back();
    free_.pop_back();
    in_use_.push_back(b);
    if (!detached_) stats_->pool(Pool::kBatchPool).Add(static_cast<int64_t>(b->bytes()));
    return b;
  }

  // The source waits for a buffer while every batch not in the queue is the consumer's: only the
  // consumer can make progress possible, by releasing one.
  bool ConsumerHoldsThePool(int queued) {
    std::lock_guard<std::mutex> lock(mu_);
    return buffer_waiters_ > 0 && outstanding_ > queued;
  }
  void BatchEmitted() {
    std::lock_guard<std::mutex> lock(mu_);
    ++outstanding_;
  }
  int outstanding() {
    std::lock_guard<std::mutex> lock(mu_);
    return outstanding_;
  }

  void ReleaseBuffer(BatchBuffer* b) {
    bool wake;
    {
      std::lock_guard<std::mutex> lock(mu_);
      std::erase(in_use_, b);
      free_.push_back(b);
      if (!detached_) stats_->pool(Pool::kBatchPool).Remove(static_cast<int64_t>(b->bytes()));
      wake = buffer_waiters_ > 0;
    }
    if (wake) cv_.notify_all();
  }

  // Blocks while `window_` records are in flight (from the source to the consumer's release of
  // their batch), or while their bytes (from the source to the batcher) would pass the records
  // budget — one record always passes, however large. Returns false when stopping.
  bool AcquireItem(int64_t bytes, const std::atomic<bool>& stop) {
    std::unique_lock<std::mutex> lock(mu_);
    while (in_flight_ >= window_ ||
           (bytes_in_flight_ > 0 && bytes_in_flight_ + bytes > bytes_window_)) {
      if (stop.load()) return false;
      ++waiters_;
      cv_.wait_for(lock, std::chrono::milliseconds(50));
      --waiters_;
    }
    ++in_flight_;
    bytes_in_flight_ += bytes;
    return true;
  }
  // A record's bytes are done with (the batcher has placed or skipped it).
  void ReleaseBytes(int64_t bytes) {
    bool wake;
    {
      std::lock_guard<std::mutex> lock(mu_);
      bytes_in_flight_ -= bytes;
      wake = waiters_ > 0 && HasRoomForABurst();
    }
    // Called once per record: skip the futex call when the source is not waiting.
    if (wake) cv_.notify_all();
  }
  void ReleaseItems(uint64_t n) {
    bool wake;
    {
      std::lock_guard<std::mutex> lock(mu_);
      in_flight_ -= static_cast<int64_t>(n);
      wake = waiters_ > 0 && HasRoomForABurst();
    }
    if (wake) cv_.notify_all();
  }

  // Wakes the waiting source only once it can emit a run of records, not one per release: a
  // futex wake and a context switch per record cost ~1% of the pipeline's CPU.
  // REQUIRES: mu_ held.
  bool HasRoomForABurst() const {
    return window_ - in_flight_ >= burst_ && bytes_in_flight_ <= bytes_window_ - bytes_window_ / 8;
  }

  void Recycle(BatchBuffer* buffer, uint64_t items) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      --outstanding_;
    }
    ReleaseBuffer(buffer);
    ReleaseItems(items);
  }

  // The iterator is gone: stats may no longer be touched.
  void Detach() {
    std::lock_guard<std::mutex> lock(mu_);
    for (BatchBuffer* b : in_use_) stats_->pool(Pool::kBatchPool).Remove(b->bytes());
    in_use_.clear();
    detached_ = true;
  }

 private:
  PipelineStats* stats_;
  std::vector<std::unique_ptr<BatchBuffer>> buffers_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<BatchBuffer*> free_;    // guarded by mu_
  std::vector<BatchBuffer*> in_use_;  // guarded by mu_
  int64_t in_flight_ = 0;             // guarded by mu_
  int64_t bytes_in_flight_ = 0;       // guarded by mu_
  int waiters_ = 0;                   // threads in cv_.wait for the window; guarded by mu_
  int buffer_waiters_ = 0;            // threads in cv_.wait for a buffer; guarded by mu_
  int outstanding_ = 0;               // batches emitted and not yet released; guarded by mu_
  int64_t window_ = 0;
  int64_t bytes_window_ = 0;
  int64_t burst_ = 1;
  bool detached_ = false;             // guarded by mu_
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

// One entry of the prefetch queue.
struct Ready {
  Batch batch;
  Status error;
  bool end = false;
};

class PipelineIterator : public Iterator, private BatcherSink {
 public:
  PipelineIterator(const ResolvedOptions& options, BatchPosition start)
      : options_(options),
        start_(start),
        decode_gate_(options.threads),
        workers_(AllowWorkers(options.threads)),
        arena_(options.threads, 0),
        batcher_(options_, &stats_, this, start),
        shuffle_(static_cast<size_t>(options.shuffle_buffer),
                 &stats_.pool(Pool::kShuffleBuffer)) {
    stats_.threads = options.threads;
    stats_.decode_parallelism = options.threads;
    stats_.decode_parallelism_max = options.threads;
    stats_.queue_capacity = options.prefetch;
    stats_.pool(Pool::kReadBuffers).limit = kReadBytesPerOpenFile * options.cycle_length;
    stats_.pool(Pool::kRecordsInFlight).limit = options.records_budget_bytes;
    if (options.cache == CacheKind::kRecords) {
      record_cache_ = std::make_unique<RecordCache>(options.files.size(),
                                                    options.cache_budget_bytes, &stats_);
    }
    io_pool_ = std::make_unique<IoPool>(std::min(options.cycle_length, kMaxIoThreads));
    source_ = std::make_unique<RecordSource>(options_, &stats_, record_cache_.get(), nullptr,
                                             io_pool_.get());
    if (options.cache == CacheKind::kDecoded) {
      int index = source_->record_sharding() ? options.shard_index : 0;
      int count = source_->record_sharding() ? options.shard_count : 1;
      decoded_cache_ = std::make_unique<DecodedCache>(options.files.size(), index, count,
                                                      options.cache_budget_bytes, &stats_);
      source_ = std::make_unique<RecordSource>(options_, &stats_, nullptr, decoded_cache_.get(),
                                               io_pool_.get());
    }
    core_ = std::make_shared<Core>(options_, &stats_);
    augmenters_.emplace([this] { return Augmenter(options_, decoded_cache_.get(), &stats_); });
    arena_.execute([this] { BuildGraph(); });
    source_thread_ = std::thread([this] { RunSource(); });
    if (options.autotune && options.threads > 1) {
      autotuner_ = std::make_unique<DecodeAutotuner>(&stats_, &decode_gate_,
                                                     DecodeAutotuner::Options{});
    }
  }

  ~PipelineIterator() override {
    autotuner_.reset();
    stop_ = true;
    decode_gate_.SetLimit(decode_gate_.max());  // drain at full width
    source_thread_.join();  // it waits for the graph to drain
    {
      std::lock_guard<std::mutex> lock(ready_mu_);
      ready_.clear();
    }
    core_->Detach();
    for (WorkItem* w : free_items_) delete w;
  }

  Status GetNext(Batch* batch, bool* end_of_sequence) override {
    *end_of_sequence = false;
    if (!final_.ok()) return final_;
    if (ended_) {
      *end_of_sequence = true;
      return Status::OK();
    }
    Ready r;
    {
      auto start = Clock::now();
      std::unique_lock<std::mutex> lock(ready_mu_);
      // A stall only the consumer can end: the source waits for a buffer, every batch not in
      // the (empty) queue is held by the consumer, and nothing has moved for a second.
      int stalled_rounds = 0;
      uint64_t seen = stats_.stage(Stage::kBatch).items.load();
      while (ready_.empty()) {
        ready_cv_.wait_for(lock, std::chrono::milliseconds(100));
        uint64_t now = stats_.stage(Stage::kBatch).items.load();
        bool stalled = ready_.empty() && now == seen && core_->ConsumerHoldsThePool(0);
        stalled_rounds = stalled ? stalled_rounds + 1 : 0;
        seen = now;
        if (stalled_rounds >= 10) {
          final_ = ResourceExhausted(
              "the consumer holds " + std::to_string(core_->outstanding()) +
              " batches and the pipeline needs a buffer back; release batches before asking for "
              "more (prefetch + 2 = " + std::to_string(options_.prefetch + 2) +
              " may be held at once)");
          return final_;
        }
      }
      r = std::move(ready_.front());
      ready_.pop_front();
      stats_.queue_fill = static_cast<int>(ready_.size());
      stats_.stage(Stage::kConsumer).starved_ns.fetch_add(NanosSince(start));
    }
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
    {
      std::lock_guard<std::mutex> lock(ready_mu_);
      if (ready_.empty()) {
        // A polling consumer waits from its first empty poll until a batch is there.
        if (!polling_since_) polling_since_ = Clock::now();
        *ready = false;
        return Status::OK();
      }
      r = std::move(ready_.front());
      ready_.pop_front();
      stats_.queue_fill = static_cast<int>(ready_.size());
    }
    if (polling_since_) {
      stats_.stage(Stage::kConsumer).starved_ns.fetch_add(NanosSince(*polling_since_));
      polling_since_.reset();
    }
    return Deliver(std::move(r), batch, end_of_sequence);
  }

  void SetReadyCallback(std::function<void()> callback) override {
    std::lock_guard<std::mutex> lock(ready_mu_);
    on_ready_ = std::move(callback);
  }

  StatsSnapshot Stats() const override { return stats_.Snapshot(); }

 private:
  Status Deliver(Ready r, Batch* batch, bool* end_of_sequence) {
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
            // Process only computes: a holder of the gate never waits for another node, so
            // threads held back at the gate cannot stall the one that is inside.
            GatePass pass(decode_gate_);
            StageTimer timer(stats_.stage(Stage::kDecode));
            augmenters_->local().Process(w);
            stats_.stage(Stage::kDecode).items.fetch_add(1, std::memory_order_relaxed);
            stats_.stage(Stage::kDecode).bytes.fetch_add(w->bytes.size(),
                                                         std::memory_order_relaxed);
          }
          return w;
        });
    sequencer_ = std::make_unique<sequencer_node<WorkItem*>>(
        g, [](WorkItem* const& w) { return static_cast<size_t>(w->sequence); });
    batch_ = std::make_unique<function_node<WorkItem*>>(
        g, serial, [this](WorkItem* w) {
          stats_.pool(Pool::kRecordsInFlight).Remove(w->held_bytes());
          core_->ReleaseBytes(w->held_bytes());
          batcher_.Add(*w);
          RecycleItem(w);
          return continue_msg();
        });
    make_edge(*decode_, *sequencer_);
    make_edge(*sequencer_, *batch_);
  }

  // BatcherSink, called on the batch stage.
  void EmitBatch(BatchBuffer* buffer, int size, BatchPosition position,
                 uint64_t skipped) override {
    stats_.batches.fetch_add(1, std::memory_order_relaxed);
    stats_.images.fetch_add(size, std::memory_order_relaxed);
    stats_.image_bytes.fetch_add(static_cast<uint64_t>(size) * buffer->image_bytes,
                                 std::memory_order_relaxed);
    core_->BatchEmitted();
    Push(Ready{Batch(core_, buffer, size, position, skipped), Status::OK(), false});
  }
  void EmitError(Status status) override {
    stop_ = true;
    Push(Ready{Batch(), std::move(status), false});
  }
  void DropBuffer(BatchBuffer* buffer) override { core_->ReleaseBuffer(buffer); }
  void DropItems(uint64_t items) override { core_->ReleaseItems(items); }

  void Push(Ready r) {
    std::function<void()> on_ready;
    {
      std::lock_guard<std::mutex> lock(ready_mu_);
      ready_.push_back(std::move(r));
      stats_.queue_fill = static_cast<int>(ready_.size());
      on_ready = on_ready_;
    }
    ready_cv_.notify_one();
    if (on_ready) on_ready();
  }

  WorkItem* NewItem() {
    std::lock_guard<std::mutex> lock(items_mu_);
    if (free_items_.empty()) return new WorkItem();
    WorkItem* w = free_items_.back();
    free_items_.pop_back();
    return w;
  }
  void RecycleItem(WorkItem* w) {
    w->cached = nullptr;
    w->bytes = {};
    w->lazy_length = 0;
    // Free the record: a pooled item must not keep a record's worth of memory that no budget
    // counts. malloc hands the same chunks to the next records.
    std::string().swap(w->owned);
    w->status = Status::OK();
    std::lock_guard<std::mutex> lock(items_mu_);
    free_items_.push_back(w);
  }

  // Hands w to the graph once the in-flight window has room. False when stopping.
  bool Emit(WorkItem* w, int64_t epoch) {
    auto start = Clock::now();
    if (!core_->AcquireItem(w->held_bytes(), stop_)) {
      RecycleItem(w);
      return false;
    }
    stats_.stage(Stage::kRead).blocked_ns.fetch_add(NanosSince(start), std::memory_order_relaxed);
    w->sequence = sequence_++;
    w->epoch = epoch;
    if (w->kind != WorkKind::kEpochEnd) {
      w->epoch_index = epoch_index_++;
      w->run_index = w->epoch_index - skip_base_;
      w->slot = static_cast<int>(w->run_index % static_cast<uint64_t>(options_.batch_size));
      if (w->slot == 0) {
        current_buffer_ = core_->AcquireBuffer(stop_);
        if (current_buffer_ == nullptr) {  // stopping
          core_->ReleaseItems(1);
          core_->ReleaseBytes(w->held_bytes());
          RecycleItem(w);
          return false;
        }
      }
      w->buffer = current_buffer_;
    } else {
      w->buffer = nullptr;
    }
    stats_.pool(Pool::kRecordsInFlight).Add(w->held_bytes());
    decode_->try_put(w);
    return true;
  }

  // Emits x, or passes over it when a resumed run has not reached its start yet. False when
  // stopping.
  bool Pass(WorkItem* x, int64_t epoch) {
    if (epoch_index_ < skip_base_) {
      ++epoch_index_;
      RecycleItem(x);
      return true;
    }
    if (x->lazy_length > 0) source_->Materialize(x);
    return Emit(x, epoch);
  }

  void RunSource() {
    for (int64_t epoch = start_.epoch; options_.epochs == 0 || epoch < options_.epochs; ++epoch) {
      source_->StartEpoch(epoch);
      shuffle_.StartEpoch(MixSeed(options_.shuffle_seed,
                              options_.reshuffle_each_epoch ? static_cast<uint64_t>(epoch) : 0));
      epoch_index_ = 0;
      skip_base_ = epoch == start_.epoch ? static_cast<uint64_t>(start_.end_record) : 0;
      // Records a resumed run passes over need not be read where the record index finds them.
      source_->SetLazyRecords(skip_base_);
      bool running = true;
      while (running) {
        if (stop_) break;
        WorkItem* w = NewItem();
        bool end = false;
        source_->Next(w, &end);
        if (end) {
          RecycleItem(w);
          while (WorkItem* x = shuffle_.Drain()) {
            if (!Pass(x, epoch)) break;
          }
          running = false;
          break;
        }
        if (WorkItem* x = shuffle_.Push(w)) {
          if (!Pass(x, epoch)) break;
        }
      }
      if (stop_) break;
      bool empty = epoch_index_ == 0;
      WorkItem* marker = NewItem();
      marker->kind = WorkKind::kEpochEnd;
      if (!Emit(marker, epoch)) break;
      if (decoded_cache_ && epoch == start_.epoch) {
        // The first epoch fills the DECODED cache from the decode workers. Waiting for its last
        // items (no consumer action needed: they are all emitted) lets epoch 1 find every file
        // complete and skip its I/O and decode, instead of re-reading the last few files.
        while (!stop_ && stats_.epochs_done.load() < 1) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
      }
      // A data set with no records would otherwise repeat nothing forever.
      if (empty) break;
    }
    while (WorkItem* x = shuffle_.Drain()) RecycleItem(x);
    arena_.execute([this] { graph_->wait_for_all(); });
    if (!stop_ && !batcher_.failed()) Push(Ready{Batch(), Status::OK(), true});
  }

  const ResolvedOptions options_;
  const BatchPosition start_;
  PipelineStats stats_;
  // Decode threads allowed to work at once, tuned by autotuner_ (made last, stopped first).
  ParallelismGate decode_gate_;
  tbb::global_control workers_;
  tbb::task_arena arena_;
  // Made inside arena_ (BuildGraph), so the graph's tasks run on the arena's threads.
  std::unique_ptr<tbb::flow::graph> graph_;
  std::unique_ptr<RecordCache> record_cache_;
  std::unique_ptr<DecodedCache> decoded_cache_;
  // Reads the cycle's files ahead; outlives source_, whose open files have tasks on it.
  std::unique_ptr<IoPool> io_pool_;
  std::unique_ptr<RecordSource> source_;
  std::shared_ptr<Core> core_;
  std::optional<tbb::enumerable_thread_specific<Augmenter>> augmenters_;
  Batcher batcher_;
  ShuffleBuffer shuffle_;
  std::unique_ptr<tbb::flow::function_node<WorkItem*, WorkItem*>> decode_;
  std::unique_ptr<tbb::flow::sequencer_node<WorkItem*>> sequencer_;
  std::unique_ptr<tbb::flow::function_node<WorkItem*>> batch_;

  std::atomic<bool> stop_{false};
  std::thread source_thread_;
  uint64_t sequence_ = 0;     // source thread only
  uint64_t epoch_index_ = 0;  // source thread only
  uint64_t skip_base_ = 0;    // source thread only: records passed over in this epoch
  BatchBuffer* current_buffer_ = nullptr;  // source thread only

  std::mutex items_mu_;
  std::vector<WorkItem*> free_items_;  // guarded by items_mu_

  std::mutex ready_mu_;
  std::condition_variable ready_cv_;
  std::deque<Ready> ready_;  // guarded by ready_mu_
  std::function<void()> on_ready_;  // guarded by ready_mu_

  Status final_;       // consumer only
  std::optional<Clock::time_point> polling_since_;  // consumer only (TryGetNext)
  bool ended_ = false; // consumer only

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

Result<std::unique_ptr<Iterator>> Pipeline::MakeIterator(BatchPosition start) const {
  if (start.epoch < 0 || start.index < 0 || start.end_record < 0) {
    return InvalidArgument("start position {epoch " + std::to_string(start.epoch) + ", index " +
                           std::to_string(start.index) + ", end_record " +
                           std::to_string(start.end_record) + "} has a negative field");
  }
  return std::unique_ptr<Iterator>(new PipelineIterator(options_, start));
}

}  // namespace sluice
