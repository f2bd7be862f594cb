#include "client/client.h"

#include <netdb.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <utility>

#include <grpcpp/grpcpp.h>

#include "client/channel.h"
#include "client/fan_in_stream.h"
#include "client/fleet_check.h"
#include "sluice/v1/service.grpc.pb.h"

namespace sluice {

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
    // One address family: a dual-stack name (localhost; a pod with A and AAAA records) would
    // otherwise be two streams from one server, reading an unsharded dataset twice. IPv4 when
    // the name has any IPv4 address.
    bool any_ipv4 = false;
    for (addrinfo* a = res; a != nullptr; a = a->ai_next) any_ipv4 |= a->ai_family == AF_INET;
    std::vector<std::string> resolved;
    for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
      if (any_ipv4 && a->ai_family != AF_INET) continue;
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
    for (const std::string& t : targets_) {
      stubs_.push_back(v1::DataService::NewStub(MakeChannel(t, options_)));
    }
  }

  Result<std::vector<v1::DatasetInfo>> ListDatasets() override {
    grpc::ClientContext context;
    Prepare(&context);
    return List(0, &context);
  }

  Result<std::vector<v1::DatasetInfo>> ListDatasetsWhenReady() override {
    return ListWhenReady(0, std::chrono::system_clock::now() + options_.reconnect_deadline);
  }

  Result<v1::Stats> GetStats(const std::string& dataset) override {
    grpc::ClientContext context;
    Prepare(&context);
    v1::GetStatsRequest request;
    request.set_dataset(dataset);
    v1::Stats response;
    grpc::Status s = stubs_[0]->GetStats(&context, request, &response);
    if (!s.ok()) return FromGrpc(s).WithContext(targets_[0]);
    return response;
  }

  Result<std::unique_ptr<BatchStream>> Stream(const v1::StreamRequest& request) override {
    Status fleet;
    RETURN_IF_ERROR(CheckTargetsServeAll(request.dataset(), request.transform_set(), &fleet));
    if (!fleet.ok()) {
      if (!options_.allow_partial_fleet || fleet.code() != StatusCode::kFailedPrecondition) {
        return fleet;
      }
      std::fprintf(stderr, "sluice client: WARNING: %s\n", fleet.message().c_str());
    }
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

  Result<std::vector<v1::DatasetInfo>> List(size_t server, grpc::ClientContext* context) {
    v1::ListDatasetsResponse response;
    grpc::Status s = stubs_[server]->ListDatasets(context, v1::ListDatasetsRequest(), &response);
    if (!s.ok()) return FromGrpc(s).WithContext(targets_[server]);
    return std::vector<v1::DatasetInfo>(response.datasets().begin(), response.datasets().end());
  }

  // List(), waiting for the server to come up until `deadline`.
  Result<std::vector<v1::DatasetInfo>> ListWhenReady(
      size_t server, std::chrono::system_clock::time_point deadline) {
    grpc::ClientContext context;
    context.set_deadline(deadline);
    context.set_wait_for_ready(true);
    AddToken(&context, options_.token);
    Result<std::vector<v1::DatasetInfo>> infos = List(server, &context);
    if (!infos.ok() && infos.status().code() == StatusCode::kDeadlineExceeded) {
      return Unavailable(targets_[server] +
                         ": no answer within reconnect_deadline (gave up reconnecting)");
    }
    return infos;
  }

  // CheckFleet over the part of `dataset` each target serves, asked before any stream starts (a
  // consumer of a shared job that started and then left would take batches from the others).
  // A server that is down is waited for as long as a stream would wait for it
  // (reconnect_deadline). OK without a check when some server does not list the dataset: its
  // stream then fails with the server's NOT_FOUND. CheckFleet's status goes to *fleet (which
  // allow_partial_fleet may overlook); returned: a server unreachable, one listing the dataset
  // without offering `transform_set` (CheckTransformSet), or one whose batches carry other arrays
  // than the first's (CheckSameArrays), which nothing overlooks.
  Status CheckTargetsServeAll(const std::string& dataset, const std::string& transform_set,
                              Status* fleet) {
    const auto deadline = std::chrono::system_clock::now() + options_.reconnect_deadline;
    std::vector<ServerShard> shards;
    std::optional<v1::DatasetInfo> first;
    for (size_t i = 0; i < targets_.size(); ++i) {
      Result<std::vector<v1::DatasetInfo>> infos = ListWhenReady(i, deadline);
      if (!infos.ok()) return infos.status();
      auto info = std::find_if(infos->begin(), infos->end(),
                               [&](const v1::DatasetInfo& d) { return d.name() == dataset; });
      if (info == infos->end()) return Status::OK();
      RETURN_IF_ERROR(CheckTransformSet(*info, transform_set, targets_[i]));
      if (first) {
        RETURN_IF_ERROR(CheckSameArrays(*first, targets_[0], *info, targets_[i]));
      } else {
        first = *info;
      }
      shards.push_back({targets_[i], info->shard_index(), info->shard_count()});
    }
    *fleet = CheckFleet(dataset, shards);
    return Status::OK();
  }

  const ClientOptions options_;
  const std::vector<std::string> targets_;
  std::vector<std::unique_ptr<v1::DataService::Stub>> stubs_;  // one per target
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
