// `sluice serve` end to end: a real server process, the real C++ client, gRPC over loopback.
#include <catch2/catch.hpp>

#include <signal.h>

#include <algorithm>
#include <set>
#include <thread>

#include <grpcpp/grpcpp.h>
#include <nlohmann/json.hpp>

#include "client/client.h"
#include "pipeline/pipeline.h"
#include "sluice/v1/service.grpc.pb.h"
#include "tests/pipeline/pipeline_test_data.h"
#include "tests/server/serve_test_support.h"

namespace sluice {
namespace {

using testing::ServerProcess;
using testing::TempDir;
using testing::WriteTestShards;

// A dataset "train" of files × per_file records (labels = record ids), served from a config.
struct Fixture {
  explicit Fixture(int files = 4, int per_file = 40, std::string extra = "",
                   std::string dataset_extra = "") {
    shards = WriteTestShards(dir, files, per_file);
    config = dir.file("sluice.textproto");
    testing::WriteAll(config, "listen: \"127.0.0.1:0\"\n" + extra +
                                  "datasets {\n  name: \"train\"\n  num_classes: 1000\n"
                                  "  pipeline {\n    files: \"" + dir.file("shard-*.tfrecord") +
                                  "\"\n    batch_size: 8\n    image_height: 32\n"
                                  "    image_width: 40\n    threads: 2\n    seed: 7\n"
                                  "    epochs: 1\n    memory_budget_bytes: 67108864\n"
                                  "    shuffle { buffer_size: 16 }\n  }\n" + dataset_extra +
                                  "}\n");
  }
  std::vector<std::string> Args() const { return {"--config", config}; }

  TempDir dir;
  testing::TestShards shards;
  std::string config;
};

std::unique_ptr<Client> Connect(const std::string& address, std::string token = "") {
  ClientOptions o;
  o.targets = {address};
  o.token = std::move(token);
  o.reconnect_deadline = std::chrono::milliseconds(3000);
  auto c = Client::Create(o);
  REQUIRE(c.ok());
  return std::move(*c);
}

struct Got {
  std::vector<BatchMeta> metas;
  std::vector<int32_t> labels;
  std::string images;
  Status status;
};

Got ReadAll(BatchStream& s, int max_batches = 1 << 30) {
  Got g;
  for (int i = 0; i < max_batches; ++i) {
    ReceivedBatch b;
    bool end = false;
    g.status = s.Next(&b, &end);
    if (!g.status.ok() || end) break;
    g.metas.push_back(b.meta);
    g.labels.insert(g.labels.end(), b.labels.begin(), b.labels.end());
    g.images.append(reinterpret_cast<const char*>(b.images.data()), b.images.size());
  }
  return g;
}

// The test data labels record i with i: labels from a whole epoch, in any order, are 0..n-1 once
// each.
bool EachLabelOnce(std::vector<int32_t> labels, int n) {
  std::sort(labels.begin(), labels.end());
  std::vector<int32_t> want(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) want[static_cast<size_t>(i)] = i;
  return labels == want;
}

v1::StreamRequest Request(std::string dataset = "train") {
  v1::StreamRequest r;
  r.set_dataset(std::move(dataset));
  return r;
}

TEST_CASE("StreamedBatchesEqualTheInProcessPipelineForTheSameSeed") {
  Fixture f;
  ServerProcess server(f.Args());
  REQUIRE(server.running());
  auto client = Connect(server.address());
  auto stream = client->Stream(Request());
  REQUIRE(stream.ok());
  Got got = ReadAll(**stream);
  REQUIRE(got.status.ok());

  v1::PipelineOptions o;
  o.add_files(f.dir.file("shard-*.tfrecord"));
  o.set_batch_size(8);
  o.set_image_height(32);
  o.set_image_width(40);
  o.set_threads(2);
  o.set_seed(7);
  o.set_epochs(1);
  o.set_memory_budget_bytes(64 << 20);
  o.mutable_shuffle()->set_buffer_size(16);
  auto expected = testing::RunToEnd(o);
  REQUIRE(expected.status.ok());
  REQUIRE(got.metas.size() == expected.positions.size());
  for (size_t i = 0; i < got.metas.size(); ++i) {
    CHECK(got.metas[i].epoch == expected.positions[i].epoch);
    CHECK(got.metas[i].index == expected.positions[i].index);
    CHECK(got.metas[i].end_record == expected.positions[i].end_record);
    CHECK(got.metas[i].height == 32);
    CHECK(got.metas[i].width == 40);
  }
  CHECK(got.labels == expected.labels_by_epoch[0]);
  CHECK(got.images == expected.image_bytes);
}

TEST_CASE("ListDatasetsAndGetStatsDescribeTheServer") {
  Fixture f;
  ServerProcess server(f.Args());
  REQUIRE(server.running());
  auto client = Connect(server.address());
  auto datasets = client->ListDatasets();
  REQUIRE(datasets.ok());
  REQUIRE(datasets->size() == 1);
  CHECK((*datasets)[0].name() == "train");
  CHECK((*datasets)[0].files() == 4);
  CHECK((*datasets)[0].num_classes() == 1000);
  CHECK((*datasets)[0].batch_size() == 8);
  auto stream = client->Stream(Request());
  REQUIRE(stream.ok());
  Got got = ReadAll(**stream);
  REQUIRE(got.status.ok());
  stream->reset();
  auto stats = client->GetStats("train");
  REQUIRE(stats.ok());
  REQUIRE(stats->datasets_size() == 1);
  CHECK(stats->datasets(0).images_served() == 160);
  CHECK(stats->datasets(0).batches_served() == 20);
  CHECK(stats->datasets(0).streams_started() == 1);
}

TEST_CASE("TwoConsumersOfOneJobGetDisjointBatchesCoveringTheEpoch") {
  Fixture f;
  ServerProcess server(f.Args());
  REQUIRE(server.running());
  auto client = Connect(server.address());
  auto r = Request();
  r.set_job_name("shared");
  auto a = client->Stream(r);
  REQUIRE(a.ok());
  auto b = client->Stream(r);
  REQUIRE(b.ok());
  Got ga, gb;
  std::thread ta([&] { ga = ReadAll(**a); });
  std::thread tb([&] { gb = ReadAll(**b); });
  ta.join();
  tb.join();
  REQUIRE(ga.status.ok());
  REQUIRE(gb.status.ok());
  // Which consumer gets how many depends on timing (the first may even take them all before the
  // second joins); that each batch goes to exactly one of them does not.
  std::set<int64_t> ia, ib;
  for (auto& m : ga.metas) ia.insert(m.index);
  for (auto& m : gb.metas) ib.insert(m.index);
  for (int64_t i : ia) CHECK(ib.count(i) == 0);
  CHECK(ia.size() + ib.size() == 20);
  std::vector<int32_t> all = ga.labels;
  all.insert(all.end(), gb.labels.begin(), gb.labels.end());
  CHECK(EachLabelOnce(all, 160));
}

TEST_CASE("ConsumerThatStopsReadingLeavesTheSharedJobToTheOthers") {
  Fixture f;
  ServerProcess server(f.Args());
  REQUIRE(server.running());
  auto client = Connect(server.address());
  auto r = Request();
  r.set_job_name("busy");
  r.set_epochs(0);
  r.set_batch_size(32);  // 4.8 MB batches: a stalled consumer's buffers fill after a few
  r.set_image_height(224);
  r.set_image_width(224);
  auto a = client->Stream(r);
  REQUIRE(a.ok());
  Got ga = ReadAll(**a, 2);
  REQUIRE(ga.status.ok());
  // a stops reading but stays connected; b must still be served, with other batches.
  auto b = client->Stream(r);
  REQUIRE(b.ok());
  Got gb = ReadAll(**b, 6);
  REQUIRE(gb.status.ok());
  REQUIRE(gb.metas.size() == 6);
  std::set<std::pair<int64_t, int64_t>> seen;
  for (auto& m : ga.metas) seen.insert({m.epoch, m.index});
  for (auto& m : gb.metas) CHECK(seen.insert({m.epoch, m.index}).second);
}

TEST_CASE("ShardRequestsPartitionTheData") {
  Fixture f;
  ServerProcess server(f.Args());
  REQUIRE(server.running());
  auto client = Connect(server.address());
  std::vector<int32_t> all;
  for (int i = 0; i < 2; ++i) {
    auto r = Request();
    r.mutable_shard()->set_index(i);
    r.mutable_shard()->set_count(2);
    auto s = client->Stream(r);
    REQUIRE(s.ok());
    Got g = ReadAll(**s);
    REQUIRE(g.status.ok());
    CHECK(g.labels.size() == 80);
    all.insert(all.end(), g.labels.begin(), g.labels.end());
  }
  std::sort(all.begin(), all.end());
  CHECK(std::adjacent_find(all.begin(), all.end()) == all.end());
  CHECK(all.size() == 160);
}

TEST_CASE("ServerKilledMidStreamAndRestartedTheClientResumesWithNothingLostOrRepeated") {
  Fixture f(4, 60);
  // Two epochs, so the resume crosses an epoch boundary too.
  auto r = Request();
  r.set_epochs(2);
  Got whole;
  {
    ServerProcess server(f.Args());
    REQUIRE(server.running());
    auto s = Connect(server.address())->Stream(r);
    REQUIRE(s.ok());
    whole = ReadAll(**s);
    REQUIRE(whole.status.ok());
  }
  auto server = std::make_unique<ServerProcess>(f.Args());
  REQUIRE(server->running());
  const std::string address = server->address();
  ClientOptions o;
  o.targets = {address};
  o.prefetch = 1;
  o.reconnect_deadline = std::chrono::milliseconds(30000);
  auto client = Client::Create(o);
  REQUIRE(client.ok());
  auto s = (*client)->Stream(r);
  REQUIRE(s.ok());
  Got got = ReadAll(**s, 7);
  REQUIRE(got.status.ok());
  server->Stop(SIGKILL);
  // The same port again (a fresh config listening there).
  std::string config = testing::ReadAll(f.config);
  config.replace(config.find("127.0.0.1:0"), 11, address);
  testing::WriteAll(f.config, config);
  server = std::make_unique<ServerProcess>(f.Args());
  REQUIRE(server->running());
  Got rest = ReadAll(**s);
  REQUIRE(rest.status.ok());
  CHECK((*s)->reconnects() >= 1);
  got.labels.insert(got.labels.end(), rest.labels.begin(), rest.labels.end());
  got.images += rest.images;
  got.metas.insert(got.metas.end(), rest.metas.begin(), rest.metas.end());
  REQUIRE(got.metas.size() == whole.metas.size());
  for (size_t i = 0; i < got.metas.size(); ++i) {
    CHECK(got.metas[i].epoch == whole.metas[i].epoch);
    CHECK(got.metas[i].index == whole.metas[i].index);
  }
  CHECK(got.labels == whole.labels);
  CHECK(got.images == whole.images);
}

TEST_CASE("FanInFromTwoServersDeliversEachServersShardOnce") {
  // Two workers started from one configuration with --shard 0/2 and 1/2, as a StatefulSet's
  // pods would be.
  Fixture f(4, 30);
  std::vector<std::unique_ptr<ServerProcess>> servers;
  for (int i = 0; i < 2; ++i) {
    servers.push_back(std::make_unique<ServerProcess>(
        std::vector<std::string>{"--config", f.config, "--shard", std::to_string(i) + "/2"}));
    REQUIRE(servers.back()->running());
  }
  ClientOptions o;
  // One plain target and one through the dns: resolver (a literal resolves to itself).
  o.targets = {servers[0]->address(), "dns:///" + servers[1]->address()};
  auto client = Client::Create(o);
  REQUIRE(client.ok());
  auto s = (*client)->Stream(Request());
  REQUIRE(s.ok());
  CHECK((*s)->servers() == 2);
  std::vector<int32_t> labels;
  std::set<int> from;
  for (;;) {
    ReceivedBatch b;
    bool end = false;
    REQUIRE((*s)->Next(&b, &end).ok());
    if (end) break;
    from.insert(b.server);
    labels.insert(labels.end(), b.labels.begin(), b.labels.end());
  }
  CHECK(from == std::set<int>{0, 1});
  CHECK(EachLabelOnce(labels, 120));
}

TEST_CASE("EightConcurrentStreamsAllComplete") {
  Fixture f;
  ServerProcess server(f.Args());
  REQUIRE(server.running());
  auto client = Connect(server.address());
  std::vector<std::thread> threads;
  std::vector<Got> got(8);
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      auto r = Request();
      r.set_seed(static_cast<uint64_t>(100 + i));
      auto s = client->Stream(r);
      if (!s.ok()) {
        got[static_cast<size_t>(i)].status = s.status();
        return;
      }
      got[static_cast<size_t>(i)] = ReadAll(**s);
    });
  }
  for (auto& t : threads) t.join();
  for (auto& g : got) {
    INFO(g.status.ToString());
    CHECK(g.status.ok());
    CHECK(g.labels.size() == 160);
  }
}

TEST_CASE("ConsumerThatStopsReadingDoesNotGrowServerMemory") {
  // Big enough batches that a growing queue would show: 32 x 224x224x3 = 4.8 MB a batch.
  Fixture f(4, 100);
  ServerProcess server(f.Args());
  REQUIRE(server.running());
  auto client = Connect(server.address());
  auto r = Request();
  r.set_batch_size(32);
  r.set_image_height(224);
  r.set_image_width(224);
  r.set_epochs(0);
  auto s = client->Stream(r);
  INFO(s.status().ToString());
  REQUIRE(s.ok());
  Got first = ReadAll(**s, 3);
  REQUIRE(first.status.ok());
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const int64_t settled = server.RssBytes();
  std::this_thread::sleep_for(std::chrono::seconds(3));
  const int64_t later = server.RssBytes();
  // The job's budget is 64 MiB; a server that kept producing would grow by ~5 MB per batch.
  CHECK(later < settled + (16 << 20));
  Got more = ReadAll(**s, 3);
  CHECK(more.status.ok());
}

grpc::Status CallStream(const std::string& address, const v1::StreamRequest& r,
                        const std::string& token = "") {
  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  auto stub = v1::DataService::NewStub(channel);
  grpc::ClientContext context;
  if (!token.empty()) context.AddMetadata("authorization", token);
  auto reader = stub->StreamBatches(&context, r);
  v1::Batch b;
  while (reader->Read(&b)) {
  }
  return reader->Finish();
}

TEST_CASE("BadRequestsGetAStatusThatSaysWhatToChange") {
  Fixture f(2, 8, "max_streams: 3\nmemory_budget_bytes: 134217728\n");
  ServerProcess server(f.Args());
  REQUIRE(server.running());
  struct Case {
    std::string name;
    v1::StreamRequest request;
    grpc::StatusCode code;
    std::string says;
  };
  std::vector<Case> cases;
  cases.push_back({"unknown dataset", Request("nope"), grpc::StatusCode::NOT_FOUND, "train"});
  cases.push_back(
      {"a path", Request("/etc/passwd"), grpc::StatusCode::INVALID_ARGUMENT, "not paths"});
  cases.push_back({"a glob", Request("train*"), grpc::StatusCode::INVALID_ARGUMENT, "not paths"});
  auto big = Request();
  big.set_batch_size(5000);
  cases.push_back({"batch too large", big, grpc::StatusCode::INVALID_ARGUMENT, "batch_size"});
  auto tiny = Request();
  tiny.set_image_height(4);
  cases.push_back({"image too small", tiny, grpc::StatusCode::INVALID_ARGUMENT, "image_height"});
  for (const Case& c : cases) {
    INFO(c.name);
    grpc::Status s = CallStream(server.address(), c.request);
    CHECK(s.error_code() == c.code);
    CHECK(s.error_message().find(c.says) != std::string::npos);
  }
  SECTION("over the memory budget") {
    // Each job reserves 64 MiB of the server's 128 MiB: the third is refused.
    auto client = Connect(server.address());
    auto forever = Request();
    forever.set_epochs(0);
    auto s1 = client->Stream(forever);
    REQUIRE(s1.ok());
    auto s2 = client->Stream(forever);
    REQUIRE(s2.ok());
    grpc::Status s = CallStream(server.address(), forever);
    CHECK(s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
    CHECK(s.error_message().find("memory_budget_bytes") != std::string::npos);
  }
  SECTION("over the stream limit") {
    auto client = Connect(server.address());
    auto r = Request();
    r.set_epochs(0);
    r.set_job_name("j");
    std::vector<std::unique_ptr<BatchStream>> open;
    for (int i = 0; i < 3; ++i) {
      auto s = client->Stream(r);
      REQUIRE(s.ok());
      open.push_back(std::move(*s));
    }
    grpc::Status s = CallStream(server.address(), r);
    CHECK(s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
    CHECK(s.error_message().find("max_streams") != std::string::npos);
  }
}

TEST_CASE("TokenIsRequiredWhenConfigured") {
  TempDir keys;
  testing::WriteAll(keys.file("token"), "s3cret-token\n");
  Fixture f(2, 8, "token_file: \"" + keys.file("token") + "\"\n");
  ServerProcess server(f.Args());
  REQUIRE(server.running());
  grpc::Status none = CallStream(server.address(), Request());
  CHECK(none.error_code() == grpc::StatusCode::UNAUTHENTICATED);
  grpc::Status wrong = CallStream(server.address(), Request(), "Bearer nope");
  CHECK(wrong.error_code() == grpc::StatusCode::UNAUTHENTICATED);
  auto client = Connect(server.address(), "s3cret-token");
  auto s = client->Stream(Request());
  REQUIRE(s.ok());
  Got g = ReadAll(**s);
  CHECK(g.status.ok());
  CHECK(g.labels.size() == 16);
}

TEST_CASE("TlsServerRefusesPlaintextAndServesTrustingClients") {
  TempDir keys;
  const std::string cmd = "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=localhost "
                          "-addext subjectAltName=DNS:localhost,IP:127.0.0.1 -keyout " +
                          keys.file("key.pem") + " -out " + keys.file("cert.pem") +
                          " >/dev/null 2>&1";
  REQUIRE(std::system(cmd.c_str()) == 0);
  Fixture f(2, 8, "tls { cert_file: \"" + keys.file("cert.pem") + "\" key_file: \"" +
                      keys.file("key.pem") + "\" }\n");
  ServerProcess server(f.Args());
  REQUIRE(server.running());
  grpc::Status plain = CallStream(server.address(), Request());
  CHECK(plain.error_code() == grpc::StatusCode::UNAVAILABLE);
  ClientOptions o;
  o.targets = {server.address()};
  o.tls_root_certs = testing::ReadAll(keys.file("cert.pem"));
  auto client = Client::Create(o);
  REQUIRE(client.ok());
  auto s = (*client)->Stream(Request());
  REQUIRE(s.ok());
  Got g = ReadAll(**s);
  CHECK(g.status.ok());
  CHECK(g.labels.size() == 16);
}

TEST_CASE("SigtermDrainsOpenStreamsAndExitsZero") {
  Fixture f;
  ServerProcess server(f.Args());
  REQUIRE(server.running());
  ClientOptions o;
  o.targets = {server.address()};
  o.reconnect_deadline = std::chrono::milliseconds(500);
  auto client = Client::Create(o);
  REQUIRE(client.ok());
  auto r = Request();
  r.set_epochs(0);
  auto s = (*client)->Stream(r);
  REQUIRE(s.ok());
  // A consumer that keeps reading: its write in flight completes, then its stream ends.
  Got got;
  std::thread reader([&] { got = ReadAll(**s); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto start = std::chrono::steady_clock::now();
  CHECK(server.Stop(SIGTERM) == 0);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(3));
  reader.join();
  CHECK(server.output().find("draining") != std::string::npos);
  INFO(got.status.ToString());
  CHECK(got.status.code() == StatusCode::kUnavailable);
  // Every batch up to the drain arrived, in order.
  REQUIRE(got.metas.size() > 2);
  for (size_t i = 1; i < got.metas.size(); ++i) {
    const auto& a = got.metas[i - 1];
    const auto& b = got.metas[i];
    CHECK(((b.epoch == a.epoch && b.index == a.index + 1) ||
           (b.epoch == a.epoch + 1 && b.index == 0)));
  }
}

TEST_CASE("ProfileTargetMeasuresTheServiceFromTheClientSide") {
  Fixture f;
  ServerProcess server(f.Args());
  REQUIRE(server.running());
  auto r = testing::RunSluice("profile --target " + server.address() +
                              " --dataset train --batches 6 --warmup-batches 1 --json");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  auto j = nlohmann::json::parse(r.out);
  CHECK(j["batches"] == 6);
  CHECK(j["images_per_sec"].get<double>() > 0);
  CHECK(j["bytes_per_sec"].get<double>() > 0);
  CHECK(j["batch_wait_ms"].contains("p99"));
  CHECK(j["decode_parallelism_max"] == 2);
  CHECK(j["decode_parallelism"].get<int>() >= 1);
  CHECK(j["bottleneck"].contains("stage"));
  bool has_decode = false;
  for (const auto& s : j["stages"]) has_decode |= s["name"] == "decode";
  CHECK(has_decode);
  auto bad = testing::RunSluice("profile --target " + server.address() + " --dataset nope");
  CHECK(bad.exit_code == 1);
  CHECK(bad.err.find("NOT_FOUND") != std::string::npos);
}

TEST_CASE("MetricsAndHealthAreServedOverHttp") {
  Fixture f(4, 40, "metrics_address: \"127.0.0.1:0\"\n");
  ServerProcess server(f.Args());
  REQUIRE(server.running());
  auto s = Connect(server.address())->Stream(Request());
  REQUIRE(s.ok());
  REQUIRE(ReadAll(**s).status.ok());
  const std::string out = server.output();
  const size_t at = out.find("http://");
  REQUIRE(at != std::string::npos);
  const std::string url = out.substr(at, out.find('\n', at) - at);
  TempDir tmp;
  auto fetch = [&](const std::string& u) {
    std::string cmd = "curl -s -o " + tmp.file("body") + " -w '%{http_code}' '" + u + "' > " +
                      tmp.file("code");
    REQUIRE(std::system(cmd.c_str()) == 0);
    return std::make_pair(testing::ReadAll(tmp.file("code")), testing::ReadAll(tmp.file("body")));
  };
  auto [code, metrics] = fetch(url);
  CHECK(code == "200");
  CHECK(metrics.find("sluice_images_served_total{dataset=\"train\"} 160") != std::string::npos);
  CHECK(metrics.find("# TYPE sluice_active_streams gauge") != std::string::npos);
  CHECK(metrics.find("# TYPE sluice_job_decode_parallelism gauge") != std::string::npos);
  const std::string base = url.substr(0, url.rfind("/metrics"));
  CHECK(fetch(base + "/healthz").first == "200");
  auto [page_code, page] = fetch(base + "/");
  CHECK(page_code == "200");
  CHECK(page.find("train") != std::string::npos);
}

TEST_CASE("BadShardFlagStopsStartUp") {
  Fixture f;
  auto r = testing::RunSluice("serve --config " + f.config + " --shard 2/2");
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--shard wants I/N") != std::string::npos);
}

TEST_CASE("PortInUseStopsStartUp") {
  Fixture f;
  ServerProcess first(f.Args());
  REQUIRE(first.running());
  std::string config = testing::ReadAll(f.config);
  config.replace(config.find("127.0.0.1:0"), 11, first.address());
  testing::WriteAll(f.dir.file("second.textproto"), config);
  auto r = testing::RunSluice("serve --config " + f.dir.file("second.textproto"));
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("cannot listen on " + first.address()) != std::string::npos);
}

TEST_CASE("BadConfigStopsStartUpNamingTheField") {
  TempDir dir;
  testing::WriteAll(dir.file("bad.textproto"),
                    "listen: \"127.0.0.1:0\"\ndatasets { nme: \"x\" }\n");
  auto r = testing::RunSluice("serve --config " + dir.file("bad.textproto"));
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("bad.textproto:2") != std::string::npos);
}

}  // namespace
}  // namespace sluice
