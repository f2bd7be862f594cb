// libsluice_client: the C++ client of `sluice serve` (DataService, proto/sluice/v1/service.proto).
//
//   ClientOptions options;
//   options.targets = {"127.0.0.1:50051"};
//   ASSIGN_OR_RETURN(auto client, Client::Create(options));
//   v1::StreamRequest request;
//   request.set_dataset("train");
//   request.set_transform_set("bf16");  // optional: one the dataset offers (DatasetInfo)
//   ASSIGN_OR_RETURN(auto stream, client->Stream(request));
//   ReceivedBatch batch; bool end = false;
//   while (stream->Next(&batch, &end).ok() && !end) Train(batch.images, batch.labels);
//
// A stream reads ahead `prefetch` batches per server on its own thread, into buffers it reuses
// (from ClientOptions::allocator). Take() instead of Next() lends a batch's buffers to the
// consumer until it releases them, so it can hold up to `max_held` batches at once.
// On UNAVAILABLE (server restarted, connection lost), or CANCELLED by a server that is
// shutting down, it reconnects with exponential backoff and
// resumes after the last batch it received, so a deterministic private stream loses and repeats
// nothing. A shared job's stream reconnects with the same request: one of a job's consumers in
// lockstep (StreamRequest.consumer_index / num_consumers) continues with the batches the server
// held for its index. The batches the server wrote before the connection went (any number: in
// flow-control windows, socket buffers or shared-memory slots) are lost with it; such a gap in
// the consumer's share ends the stream with DATA_LOSS naming the positions, since a consumer
// with fewer batches than the others hangs a synchronous trainer (the Python client hands out
// padding batches for them instead). Positions before the stream's first batch are no gap: a
// consumer joining a running job (a restarted trainer) starts wherever the job is. Several
// targets (or a "dns:///host:port" name resolving to several addresses) fan in: one stream per
// server, taken round-robin among those with a batch ready.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "client/wire/batch_wire.h"
#include "client/wire/buffer_allocator.h"
#include "formats/status.h"
#include "sluice/v1/service.pb.h"

namespace sluice {

struct ClientOptions {
  // "HOST:PORT", "unix:PATH", or "dns:///HOST:PORT" (every address it resolves to is a server).
  std::vector<std::string> targets;
  std::string token;           // sent as "authorization: Bearer <token>" when set
  std::string tls_root_certs;  // PEM; set to use TLS (the server's certificate must chain to it)
  int prefetch = 2;            // batches read ahead per server stream
  std::chrono::milliseconds reconnect_initial{100};
  std::chrono::milliseconds reconnect_max{5000};
  // A stream gives up (returning the last UNAVAILABLE) after this long without reaching a server.
  std::chrono::milliseconds reconnect_deadline{60000};
  std::chrono::milliseconds rpc_timeout{10000};  // ListDatasets and GetStats
  // Where batch image buffers come from; null: HeapAllocator(). One that returns page-locked
  // memory (cudaHostAlloc) lets a batch be copied to a device with no staging copy. A failed
  // allocation ends the stream with its status, naming the byte count.
  std::shared_ptr<BufferAllocator> allocator;
  // Batches a consumer may hold at once through Take(), at least 1. Each server stream has
  // prefetch + max_held buffers, allocated as they are first needed.
  int max_held = 4;
  // Ask a server on this host (a unix: target or a loopback address) for its batches' images
  // through shared memory instead of the socket: no socket copies, and the images are read where
  // the server put them (the allocator is not used for them). Falls back to ordinary batches by
  // itself when the server declines or the segment cannot be mapped (e.g. another pid namespace).
  bool shared_memory = true;
  // Stream() of a dataset whose servers each serve a part of it (`sluice serve --shard I/N`)
  // checks that the targets reach every part exactly once, and fails with FAILED_PRECONDITION
  // naming the dataset, the missing and duplicate parts and the targets. True: a warning on
  // stderr instead, and the stream reads the parts it reaches.
  bool allow_partial_fleet = false;
};

class BufferPool;  // client/buffer_pool.h

// A taken batch's claim on its buffers: until the lease is destroyed or Release()d the stream does
// not reuse them, and the batch stays valid, even after its stream and Client are destroyed (the
// buffers are then freed with the last lease). It may be released on any thread; one lease
// object is not itself thread-safe.
class BatchLease {
 public:
  BatchLease() = default;
  ~BatchLease();
  BatchLease(BatchLease&& other) noexcept;
  BatchLease& operator=(BatchLease&& other) noexcept;
  BatchLease(const BatchLease&) = delete;
  BatchLease& operator=(const BatchLease&) = delete;

  // Gives the buffers back; the batch's spans are invalid from here on. No-op when empty.
  void Release() noexcept;
  bool empty() const { return arrays_ == nullptr; }

 private:
  friend class BufferPool;
  BatchLease(std::shared_ptr<BufferPool> pool, BatchArrays* arrays)
      : pool_(std::move(pool)), arrays_(arrays) {}

  std::shared_ptr<BufferPool> pool_;
  BatchArrays* arrays_ = nullptr;
};

// One batch as the stream hands it out. From Next(), the spans stay valid until the next Next()
// or Take() call or the stream's destruction; from Take(), until `lease` goes.
struct ReceivedBatch {
  BatchMeta meta;
  // meta.image_bytes() bytes: meta.n images of dtype() (little-endian), laid out as shape() says.
  // A uint8 NHWC stream (the default) has meta.n × H × W × 3 bytes, as before dtypes existed.
  std::span<const uint8_t> images;
  std::span<const int32_t> labels;  // meta.n; empty for an unlabeled dataset (StreamPlan.unlabeled)
  // Per sample, each meta.n long or empty when the batch does not carry it (service.proto):
  // valid, 1 = real sample, 0 = padding to be ignored (empty: every sample is real); where each
  // sample came from, when the request asked for record_ids: its file (index in the dataset's
  // sorted file list) and its record index in that file.
  std::span<const uint8_t> valid;
  std::span<const int32_t> record_files;
  std::span<const int64_t> record_indexes;
  // Mixup / cutmix (the request's transform set mixes labels: StreamPlan.mixes_labels), each
  // meta.n long, else empty: sample i is label_weights[i] of labels[i] and the rest of
  // mixed_labels[i] (soft label = w·onehot(labels[i]) + (1 - w)·onehot(mixed_labels[i])).
  std::span<const int32_t> mixed_labels;
  std::span<const float> label_weights;
  // The dataset's features (StreamPlan.features, in that order), each for the meta.n samples:
  // typed values (int64s(), floats(), bytes(k)) and each sample's rows (rows_of(i)). Valid as
  // long as the images.
  std::span<const ReceivedFeature> features;
  int server = 0;    // index of the server (resolved target) it came from
  BatchLease lease;  // empty from Next()

  // The feature named `name`, or null.
  const ReceivedFeature* feature(std::string_view name) const {
    for (const ReceivedFeature& f : features) {
      if (f.name == name) return &f;
    }
    return nullptr;
  }
  // The images' element type and layout (StreamRequest.transform_set's output; uint8 NHWC by
  // default).
  DType dtype() const { return meta.dtype; }
  Layout layout() const { return meta.layout; }
  // The images' shape in their layout's order: [N, H, W, 3] (NHWC) or [N, 3, H, W] (NCHW).
  std::array<int64_t, 4> shape() const {
    if (meta.layout == Layout::kNchw) return {meta.n, meta.channels, meta.height, meta.width};
    return {meta.n, meta.height, meta.width, meta.channels};
  }
};

class BatchStream {
 public:
  virtual ~BatchStream() = default;
  // Blocks for the next batch. *end_of_sequence when every server's stream has ended. An error
  // (the server's status and message, or UNAVAILABLE after reconnect_deadline) ends the stream.
  // Releases *batch's lease, if any, and the batch the previous Next() returned, before waiting.
  virtual Status Next(ReceivedBatch* batch, bool* end_of_sequence) = 0;
  // Next(), but the caller owns the batch until batch->lease is destroyed or released, so it may
  // hold several. FailedPrecondition, at once, when it already holds max_held batches of this
  // stream (a Take that waited for one of them would never return).
  virtual Status Take(ReceivedBatch* batch, bool* end_of_sequence) = 0;
  // Reconnections made so far, over all servers.
  virtual int64_t reconnects() const = 0;
  // Batches received so far whose images came through shared memory.
  virtual int64_t shared_memory_batches() const = 0;
  // Records the servers skipped after their streams' last batches (which no batch's
  // meta.skipped_records carries), known as each server's stream ends. Any thread.
  virtual uint64_t skipped_after_last_batch() const = 0;
  // Servers (resolved targets) this stream reads from.
  virtual int servers() const = 0;
};

class Client {
 public:
  virtual ~Client() = default;
  // Resolves dns: targets. InvalidArgument for an empty or malformed target list, or prefetch or
  // max_held below 1.
  static Result<std::unique_ptr<Client>> Create(const ClientOptions& options);

  // From the first server.
  virtual Result<std::vector<v1::DatasetInfo>> ListDatasets() = 0;
  // ListDatasets, but a first server that is not up yet (or reconnecting) is waited for as a
  // stream waits for it: UNAVAILABLE naming the target only after reconnect_deadline.
  virtual Result<std::vector<v1::DatasetInfo>> ListDatasetsWhenReady() = 0;
  virtual Result<v1::Stats> GetStats(const std::string& dataset = "") = 0;
  // Starts one stream per server with this request. A bad request fails here with the server's
  // status (first batch read ahead), not at the first Next(); so does a fleet that does not
  // serve the whole dataset (see allow_partial_fleet), before any stream starts, and a
  // transform_set some server with the dataset does not list (CheckTransformSet: a server that
  // lists none predates sets), or servers whose DatasetInfo differ in labels or features
  // (CheckSameArrays). Every batch then has the first's dtype, layout, mixed labels' and labels'
  // presence and features (names, types, row shapes, raggedness); one that differs fails the
  // stream (FAILED_PRECONDITION naming both servers).
  virtual Result<std::unique_ptr<BatchStream>> Stream(const v1::StreamRequest& request) = 0;
};

// "dns:///host:port" → one "ipv4:a.b.c.d:port" / "ipv6:[..]:port" target per address; other
// targets unchanged.
Result<std::vector<std::string>> ResolveTargets(const std::vector<std::string>& targets);

}  // namespace sluice
