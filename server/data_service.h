// The gRPC face of the server: DataService (proto/sluice/v1/service.proto) on the callback API,
// a thin adapter over JobRegistry and Job. Each StreamBatches call is a write reactor with one
// write in flight; it asks its job for the next batch when the last write completes, and the
// batch's image bytes go out as a slice of the pooled buffer (no copy), returned to the pool when
// gRPC releases the slice. No thread per stream, and no reaction ever blocks: what may wait on
// files (opening a stream's job, DescribeStream's record counts) runs on a BlockingExecutor, and
// its call is answered from there.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "server/blocking_executor.h"
#include "server/job_registry.h"
#include "server/slot_watcher.h"
#include "sluice/v1/server_config.pb.h"
#include "sluice/v1/service.grpc.pb.h"

namespace sluice {

class SharedSegment;
class StartingCall;

using DataServiceBase = v1::DataService::WithCallbackMethod_ListDatasets<
    v1::DataService::WithRawCallbackMethod_StreamBatches<
        v1::DataService::WithCallbackMethod_GetStats<
            v1::DataService::WithCallbackMethod_DescribeStream<v1::DataService::Service>>>>;

class DataService final : public DataServiceBase {
 public:
  // token: the bearer token clients must send; empty = none. config and registry outlive this.
  DataService(const v1::ServerConfig& config, JobRegistry* registry, std::string token);
  // REQUIRES: the gRPC server serving this has stopped (Wait returned). Waits for the starts in
  // flight (see WaitForStarts).
  ~DataService();

  grpc::ServerUnaryReactor* ListDatasets(grpc::CallbackServerContext* context,
                                         const v1::ListDatasetsRequest* request,
                                         v1::ListDatasetsResponse* response) override;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* StreamBatches(
      grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) override;
  grpc::ServerUnaryReactor* GetStats(grpc::CallbackServerContext* context,
                                     const v1::GetStatsRequest* request,
                                     v1::Stats* response) override;
  // Resolves the request as StreamBatches does (the same refusals) and plans its epochs from the
  // files' record counts (cached process-wide, so repeat calls read no file).
  grpc::ServerUnaryReactor* DescribeStream(grpc::CallbackServerContext* context,
                                           const v1::StreamRequest* request,
                                           v1::StreamPlan* response) override;

  // The server is draining: streams whose job is still being opened, and DescribeStream calls
  // still counting, end now with `status`, and new ones are refused with it. (Running streams
  // end through JobRegistry::StopAll.) Not on a gRPC thread.
  void Drain(const Status& status);
  // Waits until no stream start or DescribeStream work is queued or running, or until deadline;
  // whether none is. A start blocked in the kernel (a FIFO, a hung network file system) may never
  // return: a server that gets false cannot be destroyed and exits without it.
  bool WaitForStarts(std::chrono::steady_clock::time_point deadline);
  // Stream starts and DescribeStream calls queued or running.
  int starts_in_flight() const { return executor_.busy(); }

  // Threads that open jobs and count records; a fixed few: enough that one slow file does not
  // hold every start, few enough not to compete with the decode threads.
  static constexpr int kStartThreads = 4;

 private:
  // UNAUTHENTICATED unless the call carries exactly one "authorization: Bearer <token>".
  Status Authenticate(const grpc::CallbackServerContext& context) const;
  // DescribeStream's answer, or why StreamBatches would refuse the request (but its token). May
  // block (it counts the files' records): on the executor only.
  Result<v1::StreamPlan> Plan(const v1::StreamRequest& request) const;
  // Runs `start` for call on the executor, call registered for Drain until it returns. The drain
  // status, or ResourceExhausted when max_streams starts are already queued or running.
  Status Defer(StartingCall* call, std::function<void()> start);
  // A shared-memory segment for a stream that asked for one, named in the call's initial
  // metadata; null (ordinary batches) when shared memory is off, the peer is not on this host,
  // the slots asked for are out of bounds or too large together, or memory has no room.
  std::shared_ptr<SharedSegment> SharedSegmentFor(grpc::CallbackServerContext& context,
                                                  const v1::StreamRequest& request,
                                                  const ResolvedOptions& options);

  const v1::ServerConfig& config_;
  JobRegistry* const registry_;
  const std::string token_;
  SlotWatcher watcher_;
  std::atomic<bool> shared_memory_warned_{false};
  mutable std::mutex starts_mu_;
  // Calls whose start is queued or running (each held by it); guarded by starts_mu_.
  std::set<StartingCall*> starting_;
  std::optional<Status> drain_;  // Drain's status; guarded by starts_mu_
  // Last: destroyed (its queued starts run, its threads joined) before what the starts use.
  BlockingExecutor executor_;
};

// Our Status as a grpc::Status (the codes are the same numbers).
grpc::Status ToGrpc(const Status& s);

}  // namespace sluice
