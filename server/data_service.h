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
#include <map>
#include <memory>
#include <mutex>
#include <optional>
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
  // Resolves the request as StreamBatches does (the same refusals, answered at once on the gRPC
  // thread) and plans its epochs from the files' record counts (cached process-wide, so repeat
  // calls read no file) on the start threads.
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
  // Stream starts and DescribeStream calls whose call is on and whose work is queued or running
  // (a call that ended is not counted, though its start may still be running).
  int starts_in_flight() const;
  // Tasks queued or running on the start threads, those of ended calls included.
  int start_tasks() const { return executor_.busy(); }

  // Threads that open jobs and count records; a fixed few: enough that one slow file does not
  // hold every start, few enough not to compete with the decode threads. One data set's starts
  // and plans run on at most kStartThreads - 1 of them at once (the others queue), so one whose
  // files hang leaves a thread to every other data set.
  static constexpr int kStartThreads = 4;
  // DescribeStream calls waiting at once, besides the max_streams stream starts: every rank and
  // data-loader worker of a large job may ask at its start (torch len()), and a waiting call
  // holds only its request. More are refused RESOURCE_EXHAUSTED; they never take a start's place.
  static constexpr int kMaxDescribesInFlight = 4096;

 private:
  // UNAUTHENTICATED unless the call carries exactly one "authorization: Bearer <token>".
  Status Authenticate(const grpc::CallbackServerContext& context) const;
  friend class StartingCall;
  enum class CallKind { kStream, kDescribe };

  // DescribeStream's request resolved, or why StreamBatches would refuse it (but its token):
  // the checks that read no file's records, on the gRPC thread.
  Result<ResolvedOptions> ResolveForPlan(const v1::StreamRequest& request) const;
  // DescribeStream's answer for the resolved request. May block (it counts the files' records):
  // on the executor only.
  static Result<v1::StreamPlan> Plan(const ResolvedOptions& resolved, int num_consumers);
  // Runs `start` for call on the executor, keyed by its data set, call registered for Drain
  // until it returns or the call ends. The drain status, or ResourceExhausted when max_streams
  // stream starts (kStream) or kMaxDescribesInFlight DescribeStream calls (kDescribe) of calls
  // still on are already waiting.
  Status Defer(StartingCall* call, CallKind kind, const std::string& dataset,
               std::function<void()> start);
  // call no longer counts as waiting (its start has run, or the call ended).
  void Unregister(StartingCall* call);
  // call has ended (OnDone): unregistered, and its start withdrawn if still queued.
  void Ended(StartingCall* call);
  // A shared-memory segment for a stream that asked for one, named in the call's initial
  // metadata; null (ordinary batches) when shared memory is off, the peer is not on this host,
  // the slots asked for are out of bounds or too large together, or memory has no room.
  std::shared_ptr<SharedSegment> SharedSegmentFor(grpc::CallbackServerContext& context,
                                                  const v1::StreamRequest& request,
                                                  const ResolvedOptions& options);

  const v1::ServerConfig& config_;
  // Files listed by each dataset that has a file_list (read once: ListDatasets reports them).
  const std::map<std::string, int64_t> listed_files_;
  JobRegistry* const registry_;
  const std::string token_;
  SlotWatcher watcher_;
  std::atomic<bool> shared_memory_warned_{false};
  mutable std::mutex starts_mu_;
  // Calls still on whose start is queued or running (each held by its start); guarded by
  // starts_mu_, as are the counts of each kind.
  std::map<StartingCall*, CallKind> starting_;
  int starting_streams_ = 0;
  int starting_describes_ = 0;
  std::optional<Status> drain_;  // Drain's status; guarded by starts_mu_
  // Last: destroyed (its queued starts run, its threads joined) before what the starts use.
  BlockingExecutor executor_;
};

// Our Status as a grpc::Status (the codes are the same numbers).
grpc::Status ToGrpc(const Status& s);

}  // namespace sluice
