// The BatchStream a Client hands out (internal to client/): one ServerStream per server, taken
// round-robin among those with a batch ready.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "client/client.h"
#include "client/server_stream.h"
#include "formats/dtype.h"
#include "formats/status.h"
#include "sluice/v1/service.pb.h"

namespace sluice {

// Thread-safety: one consumer thread calls Next/Take (and the constructor's caller WaitStarted
// and FirstError before handing the stream out); the server streams' threads only Wake() it.
class FanInStream : public BatchStream {
 public:
  // Starts one ServerStream per target with this request.
  FanInStream(const std::vector<std::string>& targets, const ClientOptions& options,
              const v1::StreamRequest& request);
  ~FanInStream() override;

  // Waits until every server has answered (a batch or its final status).
  void WaitStarted();
  // The first final status among servers that ended in error, if any (for Client::Stream()).
  Status FirstError();

  Status Next(ReceivedBatch* batch, bool* end_of_sequence) override;
  Status Take(ReceivedBatch* batch, bool* end_of_sequence) override;
  int64_t reconnects() const override;
  int64_t shared_memory_batches() const override;
  uint64_t skipped_after_last_batch() const override;
  int servers() const override { return static_cast<int>(streams_.size()); }

  // CheckFormat's terms: what a batch shows of its stream's output. Tri-state: 1 yes, 0 no, -1
  // not shown (a batch of 0 samples has no labels, mixed labels or row_lengths to show).
  struct FeatureFormat {
    std::string name;
    FeatureType type;
    std::vector<int32_t> row_shape;
    int ragged;
  };
  struct Format {
    DType dtype;
    Layout layout;
    int mixed_labels;
    int labels;
    std::vector<FeatureFormat> features;
  };
  static Format FormatOf(const ReceivedBatch& batch);
  // Whether a and b can be one stream's (what either does not show agrees with anything); if so,
  // fills what *a does not show from b, else leaves *a as it was.
  static bool Merge(Format* a, const Format& b);
  // "uint8 NHWC without mixed labels, unlabeled, features [cls int64[] ragged]".
  static std::string FormatName(const Format& f);

 private:
  // Blocks for the next batch, with the lease on its buffers in batch->lease.
  Status Get(ReceivedBatch* batch, bool* end_of_sequence);
  // FailedPrecondition (kept as the stream's final status), releasing the batch, when `batch` from
  // streams_[server] differs from the batches before in dtype, layout, mixed labels' or labels'
  // presence, or its features' names, types, row shapes and raggedness (a batch of 0 samples
  // shows neither labels nor raggedness: those agree with anything).
  Status CheckFormat(ReceivedBatch* batch, size_t server);
  // A server stream has something new. Taking mu_ orders this after a consumer's check of the
  // streams, so a consumer about to wait cannot miss the notification.
  void Wake();

  const ClientOptions options_;
  // Before streams_: a stream's reader thread calls Wake() until the stream is destroyed.
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<ServerStream>> streams_;
  std::vector<bool> done_;  // consumer only
  size_t next_ = 0;         // consumer only
  BatchLease kept_;         // the batch Next() returned last; consumer only
  Status final_;
  // The first batch's output (filled in by later ones where it showed nothing) and its server:
  // every later batch must match it, or the stream fails (servers whose transform sets, features
  // or labels differ would mix outputs within a training run).
  std::optional<Format> format_;  // consumer only
  size_t format_server_ = 0;      // consumer only
};

}  // namespace sluice
