// `sluice serve`: the daemon. Loads and checks the configuration (or makes one from --files),
// serves DataService (+ health and reflection) on every listen address, /metrics, /healthz and /
// on the metrics address, and drains on SIGINT/SIGTERM: new streams are refused, every stream
// ends with UNAVAILABLE after its write in flight (one whose job is still being opened, and a
// DescribeStream still counting, at once), and the process exits 0.
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <fmt/format.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/resource_quota.h>
#include <tbb/global_control.h>

#include "formats/file.h"
#include "server/commands.h"
#include "server/data_service.h"
#include "server/format_bytes.h"
#include "server/http_server.h"
#include "server/job_registry.h"
#include "server/memory_limit.h"
#include "server/server_config.h"
#include "server/status_pages.h"
#include "server/token_auth.h"

namespace sluice {
namespace {

struct ServeFlags {
  std::string config_file;
  std::vector<std::string> files;
  std::string file_list;
  std::string name = "train";
  int port = 50051;
  std::string metrics_address;
  double drain_seconds = 5;
  std::string shard;  // "I/N": this worker serves part I of N of every dataset
};

// Applies --shard I/N to every dataset: each worker of a fleet started with the same
// configuration serves its own part (whole files when there are at least N). A dataset that
// already names a shard {w, m} is subdivided: {w + m·I, m·N}.
Result<v1::ServerConfig> ApplyShard(v1::ServerConfig config, const std::string& shard,
                                    const MemoryLimit& limit) {
  int index = 0, count = 0;
  char tail = 0;
  if (std::sscanf(shard.c_str(), "%d/%d%c", &index, &count, &tail) != 2 || count < 1 ||
      index < 0 || index >= count) {
    return InvalidArgument("--shard wants I/N with 0 <= I < N, not '" + shard + "'");
  }
  for (v1::DatasetConfig& d : *config.mutable_datasets()) {
    v1::ShardOptions* s = d.mutable_pipeline()->mutable_shard();
    const int w = s->count() > 1 ? s->index() : 0;
    const int m = std::max(1, s->count());
    s->set_index(w + m * index);
    s->set_count(m * count);
  }
  config.mutable_fleet_shard()->set_index(index);
  config.mutable_fleet_shard()->set_count(count);
  return ValidateServerConfig(std::move(config), limit);
}

// TLS when configured, else plaintext; either way a call without the token (when one is set) is
// refused from its headers, before gRPC reads its message. An error naming the file when a
// configured certificate or key cannot be read now: a TLS server never falls back to plaintext.
Result<std::shared_ptr<grpc::ServerCredentials>> Credentials(const v1::ServerConfig& config,
                                                             const std::string& token) {
  if (config.tls().cert_file().empty()) return TokenCheckedCredentials(token, std::nullopt);
  Result<std::string> cert = ReadFileToString(config.tls().cert_file());
  if (!cert.ok()) return cert.status();
  Result<std::string> key = ReadFileToString(config.tls().key_file());
  if (!key.ok()) return key.status();
  return TokenCheckedCredentials(token, TlsPem{std::move(*cert), std::move(*key)});
}

// The config from --config or the quick flags, with --shard applied, checked against `limit`;
// errors as the message.
Result<v1::ServerConfig> LoadConfig(const ServeFlags& f, const MemoryLimit& limit,
                                    std::vector<std::string>* warnings) {
  Result<v1::ServerConfig> loaded =
      !f.config_file.empty()
          ? LoadServerConfig(f.config_file, limit, warnings)
          : QuickServerConfig(limit, f.files, f.name, f.port, f.metrics_address, f.file_list);
  if (loaded.ok() && !f.shard.empty()) loaded = ApplyShard(std::move(*loaded), f.shard, limit);
  return loaded;
}

// The largest request gRPC reads. A legitimate StreamRequest is under 1 KiB (a dataset name, a job
// name of at most 128 bytes, a position and a dozen numbers); the other requests are smaller.
// Larger requests are refused with RESOURCE_EXHAUSTED.
constexpr int kMaxRequestBytes = 64 << 10;
// Threads gRPC may run synchronous handlers on (reflection); our own services never block one.
constexpr int kGrpcMaxThreads = 32;

// What gRPC's transport may hold in read buffers and per-call state, all connections together,
// before it takes memory back by cutting a stream ("Buffers full", RESOURCE_EXHAUSTED) or closing
// a connection: a thirty-second of the server's budget, within [8 MiB, 256 MiB]. gRPC 1.51 reads a
// whole request before it checks its size, so a client allowed to send one (any client when no
// token is configured) could make the server hold it all (16 x 64 MiB: 857 MiB peak RSS without a
// quota, 70 MiB with). The stream gRPC cuts may be anyone's; with a token, calls without it are
// refused from their headers (token_auth.h) and never reach the quota. Outgoing batches are not
// charged to it (gRPC sends our pooled buffers by reference).
size_t GrpcMemoryQuota(int64_t memory_budget_bytes) {
  return static_cast<size_t>(
      std::clamp<int64_t>(memory_budget_bytes / 32, int64_t{8} << 20, int64_t{256} << 20));
}

// The gRPC server on every listen address, serving `service`; *ports gets the bound TCP ports.
// Null (and the reason printed) when an address cannot be listened on.
std::unique_ptr<grpc::Server> StartGrpc(const v1::ServerConfig& config, const std::string& token,
                                        DataService* service, std::vector<int>* ports) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  Result<std::shared_ptr<grpc::ServerCredentials>> credentials = Credentials(config, token);
  if (!credentials.ok()) {
    std::fprintf(stderr, "sluice serve: %s\n", credentials.status().ToString().c_str());
    return nullptr;
  }
  ports->assign(static_cast<size_t>(config.listen_size()), 0);
  for (int i = 0; i < config.listen_size(); ++i) {
    builder.AddListeningPort(config.listen(i), *credentials, &(*ports)[static_cast<size_t>(i)]);
  }
  builder.RegisterService(service);
  builder.SetMaxSendMessageSize(
      static_cast<int>(std::min<int64_t>(config.max_batch_bytes(), INT32_MAX)));
  builder.SetMaxReceiveMessageSize(kMaxRequestBytes);
  grpc::ResourceQuota quota("sluice-serve");
  quota.Resize(GrpcMemoryQuota(config.memory_budget_bytes()));
  quota.SetMaxThreads(kGrpcMaxThreads);
  builder.SetResourceQuota(quota);
  // gRPC binds with SO_REUSEPORT by default: a second server on a port in use would start and
  // silently take half the connections. A port in use must be an error.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // Requests are small, so the window a client may send into never needs to grow past the 64 KiB
  // default: without BDP probing a stream refused from its headers has at most that of its body
  // in the server.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server) {
    std::fprintf(stderr, "sluice serve: cannot listen on %s (in use, or not allowed?)\n",
                 fmt::format("{}", fmt::join(config.listen(), ", ")).c_str());
    return nullptr;
  }
  for (int i = 0; i < config.listen_size(); ++i) {
    const std::string& address = config.listen(i);
    if (!address.starts_with("unix:") && (*ports)[static_cast<size_t>(i)] == 0) {
      std::fprintf(stderr, "sluice serve: cannot listen on %s\n", address.c_str());
      server->Shutdown();
      return nullptr;
    }
  }
  server->GetHealthCheckService()->SetServingStatus(true);
  return server;
}

// What the server listens on and serves, as the lines scripts wait for ("listening on ...").
void PrintStarted(const v1::ServerConfig& config, const std::vector<int>& ports,
                  const HttpServer* http, const MemoryLimit& limit) {
  for (int i = 0; i < config.listen_size(); ++i) {
    std::string address = config.listen(i);
    if (!address.starts_with("unix:")) {
      address =
          address.substr(0, address.rfind(':') + 1) + std::to_string(ports[static_cast<size_t>(i)]);
    }
    std::printf("sluice serve: listening on %s\n", address.c_str());
  }
  if (http) {
    const std::string& m = config.metrics_address();
    std::printf("sluice serve: metrics on http://%s:%d/metrics\n",
                m.substr(0, m.rfind(':')).c_str(), http->port());
  }
  std::string names;
  for (const auto& d : config.datasets()) {
    const std::string files = d.pipeline().file_list().empty()
                                  ? fmt::format("{} files", d.pipeline().files_size())
                                  : "files of " + d.pipeline().file_list();
    names += fmt::format("{}{} ({})", names.empty() ? "" : ", ", d.name(), files);
  }
  std::printf("sluice serve: datasets: %s; %d decode threads, memory budget %s (memory limit %s)\n",
              names.c_str(), config.threads(), FormatBytes(config.memory_budget_bytes()).c_str(),
              limit.ToString().c_str());
  std::fflush(stdout);
}

// Blocks until SIGINT or SIGTERM; returns which.
int WaitForSignal() {
  boost::asio::io_context io;
  boost::asio::signal_set signals(io, SIGINT, SIGTERM);
  int signal_number = 0;
  signals.async_wait([&](const boost::system::error_code&, int n) { signal_number = n; });
  io.run();
  return signal_number;
}

int Serve(const ServeFlags& f) {
  const MemoryLimit limit = DetectMemoryLimit();
  std::vector<std::string> warnings;
  Result<v1::ServerConfig> loaded = LoadConfig(f, limit, &warnings);
  if (!loaded.ok()) {
    std::fprintf(stderr, "sluice serve: %s\n", loaded.status().message().c_str());
    return 2;
  }
  // With the start-up lines (stdout), where whoever reads those sees them.
  for (const std::string& w : warnings) std::printf("sluice serve: warning: %s\n", w.c_str());
  const v1::ServerConfig config = std::move(*loaded);
  Result<std::string> token = ReadToken(config);
  if (!token.ok()) {
    std::fprintf(stderr, "sluice serve: %s\n", token.status().message().c_str());
    return 2;
  }
  // One decode-thread budget for every job (jobs' pipelines take at most config.threads each).
  tbb::global_control workers(tbb::global_control::max_allowed_parallelism,
                              static_cast<size_t>(config.threads()) + 1);

  JobRegistry registry(config);
  DataService service(config, &registry, *token);
  std::vector<int> ports;
  std::unique_ptr<grpc::Server> server = StartGrpc(config, *token, &service, &ports);
  if (!server) return 2;

  StatusPages pages(&registry, limit, [&service] { return service.starts_in_flight(); });
  std::unique_ptr<HttpServer> http;
  if (!config.metrics_address().empty()) {
    // Health probes are answered even when slow or idle clients hold every connection, and
    // (two threads) while a /metrics or / page is being rendered.
    HttpServerLimits limits;
    limits.priority_paths = {"/healthz"};
    Result<std::unique_ptr<HttpServer>> started = HttpServer::Start(
        config.metrics_address(), [&pages](const HttpRequest& r) { return pages.Handle(r); },
        /*threads=*/2, limits);
    if (!started.ok()) {
      std::fprintf(stderr, "sluice serve: %s\n", started.status().message().c_str());
      server->Shutdown();
      return 2;
    }
    http = std::move(*started);
  }
  PrintStarted(config, ports, http.get(), limit);

  const int signal_number = WaitForSignal();
  std::printf("sluice serve: %s, draining\n", signal_number == SIGINT ? "SIGINT" : "SIGTERM");
  std::fflush(stdout);
  pages.SetDraining();
  server->GetHealthCheckService()->SetServingStatus(false);
  const Status draining = Unavailable("the server is shutting down; reconnect to continue");
  registry.StopAll(draining);
  service.Drain(draining);
  const auto drain = std::chrono::milliseconds(static_cast<int64_t>(f.drain_seconds * 1000));
  const auto drained_by = std::chrono::steady_clock::now() + drain;
  server->Shutdown(std::chrono::system_clock::now() + drain);
  server->Wait();
  if (http) http->Stop();
  // Starts still in flight had their calls ended by Drain, but what they wait for may never come
  // (a FIFO without a writer, a hung network file system: no signal takes a thread out of such a
  // wait, and the file layer retries EINTR). After the drain the process exits without joining
  // them; what they hold is the process's (descriptors, memory, memfd segments) and goes with it.
  if (!service.WaitForStarts(drained_by)) {
    std::fprintf(stderr,
                 "sluice serve: %d stream start(s) or DescribeStream call(s) still waiting on "
                 "their files after the drain; exiting without them\n",
                 service.start_tasks());
    std::printf("sluice serve: stopped\n");
    std::fflush(stdout);
    std::fflush(stderr);
    std::_Exit(0);
  }
  std::printf("sluice serve: stopped\n");
  return 0;
}

}  // namespace

void RegisterServeCommand(CLI::App& app, int* exit_code) {
  auto f = std::make_shared<ServeFlags>();
  CLI::App* cmd = app.add_subcommand(
      "serve", "Serve datasets to trainers over gRPC (sluice.v1.DataService)");
  auto* config = cmd->add_option("--config", f->config_file,
                                 "ServerConfig in protobuf text format (see README \"Serving\")");
  auto* files = cmd->add_option("--files", f->files,
                                "Quick mode: serve these globs (TFRecord, tar or image files)");
  auto* list = cmd->add_option(
      "--file-list", f->file_list,
      "Quick mode: serve the image files of this CSV or JSON-lines list of path,label instead");
  config->excludes(files);
  config->excludes(list);
  files->excludes(list);
  // Quick mode's flags: the callback refuses a command line with neither --files nor --file-list.
  cmd->add_option("--name", f->name, "Quick mode: the dataset's name (default train)")
      ->excludes(config);
  cmd->add_option("--port", f->port, "Quick mode: TCP port on 127.0.0.1 (0 = any; default 50051)")
      ->excludes(config);
  cmd->add_option("--metrics-address", f->metrics_address,
                  "Quick mode: HOST:PORT for /metrics, /healthz and / (default: none)")
      ->excludes(config);
  cmd->add_option("--shard", f->shard,
                  "I/N: serve part I of N of every dataset (e.g. a StatefulSet's pod ordinal of "
                  "its replicas), for trainers that fan in from N servers");
  cmd->add_option("--drain-seconds", f->drain_seconds,
                  "On SIGINT/SIGTERM, how long streams get to end before they are cut (default 5)");
  cmd->callback([f, exit_code, cmd] {
    if (f->config_file.empty() && f->files.empty() && f->file_list.empty()) {
      std::fprintf(stderr, "sluice serve: give --config FILE, --files GLOB or --file-list LIST\n%s",
                   cmd->help().c_str());
      *exit_code = 2;
      return;
    }
    *exit_code = Serve(*f);
  });
}

}  // namespace sluice
