#include "client/client.h"

#include <netdb.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include "client/wire/shared_segment.h"
#include "formats/file.h"
#include "sluice/v1/service.grpc.pb.h"

namespace sluice {
namespace {

constexpr char kStreamMethod[] = "/sluice.v1.DataService/StreamBatches";

Status FromGrpc(const grpc::Status& s) {
  if (s.ok()) return Status::OK();
  return Status(static_cast<StatusCode>(static_cast<int>(s.error_code())), s.error_message());
}

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& target, const ClientOptions& o) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);  // batches are as large as the server allows
  // A private channel per server stream: streams to one server do not share a connection (and
  // its flow-control window), so each gets its own socket.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  // Large frames and windows: a batch is tens of MB.
  args.SetInt(GRPC_ARG_HTTP2_MAX_FRAME_SIZE, 16 * 1024 * 1024 - 1);
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 64 * 1024 * 1024);
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (o.tls_root_certs.empty()) {
    creds = grpc::InsecureChannelCredentials();
  } else {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = o.tls_root_certs;
    creds = grpc::SslCredentials(ssl);
  }
  return grpc::CreateCustomChannel(target, creds, args);
}

// Gives a shared-memory batch's slot back to the server.
void ReleaseShared(BatchArrays* arrays) {
  if (arrays->segment == nullptr) return;
  arrays->segment->Free(static_cast<int>(arrays->shared_slot));
  arrays->segment.reset();
  arrays->shared_images = nullptr;
}

// The bearer token, when there is one, on every call.
void AddToken(grpc::ClientContext* context, const std::string& token) {
  if (!token.empty()) context->AddMetadata("authorization", "Bearer " + token);
}

}  // namespace

// One server stream's buffers: prefetch + max_held of them. A buffer is free, read ahead (taken
// by the reader thread, not yet leased) or leased to the consumer. Shared by the reader, the
// consumer and every lease, so a lease may outlive the stream; the buffers are freed with the
// last reference.
class BufferPool {
 public:
  explicit BufferPool(const ClientOptions& options) : ahead_limit_(options.prefetch) {
    const int size = options.prefetch + options.max_held;
    slots_.reserve(static_cast<size_t>(size));
    for (int i = 0; i < size; ++i) {
      slots_.emplace_back(options.allocator);
      free_.push_back(&slots_.back());
    }
  }

  // For the reader: blocks until a buffer is free and fewer than `prefetch` are read ahead, so
  // the extra max_held buffers are allocated only when the consumer holds batches. Null once
  // closed.
  BatchArrays* Acquire() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return closed_ || (!free_.empty() && ahead_ < ahead_limit_); });
    if (closed_) return nullptr;
    ++ahead_;
    BatchArrays* arrays = free_.back();
    free_.pop_back();
    return arrays;
  }
  // A buffer the reader acquired and did not fill.
  void Unacquire(BatchArrays* arrays) {
    ReleaseShared(arrays);
    {
      std::lock_guard<std::mutex> lock(mu_);
      --ahead_;
      free_.push_back(arrays);
    }
    cv_.notify_all();
  }
  // Hands a read-ahead buffer to the consumer.
  static BatchLease Lease(std::shared_ptr<BufferPool> pool, BatchArrays* arrays) {
    {
      std::lock_guard<std::mutex> lock(pool->mu_);
      --pool->ahead_;
      ++pool->leased_;
    }
    pool->cv_.notify_all();
    return {std::move(pool), arrays};
  }
  void Return(BatchArrays* arrays) noexcept {
    ReleaseShared(arrays);
    {
      std::lock_guard<std::mutex> lock(mu_);
      --leased_;
      free_.push_back(arrays);
    }
    cv_.notify_all();
  }
  // Wakes and fails a waiting Acquire(), and every later one.
  void Close() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      closed_ = true;
    }
    cv_.notify_all();
  }
  int leased() {
    std::lock_guard<std::mutex> lock(mu_);
    return leased_;
  }

 private:
  const int ahead_limit_;
  std::vector<BatchArrays> slots_;  // never resized: free_ and leases point into it

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<BatchArrays*> free_;  // guarded by mu_
  int ahead_ = 0;                   // guarded by mu_
  int leased_ = 0;                  // guarded by mu_
  bool closed_ = false;             // guarded by mu_
};

BatchLease::~BatchLease() { Release(); }

BatchLease::BatchLease(BatchLease&& other) noexcept
    : pool_(std::move(other.pool_)), arrays_(std::exchange(other.arrays_, nullptr)) {}

BatchLease& BatchLease::operator=(BatchLease&& other) noexcept {
  if (this != &other) {
    Release();
    pool_ = std::move(other.pool_);
    arrays_ = std::exchange(other.arrays_, nullptr);
  }
  return *this;
}

void BatchLease::Release() noexcept {
  if (arrays_ == nullptr) return;
  pool_->Return(std::exchange(arrays_, nullptr));
  pool_.reset();
}

namespace {

// One server's stream: a thread that reads batches into its pool's buffers, `prefetch` ahead,
// reconnecting and resuming on UNAVAILABLE.
class ServerStream {
 public:
  ServerStream(std::string target, const ClientOptions& options, v1::StreamRequest request,
               std::function<void()> wake)
      : target_(std::move(target)),
        options_(options),
        request_(std::move(request)),
        wake_(std::move(wake)),
        pool_(std::make_shared<BufferPool>(options)) {
    thread_ = std::thread([this] { Run(); });
  }
  ~ServerStream() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      if (context_) context_->TryCancel();
    }
    pool_->Close();
    cv_.notify_all();
    thread_.join();
  }

  struct Item {
    BatchMeta meta;
    BatchArrays* arrays = nullptr;
  };

  // Non-blocking: a batch and the lease on its buffers, or the final status (*done), or neither.
  bool TryTake(Item* item, BatchLease* lease, bool* done, Status* final_status) {
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
  // Buffers leased to the consumer.
  int leased() { return pool_->leased(); }
  // The stream's error when it ended before delivering any batch.
  bool FailedEarly(Status* error) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!finished_ || !ready_.empty() || final_.ok() || delivered_any_) return false;
    *error = final_;
    return true;
  }
  // True once a batch has arrived or the stream has finished.
  bool started() {
    std::lock_guard<std::mutex> lock(mu_);
    return !ready_.empty() || finished_;
  }
  int64_t reconnects() const { return reconnects_.load(); }
  int64_t shared_batches() const { return shared_batches_.load(); }

 private:
  void Run() {
    auto backoff = options_.reconnect_initial;
    auto last_progress = std::chrono::steady_clock::now();
    std::shared_ptr<grpc::Channel> channel = MakeChannel(target_, options_);
    for (;;) {
      bool progressed = false;
      Status s = RunOnce(channel, &progressed);
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
      const bool transient =
          s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kCancelled;
      const bool retry = transient && std::chrono::steady_clock::now() - last_progress <
                                          options_.reconnect_deadline;
      if (!retry) {
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

  void Finish(Status s) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      finished_ = true;
      final_ = std::move(s);
    }
    wake_();
  }

  // One call. Returns its final status; *progressed when a batch arrived.
  Status RunOnce(const std::shared_ptr<grpc::Channel>& channel, bool* progressed) {
    grpc::GenericStub stub(channel);
    grpc::CompletionQueue cq;
    grpc::ClientContext context;
    AddToken(&context, options_.token);
    v1::StreamRequest request = request_;
    if (resume_) *request.mutable_start_position() = *resume_;
    if (options_.shared_memory && IsSameHostTarget(target_)) {
      request.set_shared_memory(true);
      // Enough that the server never waits on a slot this client could not give back: the
      // batches read ahead, those the consumer may hold, and the one being decoded.
      request.set_shared_memory_slots(options_.prefetch + options_.max_held + 1);
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return Status(StatusCode::kCancelled, "stream closed");
      context_ = &context;
    }
    std::string bytes;
    request.SerializeToString(&bytes);
    grpc::Slice slice(bytes);
    grpc::ByteBuffer request_buffer(&slice, 1);
    auto call = stub.PrepareCall(&context, kStreamMethod, &cq);
    void* tag = nullptr;
    bool ok = false;
    auto step = [&](int id) {
      return cq.Next(&tag, &ok) && tag == reinterpret_cast<void*>(static_cast<intptr_t>(id)) && ok;
    };
    auto t = [](int id) { return reinterpret_cast<void*>(static_cast<intptr_t>(id)); };
    call->StartCall(t(1));
    bool alive = step(1);
    if (alive) {
      call->WriteLast(request_buffer, grpc::WriteOptions(), t(2));
      alive = step(2);
    }
    // A server that agreed to shared memory names the segment in its initial metadata. One this
    // process cannot map is left alone: the server then sends ordinary batches.
    std::shared_ptr<SharedSegment> segment;
    if (alive) {
      call->ReadInitialMetadata(t(5));
      alive = step(5);
    }
    if (alive && request.shared_memory()) {
      const auto& metadata = context.GetServerInitialMetadata();
      if (auto it = metadata.find(kSharedSegmentKey); it != metadata.end()) {
        Result<std::shared_ptr<SharedSegment>> opened =
            SharedSegment::Open(std::string(it->second.data(), it->second.size()),
                                options_.allocator);
        if (opened.ok()) segment = std::move(*opened);
      }
    }
    Status decode_error;
    while (alive) {
      grpc::ByteBuffer in;
      call->Read(&in, t(3));
      if (!step(3)) break;
      BatchArrays* arrays = pool_->Acquire();
      if (arrays == nullptr) break;  // stopping
      Item item;
      item.arrays = arrays;
      decode_error = DecodeBatch(&in, &item.meta, arrays);
      if (decode_error.ok() && arrays->shared) {
        if (segment == nullptr) {
          decode_error = DataLoss("the server sent a shared-memory batch without a segment");
        } else {
          Result<std::span<const uint8_t>> bytes =
              segment->Full(arrays->shared_slot, item.meta.image_bytes());
          if (bytes.ok()) {
            arrays->segment = segment;
            arrays->shared_images = bytes->data();
            ++shared_batches_;
          } else {
            decode_error = bytes.status();
          }
        }
      }
      if (!decode_error.ok()) {
        pool_->Unacquire(arrays);
        context.TryCancel();
        break;
      }
      v1::Position next;
      next.set_epoch(item.meta.epoch);
      next.set_index(item.meta.index + 1);
      next.set_end_record(item.meta.end_record);
      // A shared job continues where it is; only private streams resume at a position.
      if (request_.job_name().empty()) resume_ = next;
      *progressed = true;
      {
        std::lock_guard<std::mutex> lock(mu_);
        ready_.push_back(item);
      }
      wake_();
    }
    grpc::Status status;
    call->Finish(&status, t(4));
    cq.Next(&tag, &ok);
    {
      std::lock_guard<std::mutex> lock(mu_);
      context_ = nullptr;
    }
    cq.Shutdown();
    while (cq.Next(&tag, &ok)) {
    }
    if (!decode_error.ok()) return decode_error.WithContext(target_);
    return FromGrpc(status);
  }

  const std::string target_;
  const ClientOptions& options_;
  const v1::StreamRequest request_;
  const std::function<void()> wake_;
  std::optional<v1::Position> resume_;  // reader thread only
  const std::shared_ptr<BufferPool> pool_;
  std::atomic<int64_t> reconnects_{0};
  std::atomic<int64_t> shared_batches_{0};

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> ready_;           // guarded by mu_; read ahead in pool_'s buffers
  grpc::ClientContext* context_ = nullptr;  // the call in progress; guarded by mu_
  bool stop_ = false;                // guarded by mu_
  bool finished_ = false;            // guarded by mu_
  bool delivered_any_ = false;       // guarded by mu_
  Status final_;                     // guarded by mu_
  std::thread thread_;
};

class FanInStream : public BatchStream {
 public:
  FanInStream(const std::vector<std::string>& targets, const ClientOptions& options,
              const v1::StreamRequest& request)
      : options_(options) {
    for (size_t i = 0; i < targets.size(); ++i) {
      streams_.push_back(
          std::make_unique<ServerStream>(targets[i], options_, request, [this] { Wake(); }));
    }
    done_.assign(streams_.size(), false);
  }
  ~FanInStream() override {
    kept_.Release();
    streams_.clear();
  }

  // Waits until every server has answered (a batch or its final status).
  void WaitStarted() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] {
      return std::all_of(streams_.begin(), streams_.end(), [](auto& s) { return s->started(); });
    });
  }

  Status Next(ReceivedBatch* batch, bool* end_of_sequence) override {
    kept_.Release();
    batch->lease.Release();
    RETURN_IF_ERROR(Get(batch, end_of_sequence));
    kept_ = std::move(batch->lease);
    return Status::OK();
  }

  Status Take(ReceivedBatch* batch, bool* end_of_sequence) override {
    kept_.Release();
    batch->lease.Release();
    if (!final_.ok()) return final_;
    int held = 0;
    for (const auto& s : streams_) held += s->leased();
    if (held >= options_.max_held) {
      return FailedPrecondition("holding " + std::to_string(held) +
                                " batches; release one or raise ClientOptions::max_held");
    }
    return Get(batch, end_of_sequence);
  }

  int64_t reconnects() const override {
    int64_t n = 0;
    for (const auto& s : streams_) n += s->reconnects();
    return n;
  }
  int64_t shared_memory_batches() const override {
    int64_t n = 0;
    for (const auto& s : streams_) n += s->shared_batches();
    return n;
  }
  int servers() const override { return static_cast<int>(streams_.size()); }

  // The first final status among servers that ended in error, if any (for Stream()).
  Status FirstError() {
    for (auto& s : streams_) {
      Status error;
      if (s->FailedEarly(&error)) return error;
    }
    return Status::OK();
  }

 private:
  // Blocks for the next batch, with the lease on its buffers in batch->lease.
  Status Get(ReceivedBatch* batch, bool* end_of_sequence) {
    *end_of_sequence = false;
    if (!final_.ok()) return final_;
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      bool all_done = true;
      for (size_t k = 0; k < streams_.size(); ++k) {
        const size_t i = (next_ + k) % streams_.size();
        if (done_[i]) continue;
        ServerStream::Item item;
        bool done = false;
        Status s;
        if (streams_[i]->TryTake(&item, &batch->lease, &done, &s)) {
          next_ = (i + 1) % streams_.size();
          batch->meta = item.meta;
          batch->images = {item.arrays->image_data(), item.meta.image_bytes()};
          batch->labels = {item.arrays->labels.data(), item.arrays->labels.size()};
          batch->server = static_cast<int>(i);
          return Status::OK();
        }
        if (done) {
          done_[i] = true;
          if (!s.ok()) {
            final_ = s;
            return final_;
          }
          continue;
        }
        all_done = false;
      }
      if (all_done) {
        *end_of_sequence = true;
        return Status::OK();
      }
      cv_.wait_for(lock, std::chrono::milliseconds(100));
    }
  }

  // A server stream has something new. Taking mu_ orders this after a consumer's check of the
  // streams, so a consumer about to wait cannot miss the notification.
  void Wake() {
    { std::lock_guard<std::mutex> lock(mu_); }
    cv_.notify_all();
  }

  const ClientOptions options_;
  std::vector<std::unique_ptr<ServerStream>> streams_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<bool> done_;  // consumer only
  size_t next_ = 0;         // consumer only
  BatchLease kept_;         // the batch Next() returned last; consumer only
  Status final_;
};

}  // namespace

Result<std::vector<std::string>> ResolveTargets(const std::vector<std::string>& targets) {
  if (targets.empty())
    return InvalidArgument("no target: give HOST:PORT, unix:PATH or dns:///HOST:PORT");
  std::vector<std::string> out;
  for (const std::string& t : targets) {
    if (t.empty()) return InvalidArgument("empty target");
    if (!t.starts_with("dns:")) {
      out.push_back(t);
      continue;
    }
    std::string name = t.substr(4);
    while (name.starts_with("/")) name.erase(0, 1);
    const size_t colon = name.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == name.size()) {
      return InvalidArgument("target '" + t + "': expected dns:///HOST:PORT");
    }
    std::string host = name.substr(0, colon);
    const std::string port = name.substr(colon + 1);
    if (host.size() > 2 && host.front() == '[' && host.back() == ']')
      host = host.substr(1, host.size() - 2);
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    if (int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0) {
      return Unavailable("cannot resolve '" + t + "': " + gai_strerror(rc));
    }
    std::vector<std::string> resolved;
    for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
      char ip[NI_MAXHOST];
      if (getnameinfo(a->ai_addr, a->ai_addrlen, ip, sizeof(ip), nullptr, 0, NI_NUMERICHOST) != 0) {
        continue;
      }
      std::string target = a->ai_family == AF_INET6 ? "ipv6:[" + std::string(ip) + "]:" + port
                                                    : "ipv4:" + std::string(ip) + ":" + port;
      if (std::find(resolved.begin(), resolved.end(), target) == resolved.end()) {
        resolved.push_back(target);
      }
    }
    freeaddrinfo(res);
    if (resolved.empty()) return Unavailable("'" + t + "' resolves to no address");
    out.insert(out.end(), resolved.begin(), resolved.end());
  }
  return out;
}

namespace {

class GrpcClient : public Client {
 public:
  GrpcClient(ClientOptions options, std::vector<std::string> targets)
      : options_(std::move(options)), targets_(std::move(targets)) {
    stub_ = v1::DataService::NewStub(MakeChannel(targets_[0], options_));
  }

  Result<std::vector<v1::DatasetInfo>> ListDatasets() override {
    grpc::ClientContext context;
    Prepare(&context);
    v1::ListDatasetsResponse response;
    grpc::Status s = stub_->ListDatasets(&context, v1::ListDatasetsRequest(), &response);
    if (!s.ok()) return FromGrpc(s).WithContext(targets_[0]);
    return std::vector<v1::DatasetInfo>(response.datasets().begin(), response.datasets().end());
  }

  Result<v1::Stats> GetStats(const std::string& dataset) override {
    grpc::ClientContext context;
    Prepare(&context);
    v1::GetStatsRequest request;
    request.set_dataset(dataset);
    v1::Stats response;
    grpc::Status s = stub_->GetStats(&context, request, &response);
    if (!s.ok()) return FromGrpc(s).WithContext(targets_[0]);
    return response;
  }

  Result<std::unique_ptr<BatchStream>> Stream(const v1::StreamRequest& request) override {
    auto stream = std::make_unique<FanInStream>(targets_, options_, request);
    stream->WaitStarted();
    RETURN_IF_ERROR(stream->FirstError());
    return std::unique_ptr<BatchStream>(std::move(stream));
  }

 private:
  void Prepare(grpc::ClientContext* context) {
    context->set_deadline(std::chrono::system_clock::now() + options_.rpc_timeout);
    AddToken(context, options_.token);
  }

  const ClientOptions options_;
  const std::vector<std::string> targets_;
  std::unique_ptr<v1::DataService::Stub> stub_;
};

}  // namespace

Result<std::unique_ptr<Client>> Client::Create(const ClientOptions& options) {
  ASSIGN_OR_RETURN(std::vector<std::string> targets, ResolveTargets(options.targets));
  if (options.prefetch < 1) return InvalidArgument("prefetch must be at least 1");
  if (options.max_held < 1) return InvalidArgument("max_held must be at least 1");
  ClientOptions o = options;
  if (o.allocator == nullptr) o.allocator = HeapAllocator();
  return std::unique_ptr<Client>(new GrpcClient(std::move(o), std::move(targets)));
}

}  // namespace sluice
