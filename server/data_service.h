// The gRPC face of the server: DataService (proto/sluice/v1/service.proto) on the callback API,
// a thin adapter over JobRegistry and Job. Each StreamBatches call is a write reactor with one
// write in flight; it asks its job for the next batch when the last write completes, and the
// batch's image bytes go out as a slice of the pooled buffer (no copy), returned to the pool when
// gRPC releases the slice. No thread per stream, and no reaction ever blocks.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "server/job_registry.h"
#include "server/slot_watcher.h"
#include "sluice/v1/server_config.pb.h"
#include "sluice/v1/service.grpc.pb.h"

namespace sluice {

class SharedSegment;

using DataServiceBase = v1::DataService::WithCallbackMethod_ListDatasets<
    v1::DataService::WithRawCallbackMethod_StreamBatches<
        v1::DataService::WithCallbackMethod_GetStats<
            v1::DataService::WithCallbackMethod_DescribeStream<v1::DataService::Service>>>>;

class DataService final : public DataServiceBase {
 public:
  // token: the bearer token clients must send; empty = none. config and registry outlive this.
  DataService(const v1::ServerConfig& config, JobRegistry* registry, std::string token);

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

 private:
  // UNAUTHENTICATED unless the call carries exactly one "authorization: Bearer <token>".
  Status Authenticate(const grpc::CallbackServerContext& context) const;
  // DescribeStream's answer, or why StreamBatches would refuse the request.
  Status Describe(const grpc::CallbackServerContext& context, const v1::StreamRequest& request,
                  v1::StreamPlan* response) const;
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
};

// Our Status as a grpc::Status (the codes are the same numbers).
grpc::Status ToGrpc(const Status& s);

}  // namespace sluice
