// Shared by the `sluice serve` tests: a dataset "train" served from a config, a C++ client on it,
// what a stream delivered, and whether an epoch's labels came each once.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <grpcpp/grpcpp.h>

#include "client/client.h"
#include "formats/image_example.h"
#include "formats/tfrecord_writer.h"
#include "sluice/v1/service.grpc.pb.h"
#include "tests/pipeline/pipeline_test_data.h"
#include "tests/server/serve_test_support.h"

namespace sluice::serve_testing {

using testing::TempDir;
using testing::WriteTestShards;

// The id shards of the equal-shares and lockstep tests: files of 10, 13, 9, 11 and 9 records,
// labelled by global record id (file f's first is kIdShardFirstId[f]), 52 in all.
inline const std::vector<int> kIdShardSizes = {10, 13, 9, 11, 9};
inline const std::vector<int> kIdShardFirstId = {0, 10, 23, 32, 43};
constexpr int kIdShardRecords = 52;

// Files shard-<f>.tfrecord in dir of sizes[f] records each, labelled (and drawn, IdJpeg) by
// global record id from 0 in file order.
inline void WriteIdShards(const TempDir& dir, const std::vector<int>& sizes) {
  int id = 0;
  for (size_t f = 0; f < sizes.size(); ++f) {
    auto writer = TFRecordWriter::Create(dir.file("shard-" + std::to_string(f) + ".tfrecord"));
    REQUIRE(writer.ok());
    for (int r = 0; r < sizes[f]; ++r, ++id) {
      const std::string jpeg = testing::IdJpeg(id);
      REQUIRE((*writer)->Write(EncodeImageExample({jpeg, id, "c", 48, 64, "x"})).ok());
    }
    REQUIRE((*writer)->Close().ok());
  }
}

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

inline std::unique_ptr<Client> Connect(const std::string& address, std::string token = "") {
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

inline Got ReadAll(BatchStream& s, int max_batches = 1 << 30) {
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
inline bool EachLabelOnce(std::vector<int32_t> labels, int n) {
  return testing::Sorted(std::move(labels)) == testing::Iota(n);
}

// GetStats of `dataset` until `done` holds of them; fails after 20 s. A poll: what it waits for
// happens in the server process (a stream attaching, the reaper's deadline passing, a finished
// job destroyed), which tells this one nothing; the interval only paces the calls.
template <typename Done>
v1::Stats StatsWhen(Client& client, const std::string& dataset, Done done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (;;) {
    auto stats = client.GetStats(dataset);
    REQUIRE(stats.ok());
    if (done(*stats)) return *stats;
    INFO(stats->ShortDebugString());
    REQUIRE(std::chrono::steady_clock::now() < deadline);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// The generated stub on `address`, for the tests that read raw v1::Batch messages.
inline std::unique_ptr<v1::DataService::Stub> Stub(const std::string& address) {
  return v1::DataService::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
}

// A whole StreamBatches call as raw messages: every batch read, then how it finished.
struct Raw {
  grpc::Status status;
  std::vector<v1::Batch> batches;
};

inline Raw ReadRaw(const std::string& address, const v1::StreamRequest& r) {
  auto stub = Stub(address);
  grpc::ClientContext context;
  auto reader = stub->StreamBatches(&context, r);
  Raw out;
  v1::Batch b;
  while (reader->Read(&b)) out.batches.push_back(b);
  out.status = reader->Finish();
  return out;
}

inline v1::StreamRequest Request(std::string dataset = "train") {
  v1::StreamRequest r;
  r.set_dataset(std::move(dataset));
  return r;
}

// Request() resumed after the last batch of `head` (epoch 0, read from its start): what a client
// that kept those batches asks for next.
inline v1::StreamRequest ResumeAfter(const Got& head) {
  v1::StreamRequest r = Request();
  r.mutable_start_position()->set_epoch(0);
  r.mutable_start_position()->set_index(static_cast<int64_t>(head.metas.size()));
  r.mutable_start_position()->set_end_record(head.metas.back().end_record);
  return r;
}

// GET of the metrics URL the server printed (its metrics_address), through curl.
inline std::string FetchMetrics(testing::ServerProcess& server) {
  const std::string out = server.output();
  const size_t at = out.find("http://");
  REQUIRE(at != std::string::npos);
  const std::string url = out.substr(at, out.find('\n', at) - at);
  TempDir tmp;
  const std::string cmd = "curl -s -o " + tmp.file("body") + " '" + url + "'";
  REQUIRE(std::system(cmd.c_str()) == 0);
  return testing::ReadAll(tmp.file("body"));
}

}  // namespace sluice::serve_testing
