// One server's stream of a BatchStream (internal to client/): a thread that reads batches into
// its pool's buffers, `prefetch` ahead, reconnecting and resuming on UNAVAILABLE.
#pragma once

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "client/buffer_pool.h"
#include "client/client.h"
#include "client/wire/batch_wire.h"
#include "client/wire/shared_segment.h"
#include "formats/status.h"
#include "sluice/v1/service.pb.h"

namespace sluice {

class ServerStream {
 public:
  // Starts the reader thread. `wake` is called (on that thread, holding no lock) whenever a batch
  // arrives or the stream finishes. options must outlive the stream.
  ServerStream(std::string target, const ClientOptions& options, v1::StreamRequest request,
               std::function<void()> wake);
  // Cancels the call in progress and joins the reader.
  ~ServerStream();
  ServerStream(const ServerStream&) = delete;
  ServerStream& operator=(const ServerStream&) = delete;

  const std::string& target() const { return target_; }

  struct Item {
    BatchMeta meta;
    BatchArrays* arrays = nullptr;
  };

  // Non-blocking: a batch and the lease on its buffers, or the final status (*done), or neither.
  bool TryTake(Item* item, BatchLease* lease, bool* done, Status* final_status);
  // Buffers leased to the consumer.
  int leased() { return pool_->leased(); }
  // The stream's error when it ended before delivering any batch.
  bool FailedEarly(Status* error);
  // True once a batch has arrived or the stream has finished.
  bool started();
  int64_t reconnects() const { return reconnects_.load(); }
  int64_t shared_batches() const { return shared_batches_.load(); }
  uint64_t skipped_after_last_batch() const { return skipped_after_last_batch_.load(); }

 private:
  using Call = grpc::GenericClientAsyncReaderWriter;

  // The reader thread: calls until the stream ends, fails for good or is stopped.
  void Run();
  void Finish(Status s);
  // One call. Returns its final status; *progressed when a batch arrived.
  // *trailing_skipped: the call's trailing count of records skipped after its last batch (0
  // when absent); Run() adds it only for a call it does not resume.
  Status RunOnce(const std::shared_ptr<grpc::Channel>& channel, bool* progressed,
                 uint64_t* trailing_skipped);
  // The request of the next call: resumed where the last one stopped, asking for shared memory
  // when the server is on this host.
  v1::StreamRequest NextRequest() const;
  // The segment a server that agreed to shared memory named in its initial metadata; null when
  // it named none or this process cannot map it (the server then sends ordinary batches).
  std::shared_ptr<SharedSegment> OpenSegment(const grpc::ClientContext& context,
                                             const v1::StreamRequest& request) const;
  // Reads batches into ready_ until the call ends, the pool closes or a batch is bad (the call
  // is then cancelled and the error returned).
  Status ReadBatches(Call* call, grpc::CompletionQueue* cq, grpc::ClientContext* context,
                     const std::shared_ptr<SharedSegment>& segment, bool* progressed);
  // Lockstep, after a reconnect: DataLoss naming the positions of this consumer's share that
  // are missing between the last batch received and `meta` (written by the server to a
  // connection that went), or, with `meta` null at the stream's end, after the last batch;
  // nothing before the first batch. Uses plan_, asked for before the stream's first call.
  Status CheckLockstepGap(const BatchMeta* meta);
  // Decodes one message into *item (its arrays already acquired), its images found in segment
  // when the server sent them through shared memory.
  Status DecodeItem(grpc::ByteBuffer* message, const std::shared_ptr<SharedSegment>& segment,
                    Item* item);

  const std::string target_;
  const ClientOptions& options_;
  const v1::StreamRequest request_;
  const std::function<void()> wake_;
  std::optional<v1::Position> resume_;  // reader thread only
  // Lockstep: (epoch, index) of the last batch received, and the stream's plan once asked for;
  // reader thread only.
  std::optional<std::pair<int64_t, int64_t>> lockstep_last_;
  std::optional<v1::StreamPlan> plan_;
  bool describe_failed_ = false;  // the last RunOnce failed in its DescribeStream; reader only
  const std::shared_ptr<BufferPool> pool_;
  std::atomic<int64_t> reconnects_{0};
  std::atomic<int64_t> shared_batches_{0};
  // From the trailing metadata of the call that ended the stream (kSkippedRecordsKey).
  std::atomic<uint64_t> skipped_after_last_batch_{0};

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> ready_;                  // guarded by mu_; read ahead in pool_'s buffers
  grpc::ClientContext* context_ = nullptr;  // the call in progress; guarded by mu_
  bool stop_ = false;                       // guarded by mu_
  bool finished_ = false;                   // guarded by mu_
  bool delivered_any_ = false;              // guarded by mu_
  Status final_;                            // guarded by mu_
  std::thread thread_;
};

}  // namespace sluice
