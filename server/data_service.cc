#include "server/data_service.h"

#include <grpcpp/support/proto_buffer_reader.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string_view>
#include <vector>

#include "client/wire/batch_wire.h"
#include "client/wire/feature_wire.h"
#include "client/wire/shared_segment.h"
#include "pipeline/equal_shares.h"
#include "pipeline/file_list.h"
#include "server/request_policy.h"
#include "server/server_config.h"
#include "server/token_auth.h"

namespace sluice {

// A call whose start (a job's opening, a plan's record counts) runs on the executor. It ends
// once, whichever comes first: its start's answer, its client's cancel, the server's drain
// (Refuse). It is destroyed when nobody holds it any more: the call until OnDone, its start
// until it has run, a drain while it refuses it.
class StartingCall {
 public:
  explicit StartingCall(DataService* service) : service_(service) {}
  virtual ~StartingCall() = default;
  // Ends the call with `status` (the server is draining) unless it has ended or started.
  virtual void Refuse(const Status& status) = 0;
  void Hold() { holds_.fetch_add(1, std::memory_order_relaxed); }
  void Release() {
    if (holds_.fetch_sub(1, std::memory_order_acq_rel) == 1) Destroy();
  }

 protected:
  // From OnDone: the call has ended. A start still queued is withdrawn (its hold and its place
  // under the bounds go back now, not when a start thread reaches it); then the call's hold goes.
  void Done() {
    service_->Ended(this);
    Release();
  }
  // Gives back what the call holds, and deletes it.
  virtual void Destroy() = 0;

 private:
  DataService* const service_;
  std::atomic<int> holds_{1};  // the call's, released by Done
};

namespace {

// A stream refused before it started.
class RefusedStream : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  explicit RefusedStream(const Status& s) { Finish(ToGrpc(s)); }
  void OnDone() override { delete this; }
};

void DestroyBatch(void* batch) { delete static_cast<Batch*>(batch); }

// Every field of a batch's message but its images.
BatchMeta MetaOf(const Batch& batch) {
  BatchMeta meta;
  meta.epoch = batch.position().epoch;
  meta.index = batch.position().index;
  meta.end_record = batch.position().end_record;
  meta.shuffle_bytes = batch.position().shuffle_bytes;
  meta.n = batch.size();
  meta.height = batch.height();
  meta.width = batch.width();
  meta.skipped_records = batch.skipped();
  meta.dtype = batch.dtype();
  meta.layout = batch.layout();
  return meta;
}

// The batch's per-sample extras: empty spans (nothing written) unless it has padding or the
// stream asked for record ids; its features (the job's `arrays`) encoded into *features, which
// the extras point to.
BatchExtras ExtrasOf(const Batch& batch, const std::vector<ArrayInfo>& arrays,
                     std::string* features) {
  features->clear();
  if (!arrays.empty()) EncodeFeatureArrays(arrays, batch.features(), features);
  return BatchExtras{batch.valid_mask(),   batch.record_files(),  batch.record_indexes(),
                     batch.mixed_labels(), batch.label_weights(), *features};
}

// What a batch's message carries as labels: none for an unlabeled dataset.
std::span<const int32_t> LabelsOf(const Batch& batch, const ResolvedOptions& options) {
  if (options.unlabeled) return {};
  return batch.labels();
}

// How long a client that asked for shared memory has to map the segment before its stream falls
// back to ordinary batches (a client in another pid namespace, or of another user, never does).
constexpr auto kAttachTimeout = std::chrono::seconds(2);

// DescribeStream's call: answered from the executor, or ended by its cancel or the drain.
class PlanReactor : public grpc::ServerUnaryReactor, public StartingCall {
 public:
  PlanReactor(DataService* service, v1::StreamPlan* response)
      : StartingCall(service), response_(response) {}

  bool ended() const {
    std::lock_guard<std::mutex> lock(mu_);
    return finished_;
  }
  // The plan (or why there is none), unless the call has ended.
  void Answer(Result<v1::StreamPlan> plan) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (finished_) return;
      finished_ = true;
      if (plan.ok()) *response_ = std::move(*plan);
    }
    Finish(plan.ok() ? grpc::Status::OK : ToGrpc(plan.status()));
  }
  void Refuse(const Status& status) override { FinishOnce(ToGrpc(status)); }
  void OnCancel() override { FinishOnce(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled")); }
  void OnDone() override { Done(); }

 private:
  void Destroy() override { delete this; }
  void FinishOnce(grpc::Status status) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (finished_) return;
      finished_ = true;
    }
    Finish(std::move(status));
  }

  v1::StreamPlan* const response_;  // the call's: written only before Finish
  mutable std::mutex mu_;
  bool finished_ = false;  // guarded by mu_
};

class BatchWriter : public grpc::ServerWriteReactor<grpc::ByteBuffer>,
                    public JobConsumer,
                    public StartingCall {
 public:
  // The call's stream, returned to gRPC at once; its job is opened on the executor (Opened).
  // consumer_index: the stream's index in a job in lockstep (Job::Attach).
  BatchWriter(DataService* service, grpc::CallbackServerContext* context, JobRegistry* registry,
              SlotWatcher* watcher, int consumer_index)
      : StartingCall(service),
        context_(context),
        registry_(registry),
        watcher_(watcher),
        consumer_index_(consumer_index) {}

  // Whether the call has ended: there is no stream to open a job for. Any thread.
  bool ended() const {
    std::lock_guard<std::mutex> lock(mu_);
    return finished_;
  }

  // On the executor, with the stream's job as JobRegistry::Open gave it (or why not): the stream
  // is refused, or starts writing. A call that ended meanwhile (cancelled, drained) gives the job
  // straight back. segment_for: the stream's shared-memory segment, named in the initial
  // metadata and reserved in the registry, or null for ordinary batches
  // (DataService::SharedSegmentFor); called once the job is known, while the call is still on.
  void Opened(
      Result<std::shared_ptr<Job>> job,
      const std::function<std::shared_ptr<SharedSegment>(const ResolvedOptions&)>& segment_for) {
    bool ended;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ended = finished_;
      if (!ended && job.ok()) phase_ = Phase::kStarting;
      if (!ended && !job.ok()) finished_ = true;
    }
    if (ended) {
      if (job.ok()) registry_->Close(std::move(*job));
      return;
    }
    if (!job.ok()) {
      Finish(ToGrpc(job.status()));
      return;
    }
    job_ = std::move(*job);
    arrays_ = job_->options().features.arrays();
    counters_ = &registry_->counters(job_->dataset());
    segment_ = segment_for(job_->options());
    offered_ = segment_ != nullptr;
    Start();
    // A cancel that came while starting left the call to end here (or to the write in flight).
    bool cancel;
    {
      std::lock_guard<std::mutex> lock(mu_);
      phase_ = Phase::kStarted;
      cancel = cancelled_ && !writing_ && !finished_;
      if (cancel) finished_ = true;
    }
    if (cancel) Finish(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
  }

  // While the job is being opened only: afterwards the job's Stop ends the stream.
  void Refuse(const Status& status) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (finished_ || phase_ != Phase::kOpening) return;
      finished_ = true;
    }
    Finish(ToGrpc(status));
  }

  bool OnEvent(JobEvent& event) override {
    if (event.end || !event.error.ok()) {
      // Skips after the job's last batch ride on no batch: told to the client in the trailing
      // metadata (GetStats counts them from the pipeline).
      return FinishOnce(ToGrpc(event.error), event.skipped);
    }
    {
      // The claim: whether this stream writes the batch is settled before anything is taken
      // from the event; a stream that has ended leaves the event as it is to the job (in
      // lockstep, for the next stream under its index). From here nothing else finishes the
      // call (OnCancel and Opened leave the ending to OnWriteDone), so the write starts.
      std::lock_guard<std::mutex> lock(mu_);
      if (finished_) return false;
      writing_ = true;
    }
    if (shared_) return WriteShared(event.batch);
    // Claimed: only now is the batch taken.
    Batch* batch = new Batch(std::move(event.batch));
    const BatchMeta meta = MetaOf(*batch);
    grpc::Slice slices[2] = {grpc::Slice(EncodeBatchPrefix(meta, LabelsOf(*batch, job_->options()),
                                                           ExtrasOf(*batch, arrays_, &features_))),
                             grpc::Slice(const_cast<uint8_t*>(batch->images().data()),
                                         batch->images().size(), &DestroyBatch, batch)};
    grpc::ByteBuffer message(slices, 2);
    StartWriting(&message, meta);
    return true;
  }

  void OnWriteDone(bool ok) override {
    out_.Clear();
    // A batch that never went out leaves its slot to the server, not to a client that never
    // learns of it (the segment could otherwise not drain once the stream ends).
    if (!ok && pending_slot_ >= 0) segment_->Unfill(pending_slot_);
    pending_slot_ = -1;
    bool cancelled;
    {
      std::lock_guard<std::mutex> lock(mu_);
      writing_ = false;
      cancelled = cancelled_;
    }
    if (!ok || cancelled) {
      FinishOnce(grpc::Status(grpc::StatusCode::CANCELLED, "the client went away"));
      return;
    }
    counters_->batches.fetch_add(1, std::memory_order_relaxed);
    counters_->images.fetch_add(static_cast<uint64_t>(pending_.n), std::memory_order_relaxed);
    counters_->bytes.fetch_add(pending_.image_bytes(), std::memory_order_relaxed);
    WantNext();
  }

  void OnCancel() override {
    {
      // One critical section: an OnEvent on a pipeline thread either started its write before
      // (OnWriteDone finishes the call) or sees finished_ and writes nothing. While the job is
      // being opened the call ends now (Opened gives the job back); while the stream starts,
      // Opened ends it.
      std::lock_guard<std::mutex> lock(mu_);
      cancelled_ = true;
      if (writing_ || finished_ || phase_ == Phase::kStarting) return;
      finished_ = true;
    }
    Finish(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
  }

  void OnDone() override { Done(); }

 private:
  enum class Phase { kOpening, kStarting, kStarted };

  // The stream's first steps once its job is known: attach, then the first Want, or the segment
  // offered to the client and its attachment watched.
  void Start() {
    job_->Attach(this, consumer_index_);
    if (!offered_) {
      job_->Want(this);
      return;
    }
    reserved_ = static_cast<int64_t>(segment_->total_bytes());
    StartSendInitialMetadata();
    const auto deadline = std::chrono::steady_clock::now() + kAttachTimeout;
    watcher_->Watch(
        this,
        [this, deadline] {
          return segment_->attached() || std::chrono::steady_clock::now() >= deadline;
        },
        [this] {
          // Attached: the name is no longer needed (the mappings stay), and a client that
          // opens it later finds nothing or another file. Not: ordinary batches, and the
          // segment's memory goes back now rather than with the stream, whoever maps it.
          segment_->Retract();
          if (segment_->attached()) {
            registry_->CountSharedMemoryStream(1);
            shared_ = true;
          } else {
            segment_->Discard();
            segment_.reset();
            registry_->ReleaseSharedMemory(reserved_);
            reserved_ = 0;
          }
          WantIfOpen();
        });
  }

  // Once the call is done (OnDone) and its start has returned: whatever thread gets there last.
  void Destroy() override {
    if (!job_) {
      delete this;
      return;
    }
    // After Cancel the watcher's ready() is not running and will not run: reserved_ and shared_
    // are settled, and nothing asks the job for this stream again.
    if (offered_) watcher_->Cancel(this);
    // After Detach no OnEvent runs or will run (a pipeline thread delivering a batch to this
    // stream finishes first): only then may the segment go, or WriteShared would find it gone.
    job_->Detach(this);
    if (offered_) {
      if (shared_) {
        registry_->CountSharedMemoryStream(-1);
        Linger(std::move(segment_), reserved_, registry_, watcher_);
      } else if (reserved_ > 0) {
        // Offered, not yet attached: nothing of it is in use by the client.
        segment_->Discard();
        registry_->ReleaseSharedMemory(reserved_);
      }
    }
    registry_->Close(std::move(job_));
    delete this;
  }

  // skipped: records skipped after the stream's last batch, for its trailing metadata. False
  // when the stream had already finished (nothing is sent).
  bool FinishOnce(grpc::Status status, uint64_t skipped = 0) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (finished_) return false;
      finished_ = true;
    }
    if (skipped > 0) context_->AddTrailingMetadata(kSkippedRecordsKey, std::to_string(skipped));
    Finish(std::move(status));
    return true;
  }

  // The job's next batch, once a shared-memory stream has a free slot to put it in (the client
  // frees them as its consumer releases batches). A client that broke the slot protocol ends
  // its stream here, before a batch is taken from the job for it.
  void WantNext() {
    if (shared_) {
      Result<int> found = segment_->FindFree();
      if (!found.ok()) {
        FinishOnce(ToGrpc(found.status()));
        return;
      }
      if (*found < 0) {
        watcher_->Watch(
            this,
            [this] {
              Result<int> slot = segment_->FindFree();
              return !slot.ok() || *slot >= 0;
            },
            [this] { WantNext(); });
        return;
      }
    }
    WantIfOpen();
  }
  void WantIfOpen() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (finished_) return;
    }
    job_->Want(this);
  }

  // A segment whose stream has ended keeps its reservation until the client is done with every
  // slot (or unmapped it): its pages are the server's (its fallocate, its memory cgroup), and a
  // client's mapping would keep them however the stream ended. Then they are punched out and the
  // reservation released. A client that never frees its slots keeps the reservation charged, so
  // max_shared_memory_bytes still bounds what such clients hold (later streams fall back to the
  // socket). The watcher's entry is the lingering set: it holds the segment until then.
  static void Linger(std::shared_ptr<SharedSegment> segment, int64_t reserved,
                     JobRegistry* registry, SlotWatcher* watcher) {
    SharedSegment* owner = segment.get();
    watcher->Watch(
        owner, [owner] { return owner->Drained(); },
        [segment = std::move(segment), reserved, registry] {
          segment->Discard();
          registry->ReleaseSharedMemory(reserved);
        });
  }

  // Copies the images into a free slot (WantNext waited for one) and sends the rest of the
  // batch with the slot's number; the batch's pooled buffer goes back at once. Whatever the
  // client does to the segment meanwhile, the copy cannot fault: its size is sealed. False when
  // the batch was not written (the stream ends).
  bool WriteShared(const Batch& batch) {
    Result<int> found = segment_->FindFree();
    if (!found.ok()) {
      FinishOnce(ToGrpc(found.status()));
      return false;
    }
    const int slot = *found;
    const size_t image_bytes = batch.images().size();
    if (slot < 0 || image_bytes > segment_->slot_bytes()) {
      FinishOnce(ToGrpc(Internal("shared-memory stream: no free slot of " +
                                 std::to_string(image_bytes) + " bytes")));
      return false;
    }
    std::memcpy(segment_->SlotData(slot), batch.images().data(), image_bytes);
    segment_->MarkFull(slot);
    const BatchMeta meta = MetaOf(batch);
    grpc::Slice slice(EncodeSharedBatch(meta, LabelsOf(batch, job_->options()),
                                        static_cast<uint32_t>(slot),
                                        ExtrasOf(batch, arrays_, &features_)));
    grpc::ByteBuffer message(&slice, 1);
    StartWriting(&message, meta, slot);
    return true;
  }

  // Starts writing *message (taking it), counted as served when the write completes; `slot`:
  // the shared-memory slot it names, or -1.
  // REQUIRES: claimed by OnEvent (writing_ set while not finished_).
  void StartWriting(grpc::ByteBuffer* message, const BatchMeta& meta, int slot = -1) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      pending_ = meta;
      pending_slot_ = slot;
      out_.Swap(message);
    }
    StartWrite(&out_);
  }

  // The call's; valid until OnDone, which comes only after Finish, so while the call is on.
  grpc::CallbackServerContext* const context_;
  JobRegistry* const registry_;
  SlotWatcher* const watcher_;
  const int consumer_index_;  // in a job in lockstep
  // job_, arrays_, counters_, offered_: set by Opened before the stream starts, fixed afterwards.
  std::shared_ptr<Job> job_;
  std::vector<ArrayInfo> arrays_;  // the job's FeatureSchema::arrays()
  std::string features_;           // scratch of OnEvent (one write in flight): Batch.features
  DatasetCounters* counters_ = nullptr;
  bool offered_ = false;  // a segment was named to the client (the watcher is in use)
  // Null for ordinary batches; reset by the watcher's ready() when the client did not attach
  // (before any Want, so nothing else reads it then).
  std::shared_ptr<SharedSegment> segment_;
  int64_t reserved_ = 0;  // registry bytes held for segment_; ready() and OnDone only
  // Images go through segment_: set (before the first Want) once the client attached.
  std::atomic<bool> shared_{false};
  grpc::ByteBuffer out_;   // the write in flight
  BatchMeta pending_;      // of the write in flight, counted as served when it completes
  int pending_slot_ = -1;  // the slot the write in flight names, or -1
  mutable std::mutex mu_;
  Phase phase_ = Phase::kOpening;  // guarded by mu_
  bool writing_ = false;           // guarded by mu_
  bool finished_ = false;          // Finish called or about to be; guarded by mu_
  bool cancelled_ = false;         // guarded by mu_
};

}  // namespace

grpc::Status ToGrpc(const Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(static_cast<int>(s.code())), s.message());
}

namespace {

std::map<std::string, int64_t> CountListedFiles(const v1::ServerConfig& config) {
  std::map<std::string, int64_t> out;
  for (const v1::DatasetConfig& d : config.datasets()) {
    if (d.pipeline().file_list().empty()) continue;
    Result<std::vector<ListedFile>> listed = ReadFileList(
        d.pipeline().file_list(), d.pipeline().unlabeled() ? ListLabels::kIgnore : ListLabels::kRead);
    out[d.name()] = listed.ok() ? static_cast<int64_t>(listed->size()) : 0;
  }
  return out;
}

}  // namespace

DataService::DataService(const v1::ServerConfig& config, JobRegistry* registry, std::string token)
    : config_(config),
      listed_files_(CountListedFiles(config)),
      registry_(registry),
      token_(std::move(token)),
      executor_(kStartThreads, config.max_streams() + kMaxDescribesInFlight + kStartThreads,
                std::max(1, kStartThreads - 1)) {}

DataService::~DataService() = default;

Status DataService::Authenticate(const grpc::CallbackServerContext& context) const {
  // The credentials refused a call without the token before its message was read
  // (token_auth.h); this check holds for a DataService served on other credentials.
  std::vector<std::string_view> authorization;
  const auto [first, last] = context.client_metadata().equal_range("authorization");
  for (auto it = first; it != last; ++it)
    authorization.emplace_back(it->second.data(), it->second.size());
  return CheckBearerToken(authorization, token_);
}

grpc::ServerUnaryReactor* DataService::ListDatasets(grpc::CallbackServerContext* context,
                                                    const v1::ListDatasetsRequest*,
                                                    v1::ListDatasetsResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  Status auth = Authenticate(*context);
  if (!auth.ok()) {
    reactor->Finish(ToGrpc(auth));
    return reactor;
  }
  for (const v1::DatasetConfig& d : config_.datasets()) {
    v1::DatasetInfo* info = response->add_datasets();
    *info = DescribeDataset(d, config_.fleet_shard());
    if (auto listed = listed_files_.find(d.name()); listed != listed_files_.end()) {
      info->set_files(listed->second);
    }
  }
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* DataService::GetStats(grpc::CallbackServerContext* context,
                                                const v1::GetStatsRequest* request,
                                                v1::Stats* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  Status s = Authenticate(*context);
  if (s.ok() && !request->dataset().empty()) s = FindDataset(config_, request->dataset()).status();
  if (s.ok()) {
    registry_->FillStats(request->dataset(), response);
    response->set_starts_in_flight(starts_in_flight());
  }
  reactor->Finish(ToGrpc(s));
  return reactor;
}

grpc::ServerUnaryReactor* DataService::DescribeStream(grpc::CallbackServerContext* context,
                                                      const v1::StreamRequest* request,
                                                      v1::StreamPlan* response) {
  auto* reactor = new PlanReactor(this, response);
  Status s = Authenticate(*context);
  // The request's checks read no file's records: a bad request is answered at once, whatever
  // waits on the start threads. Only the record counts are deferred.
  Result<ResolvedOptions> resolved = s.ok() ? ResolveForPlan(*request) : Result<ResolvedOptions>(s);
  if (!resolved.ok()) {
    reactor->Answer(resolved.status());
    return reactor;
  }
  // The task keeps the request, not the resolved options (which name every file): a waiting
  // call holds only its request. Resolved again there, it plans from the files as they are then.
  s = Defer(reactor, CallKind::kDescribe, request->dataset(), [this, reactor, request = *request] {
    if (reactor->ended()) return;
    Result<ResolvedOptions> again = ResolveForPlan(request);
    if (!again.ok()) {
      reactor->Answer(again.status());
      return;
    }
    Result<v1::StreamPlan> plan = Plan(*again, request.num_consumers());
    if (plan.ok()) {
      plan->set_transform_set(request.transform_set().empty() ? std::string(kDefaultTransformSet)
                                                              : request.transform_set());
    }
    reactor->Answer(std::move(plan));
  });
  if (!s.ok()) reactor->Refuse(s);
  return reactor;
}

Result<ResolvedOptions> DataService::ResolveForPlan(const v1::StreamRequest& request) const {
  ASSIGN_OR_RETURN(const v1::DatasetConfig* dataset, FindDataset(config_, request.dataset()));
  ASSIGN_OR_RETURN(v1::PipelineOptions options, PipelineForRequest(config_, *dataset, request));
  ASSIGN_OR_RETURN(ResolvedOptions resolved, ResolveOptions(options, request.num_consumers()));
  const v1::Position& p = request.start_position();
  RETURN_IF_ERROR(CheckResumePosition(
      resolved, BatchPosition{p.epoch(), p.index(), p.end_record(), p.shuffle_bytes()}));
  return resolved;
}

Result<v1::StreamPlan> DataService::Plan(const ResolvedOptions& resolved, int num_consumers) {
  ASSIGN_OR_RETURN(SharePlan plan, PlanSharesForFiles(resolved));
  v1::StreamPlan out;
  out.set_batch_size(resolved.batch_size);
  out.set_image_height(resolved.height);
  out.set_image_width(resolved.width);
  out.set_mode(resolved.mode == PipelineMode::kEval ? v1::MODE_EVAL : v1::MODE_TRAIN);
  out.set_dtype(static_cast<v1::DType>(resolved.transforms.output.dtype));
  out.set_layout(static_cast<v1::Layout>(resolved.transforms.output.layout));
  out.set_mixes_labels(resolved.transforms.mixes_labels());
  DescribeFeatures(resolved.features, out.mutable_features());
  out.set_unlabeled(resolved.unlabeled);
  out.set_epochs(resolved.epochs);
  out.mutable_shard()->set_index(resolved.shard_index);
  out.mutable_shard()->set_count(resolved.shard_count);
  out.mutable_shard()->set_consumers(resolved.shard_consumers);
  switch (resolved.equal_shares) {
    case EqualShares::kDrop:
      out.set_equal_shares(v1::EQUAL_SHARES_DROP);
      break;
    case EqualShares::kPad:
      out.set_equal_shares(v1::EQUAL_SHARES_PAD);
      break;
    case EqualShares::kOff:
      out.set_equal_shares(v1::EQUAL_SHARES_OFF);
      break;
  }
  out.set_records_per_epoch(plan.records_per_epoch);
  // In lockstep the plan is the job's, and each consumer gets batches i with i mod N its index.
  out.set_num_consumers(num_consumers);
  out.set_batches_per_epoch(plan.batches_per_epoch / std::max(1, num_consumers));
  out.set_min_shard_records(plan.min_shard_records);
  out.set_max_shard_records(plan.max_shard_records);
  return out;
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* DataService::StreamBatches(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* raw) {
  Status auth = Authenticate(*context);
  if (!auth.ok()) return new RefusedStream(auth);
  v1::StreamRequest request;
  {
    grpc::ByteBuffer copy(*raw);
    grpc::ProtoBufferReader reader(&copy);
    if (!request.ParseFromZeroCopyStream(&reader)) {
      return new RefusedStream(InvalidArgument("StreamRequest does not parse"));
    }
  }
  Result<const v1::DatasetConfig*> dataset = FindDataset(config_, request.dataset());
  if (!dataset.ok()) return new RefusedStream(dataset.status());
  Result<v1::PipelineOptions> options = PipelineForRequest(config_, **dataset, request);
  if (!options.ok()) return new RefusedStream(options.status());
  BatchPosition start{request.start_position().epoch(), request.start_position().index(),
                      request.start_position().end_record(),
                      request.start_position().shuffle_bytes()};
  auto* stream = new BatchWriter(this, context, registry_, &watcher_, request.consumer_index());
  const std::string dataset_name = request.dataset();
  Status deferred = Defer(
      stream, CallKind::kStream, dataset_name,
      [this, stream, context, request = std::move(request), options = std::move(*options), start] {
        if (stream->ended()) return;  // cancelled or drained while queued: no job to open
        stream->Opened(registry_->Open(request.dataset(), request.job_name(), options, start,
                                       request.record_ids(), request.num_consumers()),
                       [&](const ResolvedOptions& resolved) -> std::shared_ptr<SharedSegment> {
                         if (!request.shared_memory()) return nullptr;
                         return SharedSegmentFor(*context, request, resolved);
                       });
      });
  if (!deferred.ok()) stream->Refuse(deferred);
  return stream;
}

Status DataService::Defer(StartingCall* call, CallKind kind, const std::string& dataset,
                          std::function<void()> start) {
  {
    std::lock_guard<std::mutex> lock(starts_mu_);
    if (drain_) return *drain_;
    if (kind == CallKind::kStream && starting_streams_ >= config_.max_streams()) {
      return ResourceExhausted(
          "this server already has " + std::to_string(config_.max_streams()) +
          " stream starts waiting for their files (its max_streams); try again later or another "
          "server");
    }
    if (kind == CallKind::kDescribe && starting_describes_ >= kMaxDescribesInFlight) {
      return ResourceExhausted("this server already has " + std::to_string(kMaxDescribesInFlight) +
                               " DescribeStream calls waiting for their files; try again later");
    }
    call->Hold();  // the start's, before a drain can find the call
    starting_.emplace(call, kind);
    ++(kind == CallKind::kStream ? starting_streams_ : starting_describes_);
  }
  auto done = [this, call] {
    Unregister(call);
    call->Release();
  };
  // Keyed by data set: a data set whose files hang holds at most kStartThreads - 1 threads.
  if (executor_.TrySubmit(dataset, call, [start = std::move(start), done] {
        start();
        done();
      })) {
    return Status::OK();
  }
  done();  // not the last hold: the call's remains
  // Not reached while the counts above are within their bounds (the executor's bound leaves
  // room for them and for the starts of ended calls still running): a backstop.
  return ResourceExhausted("this server's start threads have " +
                           std::to_string(executor_.max_tasks()) +
                           " tasks queued or running; try again later or another server");
}

void DataService::Unregister(StartingCall* call) {
  std::lock_guard<std::mutex> lock(starts_mu_);
  auto it = starting_.find(call);
  if (it == starting_.end()) return;
  --(it->second == CallKind::kStream ? starting_streams_ : starting_describes_);
  starting_.erase(it);
}

void DataService::Ended(StartingCall* call) {
  Unregister(call);
  if (executor_.Withdraw(call)) call->Release();  // the start's hold: it will never run
}

int DataService::starts_in_flight() const {
  std::lock_guard<std::mutex> lock(starts_mu_);
  return starting_streams_ + starting_describes_;
}

void DataService::Drain(const Status& status) {
  std::vector<StartingCall*> calls;
  {
    std::lock_guard<std::mutex> lock(starts_mu_);
    drain_ = status;
    for (const auto& [call, kind] : starting_) {
      call->Hold();
      calls.push_back(call);
    }
  }
  for (StartingCall* call : calls) {
    call->Refuse(status);
    call->Release();
  }
}

bool DataService::WaitForStarts(std::chrono::steady_clock::time_point deadline) {
  return executor_.WaitIdle(deadline);
}

std::shared_ptr<SharedSegment> DataService::SharedSegmentFor(grpc::CallbackServerContext& context,
                                                             const v1::StreamRequest& request,
                                                             const ResolvedOptions& options) {
  if (config_.disable_shared_memory() || !IsSameHostPeer(context.peer())) return nullptr;
  const int slots = request.shared_memory_slots();
  const uint64_t slot_bytes = options.batch_image_bytes();
  if (slots < 2 || slots > SharedSegment::kMaxSlots) return nullptr;
  // Reserved (against max_shared_memory_bytes) before it exists.
  const int64_t bytes = static_cast<int64_t>(SharedSegment::BytesFor(slots, slot_bytes));
  if (!registry_->ReserveSharedMemory(bytes)) return nullptr;
  Result<std::shared_ptr<SharedSegment>> segment = SharedSegment::Create(slots, slot_bytes);
  if (!segment.ok()) {
    registry_->ReleaseSharedMemory(bytes);
    // Ordinary batches still work; say once why this host's clients do not get shared memory.
    if (!shared_memory_warned_.exchange(true)) {
      std::fprintf(stderr, "sluice serve: shared memory unavailable, sending batches inline: %s\n",
                   segment.status().ToString().c_str());
    }
    return nullptr;
  }
  context.AddInitialMetadata(kSharedSegmentKey, (*segment)->name());
  context.AddInitialMetadata(kSharedAttachKey, (*segment)->attach_key());
  return std::move(*segment);
}

}  // namespace sluice
