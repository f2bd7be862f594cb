#include "client/server_stream.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <span>
#include <utility>

#include "client/channel.h"
#include "sluice/v1/service.grpc.pb.h"

namespace sluice {
namespace {

constexpr char kStreamMethod[] = "/sluice.v1.DataService/StreamBatches";

// The completion-queue tags of a call's operations.
enum class Op : intptr_t { kStart = 1, kWrite = 2, kRead = 3, kFinish = 4, kMetadata = 5 };

void* Tag(Op op) { return reinterpret_cast<void*>(static_cast<intptr_t>(op)); }

// Waits for the next event: true when it is op's and it succeeded.
bool Await(grpc::CompletionQueue* cq, Op op) {
  void* tag = nullptr;
  bool ok = false;
  return cq->Next(&tag, &ok) && tag == Tag(op) && ok;
}

// Starts the call, sends the request and reads the initial metadata. False when the call ended
// on the way (its status then comes from Finish).
bool StartCall(grpc::GenericClientAsyncReaderWriter* call, grpc::CompletionQueue* cq,
               const v1::StreamRequest& request) {
  std::string bytes;
  request.SerializeToString(&bytes);
  grpc::Slice slice(bytes);
  grpc::ByteBuffer request_buffer(&slice, 1);
  call->StartCall(Tag(Op::kStart));
  if (!Await(cq, Op::kStart)) return false;
  call->WriteLast(request_buffer, grpc::WriteOptions(), Tag(Op::kWrite));
  if (!Await(cq, Op::kWrite)) return false;
  call->ReadInitialMetadata(Tag(Op::kMetadata));
  return Await(cq, Op::kMetadata);
}

}  // namespace

ServerStream::ServerStream(std::string target, const ClientOptions& options,
                           v1::StreamRequest request, std::function<void()> wake)
    : target_(std::move(target)),
      options_(options),
      request_(std::move(request)),
      wake_(std::move(wake)),
      pool_(std::make_shared<BufferPool>(options)) {
  thread_ = std::thread([this] { Run(); });
}

ServerStream::~ServerStream() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    if (context_) context_->TryCancel();
  }
  pool_->Close();
  cv_.notify_all();
  thread_.join();
}

bool ServerStream::TryTake(Item* item, BatchLease* lease, bool* done, Status* final_status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (ready_.empty()) {
      if (finished_) {
        *done = true;
        *final_status = final_;
      }
      return false;
    }
    *item = ready_.front();
    ready_.pop_front();
    delivered_any_ = true;
  }
  *lease = BufferPool::Lease(pool_, item->arrays);
  return true;
}

bool ServerStream::FailedEarly(Status* error) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!finished_ || !ready_.empty() || final_.ok() || delivered_any_) return false;
  *error = final_;
  return true;
}

bool ServerStream::started() {
  std::lock_guard<std::mutex> lock(mu_);
  return !ready_.empty() || finished_;
}

void ServerStream::Run() {
  auto backoff = options_.reconnect_initial;
  auto last_progress = std::chrono::steady_clock::now();
  std::shared_ptr<grpc::Channel> channel = MakeChannel(target_, options_);
  for (;;) {
    bool progressed = false;
    uint64_t trailing_skipped = 0;
    Status s = RunOnce(channel, &progressed, &trailing_skipped);
    if (progressed) {
      last_progress = std::chrono::steady_clock::now();
      backoff = options_.reconnect_initial;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) break;
    }
    // CANCELLED that this client did not ask for (stop_ is false here) comes from a server
    // that is shutting down (a call that raced its drain): as transient as UNAVAILABLE.
    // A lockstep stream's DescribeStream that timed out or was told to try again later is
    // retried like the stream itself: the consumer's share needs its plan.
    const bool transient =
        s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kCancelled ||
        (describe_failed_ &&
         (s.code() == StatusCode::kDeadlineExceeded || s.code() == StatusCode::kResourceExhausted));
    const bool retry =
        transient && std::chrono::steady_clock::now() - last_progress < options_.reconnect_deadline;
    if (!retry) {
      // A resumed call would skip those records again and say so itself: only the call that
      // ends the stream (its end, or an error this client does not retry) adds its trailer.
      skipped_after_last_batch_.fetch_add(trailing_skipped);
      Finish(s.ok() ? Status::OK()
                    : s.WithContext(target_ + (transient ? " (gave up reconnecting)" : "")));
      return;
    }
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, backoff, [this] { return stop_; });
    if (stop_) break;
    backoff = std::min(backoff * 2, options_.reconnect_max);
    ++reconnects_;
  }
  Finish(Status(StatusCode::kCancelled, "stream closed"));
}

void ServerStream::Finish(Status s) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    finished_ = true;
    final_ = std::move(s);
  }
  wake_();
}

v1::StreamRequest ServerStream::NextRequest() const {
  v1::StreamRequest request = request_;
  if (resume_) *request.mutable_start_position() = *resume_;
  if (options_.shared_memory && IsSameHostTarget(target_)) {
    request.set_shared_memory(true);
    // Enough that the server never waits on a slot this client could not give back: the
    // batches read ahead, those the consumer may hold, and the one being decoded.
    request.set_shared_memory_slots(options_.prefetch + options_.max_held + 1);
  }
  return request;
}

std::shared_ptr<SharedSegment> ServerStream::OpenSegment(const grpc::ClientContext& context,
                                                         const v1::StreamRequest& request) const {
  const auto& metadata = context.GetServerInitialMetadata();
  auto name = metadata.find(kSharedSegmentKey);
  auto key = metadata.find(kSharedAttachKey);
  if (name == metadata.end() || key == metadata.end()) return nullptr;
  SharedSegment::Expected expected;
  expected.slots = request.shared_memory_slots();
  expected.max_slot_bytes = SharedSegment::MaxSlotBytesFor(
      request.batch_size(), request.image_height(), request.image_width());
  // Not mapped (a server in another pid namespace, or a segment that fails a check): the key is
  // never written, so the server sends ordinary batches once its attach deadline passes.
  Result<std::shared_ptr<SharedSegment>> opened = SharedSegment::Open(
      std::string(name->second.data(), name->second.size()),
      std::string(key->second.data(), key->second.size()), expected, options_.allocator);
  return opened.ok() ? std::move(*opened) : nullptr;
}

Status ServerStream::RunOnce(const std::shared_ptr<grpc::Channel>& channel, bool* progressed,
                             uint64_t* trailing_skipped) {
  grpc::GenericStub stub(channel);
  describe_failed_ = false;
  if (request_.num_consumers() > 0 && !plan_) {
    // Lockstep: the plan (the job's batches per epoch, its epochs) tells a reconnect's gap
    // apart from the end of an epoch; asked once, before the first call, so that no batch
    // taken from the job waits on it.
    grpc::ClientContext describe;
    AddToken(&describe, options_.token);
    describe.set_deadline(std::chrono::system_clock::now() + options_.rpc_timeout);
    v1::StreamPlan plan;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return Status(StatusCode::kCancelled, "stream closed");
      context_ = &describe;  // Stop cancels it
    }
    const grpc::Status s =
        v1::DataService::NewStub(channel)->DescribeStream(&describe, request_, &plan);
    {
      std::lock_guard<std::mutex> lock(mu_);
      context_ = nullptr;
    }
    if (!s.ok()) {
      describe_failed_ = true;
      return FromGrpc(s).WithContext("DescribeStream, for a lockstep stream's plan");
    }
    plan_ = plan;
  }
  grpc::CompletionQueue cq;
  grpc::ClientContext context;
  AddToken(&context, options_.token);
  const v1::StreamRequest request = NextRequest();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return Status(StatusCode::kCancelled, "stream closed");
    context_ = &context;
  }
  auto call = stub.PrepareCall(&context, kStreamMethod, &cq);
  Status decode_error;
  if (StartCall(call.get(), &cq, request)) {
    std::shared_ptr<SharedSegment> segment;
    if (request.shared_memory()) segment = OpenSegment(context, request);
    decode_error = ReadBatches(call.get(), &cq, &context, segment, progressed);
  }
  grpc::Status status;
  call->Finish(&status, Tag(Op::kFinish));
  void* tag = nullptr;
  bool ok = false;
  cq.Next(&tag, &ok);
  {
    std::lock_guard<std::mutex> lock(mu_);
    context_ = nullptr;
  }
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  if (!decode_error.ok()) return decode_error.WithContext(target_);
  const auto& trailing = context.GetServerTrailingMetadata();
  auto it = trailing.find(kSkippedRecordsKey);
  if (it != trailing.end()) {
    std::from_chars(it->second.data(), it->second.data() + it->second.size(), *trailing_skipped);
  }
  if (status.ok() && request_.num_consumers() > 0 && reconnects_.load() > 0) {
    return CheckLockstepGap(nullptr).WithContext(target_);
  }
  return FromGrpc(status);
}

Status ServerStream::CheckLockstepGap(const BatchMeta* meta) {
  const int64_t n = request_.num_consumers();
  const int64_t index = request_.consumer_index();
  using Pos = std::pair<int64_t, int64_t>;
  std::optional<Pos> here;
  if (meta != nullptr) here = Pos(meta->epoch, meta->index);
  const std::optional<Pos> last = lockstep_last_;
  // No batch yet: where a consumer joins a running job (a restarted trainer) is wherever the job
  // is, so its first batch is taken as it comes, and a stream that ends before one lost none.
  if (!last) return Status::OK();
  if (here && *here == Pos(last->first, last->second + n)) return Status::OK();
  const int64_t job_batches = plan_->batches_per_epoch() * n;
  const Pos expected = last->second + n < job_batches ? Pos(last->first, last->second + n)
                                                      : Pos(last->first + 1, index);
  if (here ? *here == expected : (plan_->epochs() <= 0 || expected.first >= plan_->epochs())) {
    return Status::OK();
  }
  auto name = [](const Pos& p) {
    return "(epoch " + std::to_string(p.first) + ", index " + std::to_string(p.second) + ")";
  };
  std::string missing = name(expected);
  if (here) {
    if (here->second % n != index) {
      return DataLoss("consumer_index " + std::to_string(index) + " of " + std::to_string(n) +
                      " of job '" + request_.job_name() + "': batch " + name(*here) +
                      " is not in this consumer's share");
    }
    if (*here < expected) {
      return DataLoss("consumer_index " + std::to_string(index) + " of " + std::to_string(n) +
                      " of job '" + request_.job_name() + "': batch " + name(*here) +
                      " comes after " + name(*last) +
                      ": the job's run was probably aborted (a consumer away past "
                      "job_linger_seconds) and restarted under the same name, so its positions "
                      "started over");
    }
    missing += " up to before " + name(*here);
  } else {
    missing += " to the end of epoch " + std::to_string(plan_->epochs() - 1);
  }
  return DataLoss("consumer_index " + std::to_string(index) + " of " + std::to_string(n) +
                  " of job '" + request_.job_name() + "': its batches " + missing +
                  " were written to a connection that went; the stream ends rather than give "
                  "this consumer fewer batches than the others");
}

Status ServerStream::ReadBatches(Call* call, grpc::CompletionQueue* cq, grpc::ClientContext* context,
                                 const std::shared_ptr<SharedSegment>& segment, bool* progressed) {
  for (;;) {
    grpc::ByteBuffer in;
    call->Read(&in, Tag(Op::kRead));
    if (!Await(cq, Op::kRead)) return Status::OK();
    BatchArrays* arrays = pool_->Acquire();
    if (arrays == nullptr) return Status::OK();  // stopping
    Item item;
    item.arrays = arrays;
    if (Status s = DecodeItem(&in, segment, &item); !s.ok()) {
      pool_->Unacquire(arrays);
      context->TryCancel();
      return s;
    }
    if (request_.num_consumers() > 0) {
      Status gap = Status::OK();
      if (reconnects_.load() > 0) gap = CheckLockstepGap(&item.meta);
      if (!gap.ok()) {
        pool_->Unacquire(arrays);
        context->TryCancel();
        return gap;
      }
      // Only a batch that passed: a check that failed must not make its batch the last one.
      lockstep_last_.emplace(item.meta.epoch, item.meta.index);
    }
    v1::Position next;
    next.set_epoch(item.meta.epoch);
    next.set_index(item.meta.index + 1);
    next.set_end_record(item.meta.end_record);
    next.set_shuffle_bytes(item.meta.shuffle_bytes);
    // A shared job continues where it is; only private streams resume at a position.
    if (request_.job_name().empty()) resume_ = next;
    *progressed = true;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ready_.push_back(item);
    }
    wake_();
  }
}

Status ServerStream::DecodeItem(grpc::ByteBuffer* message,
                                const std::shared_ptr<SharedSegment>& segment, Item* item) {
  BatchArrays* arrays = item->arrays;
  RETURN_IF_ERROR(DecodeBatch(message, &item->meta, arrays));
  if (!arrays->shared) return Status::OK();
  if (segment == nullptr) {
    return DataLoss("the server sent a shared-memory batch without a segment");
  }
  ASSIGN_OR_RETURN(std::span<const uint8_t> bytes,
                   segment->Full(arrays->shared_slot, item->meta.image_bytes()));
  arrays->segment = segment;
  arrays->shared_images = bytes.data();
  ++shared_batches_;
  return Status::OK();
}

}  // namespace sluice
