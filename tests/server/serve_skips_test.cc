// Nothing a `sluice serve` stream skips goes unseen: skips after the last batch reach GetStats,
// /metrics and the stream's trailing metadata; an epoch with nothing usable fails naming what
// the records hold; many skips are logged; bad labels are skipped; a lying record index is caught.
#include <grpcpp/grpcpp.h>

#include <catch2/catch.hpp>
#include <csignal>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "client/wire/batch_wire.h"
#include "formats/record_index.h"
#include "formats/tfrecord_writer.h"
#include "sluice/v1/example.pb.h"
#include "tests/server/serve_fixture.h"

namespace sluice {
namespace {

using serve_testing::Connect;
using serve_testing::EachLabelOnce;
using serve_testing::Got;
using serve_testing::ReadAll;
using serve_testing::Request;
using testing::ServerProcess;
using testing::TempDir;

// A config serving dir/shard-*.tfrecord as "train": batches of 8, one epoch, no shuffle.
std::string WriteConfig(const TempDir& dir, const std::string& pipeline_extra = "",
                        const std::string& dataset_extra = "", int epochs = 1) {
  const std::string path = dir.file("sluice.textproto");
  testing::WriteAll(path,
                    "listen: \"127.0.0.1:0\"\nmetrics_address: \"127.0.0.1:0\"\n"
                    "datasets {\n  name: \"train\"\n" +
                        dataset_extra + "  pipeline {\n    files: \"" +
                        dir.file("shard-*.tfrecord") +
                        "\"\n    batch_size: 8\n    image_height: 32\n    threads: 2\n"
                        "    epochs: " +
                        std::to_string(epochs) + "\n    memory_budget_bytes: 67108864\n" +
                        pipeline_extra + "  }\n}\n");
  return path;
}

// n records of which those with good(i) hold a JPEG labelled i; the others hold bytes that do
// not decode.
template <typename GoodFn>
void WriteMixedShard(const TempDir& dir, int n, GoodFn good) {
  auto writer = TFRecordWriter::Create(dir.file("shard-0.tfrecord"));
  REQUIRE(writer.ok());
  const std::string jpeg = testing::IdJpeg(1);
  for (int i = 0; i < n; ++i) {
    const bool ok = good(i);
    ImageRecord r{
        ok ? std::string_view(jpeg) : std::string_view("not a jpeg"), i, "c", 48, 64, "x"};
    REQUIRE((*writer)->Write(EncodeImageExample(r)).ok());
  }
  REQUIRE((*writer)->Close().ok());
}

std::string FetchMetrics(ServerProcess& server) {
  const std::string out = server.output();
  const size_t at = out.find("http://");
  REQUIRE(at != std::string::npos);
  const std::string url = out.substr(at, out.find('\n', at) - at);
  TempDir tmp;
  const std::string cmd = "curl -s -o " + tmp.file("body") + " '" + url + "'";
  REQUIRE(std::system(cmd.c_str()) == 0);
  return testing::ReadAll(tmp.file("body"));
}

struct RawStream {
  grpc::Status status;
  uint64_t skipped_in_batches = 0;
  std::string trailing_skipped;  // the trailing metadata's value; empty when absent
};

// Reads a whole stream with the generated stub, to see its trailing metadata.
RawStream ReadRaw(const std::string& address, const v1::StreamRequest& r) {
  auto stub =
      v1::DataService::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  auto reader = stub->StreamBatches(&context, r);
  RawStream out;
  v1::Batch b;
  while (reader->Read(&b)) out.skipped_in_batches += b.skipped_records();
  out.status = reader->Finish();
  const auto& trailing = context.GetServerTrailingMetadata();
  auto it = trailing.find(kSkippedRecordsKey);
  if (it != trailing.end())
    out.trailing_skipped = std::string(it->second.data(), it->second.size());
  return out;
}

TEST_CASE("SkipsAfterTheLastFullBatchAreCountedInTrailersGetStatsAndMetrics") {
  TempDir dir;
  WriteMixedShard(dir, 44, [](int i) { return i < 40; });  // 5 full batches, then 4 bad
  ServerProcess server({"--config", WriteConfig(dir, "    drop_remainder: true\n")});
  REQUIRE(server.running());
  const RawStream s = ReadRaw(server.address(), Request());
  REQUIRE(s.status.ok());
  CHECK(s.skipped_in_batches == 0);
  CHECK(s.trailing_skipped == "4");
  auto stats = Connect(server.address())->GetStats("train");
  REQUIRE(stats.ok());
  REQUIRE(stats->datasets_size() == 1);
  CHECK(stats->datasets(0).skipped_records() == 4);
  CHECK(stats->datasets(0).images_served() == 40);
  CHECK(FetchMetrics(server).find("sluice_skipped_records_total{dataset=\"train\"} 4\n") !=
        std::string::npos);
  // The C++ client reads the trailers too.
  auto stream = Connect(server.address())->Stream(Request());
  REQUIRE(stream.ok());
  Got got = ReadAll(**stream);
  REQUIRE(got.status.ok());
  CHECK(got.labels.size() == 40);
  CHECK((*stream)->skipped_after_last_batch() == 4);
}

// What an object-detection shard holds: its labels are per box, under image/object/class/label.
std::string DetectionExample(const std::string& jpeg, int64_t label) {
  v1::Example ex;
  auto& f = *ex.mutable_features()->mutable_feature();
  f["image/encoded"].mutable_bytes_list()->add_value(jpeg);
  f["image/format"].mutable_bytes_list()->add_value("jpeg");
  f["image/height"].mutable_int64_list()->add_value(48);
  f["image/width"].mutable_int64_list()->add_value(64);
  f["image/object/class/label"].mutable_int64_list()->add_value(label);
  f["image/object/bbox/xmin"].mutable_float_list()->add_value(0.1f);
  f["image/object/bbox/xmax"].mutable_float_list()->add_value(0.9f);
  return ex.SerializeAsString();
}

TEST_CASE("AnEpochWithNothingUsableFailsTheStreamNamingTheKeysTheRecordsHold") {
  TempDir dir;
  {
    auto writer = TFRecordWriter::Create(dir.file("shard-0.tfrecord"));
    REQUIRE(writer.ok());
    const std::string jpeg = testing::IdJpeg(1);
    for (int i = 0; i < 20; ++i) REQUIRE((*writer)->Write(DetectionExample(jpeg, i % 3)).ok());
    REQUIRE((*writer)->Close().ok());
  }
  ServerProcess server({"--config", WriteConfig(dir)});
  REQUIRE(server.running());
  auto stream = Connect(server.address())->Stream(Request());
  Status status = stream.ok() ? ReadAll(**stream).status : stream.status();
  INFO(status.ToString());
  CHECK(status.code() == StatusCode::kInvalidArgument);
  const std::string& m = status.message();
  CHECK(m.find("no record of epoch 0 could be used (all 20 skipped): 20x feature "
               "'image/class/label' missing from record") != std::string::npos);
  CHECK(m.find("image/object/class/label") != std::string::npos);
  CHECK(m.find(dir.file("shard-0.tfrecord") + ":") != std::string::npos);
  auto stats = Connect(server.address())->GetStats("train");
  REQUIRE(stats.ok());
  CHECK(stats->datasets(0).skipped_records() == 20);
}

TEST_CASE("AnEpochSkippingMoreThanSkipWarnPercentIsLoggedOnceWithItsReasons") {
  TempDir dir;
  WriteMixedShard(dir, 40, [](int i) { return i % 5 != 0; });  // 8 of 40 bad: 20%
  ServerProcess server({"--config", WriteConfig(dir, "", "", /*epochs=*/2)});
  REQUIRE(server.running());
  auto stream = Connect(server.address())->Stream(Request());
  REQUIRE(stream.ok());
  REQUIRE(ReadAll(**stream).status.ok());
  stream->reset();
  server.Stop(SIGTERM);
  const std::string out = server.output();
  INFO(out);
  CHECK(out.find("WARNING: dataset 'train', job 'private-") != std::string::npos);
  CHECK(out.find("epoch 0 skipped 8 of 40 records (20%, over skip_warn_percent 10%): 8x ") !=
        std::string::npos);
  CHECK(out.find("epoch 1 skipped 8 of 40 records") != std::string::npos);

  // Under the configured share: nothing is logged.
  TempDir quiet;
  WriteMixedShard(quiet, 40, [](int i) { return i % 5 != 0; });
  ServerProcess calm({"--config", WriteConfig(quiet, "    skip_warn_percent: 25\n")});
  REQUIRE(calm.running());
  auto s2 = Connect(calm.address())->Stream(Request());
  REQUIRE(s2.ok());
  REQUIRE(ReadAll(**s2).status.ok());
  s2->reset();
  calm.Stop(SIGTERM);
  CHECK(calm.output().find("WARNING") == std::string::npos);
}

TEST_CASE("NegativeLabelsAndLabelsPastTheDatasetsNumClassesAreSkippedAndCounted") {
  TempDir dir;
  testing::WriteTestShards(dir, 1, 40);  // labels 0..39
  ServerProcess server(
      {"--config", WriteConfig(dir, "    label_offset: -1\n", "  num_classes: 30\n")});
  REQUIRE(server.running());
  auto stream = Connect(server.address())->Stream(Request());
  REQUIRE(stream.ok());
  Got got = ReadAll(**stream);
  REQUIRE(got.status.ok());
  // Record 0 becomes -1 and records 31..39 become 30..38: only 0..29 are delivered.
  CHECK(EachLabelOnce(got.labels, 30));
  stream->reset();
  auto stats = Connect(server.address())->GetStats("train");
  REQUIRE(stats.ok());
  CHECK(stats->datasets(0).skipped_records() == 10);
}

TEST_CASE("AResumedStreamOverATamperedIndexDeliversEveryRecordOnceAndCountsTheFallback") {
  TempDir dir;
  auto shards = testing::WriteTestShards(dir, 1, 64);
  std::vector<IndexEntry> merged = shards.index[0];
  merged[5].length += merged[6].length;  // still tiles the file
  merged.erase(merged.begin() + 6);
  REQUIRE(WriteRecordIndex(IndexPathFor(shards.paths[0]), merged).ok());
  ServerProcess server({"--config", WriteConfig(dir)});
  REQUIRE(server.running());
  auto client = Connect(server.address());
  // The first 2 batches (records 0..15), then a resumed stream from there.
  auto first = client->Stream(Request());
  REQUIRE(first.ok());
  Got head = ReadAll(**first, 2);
  REQUIRE(head.status.ok());
  REQUIRE(head.metas.size() == 2);
  first->reset();
  v1::StreamRequest r = Request();
  r.mutable_start_position()->set_epoch(0);
  r.mutable_start_position()->set_index(2);
  r.mutable_start_position()->set_end_record(head.metas[1].end_record);
  auto rest = client->Stream(r);
  REQUIRE(rest.ok());
  ReceivedBatch b;
  bool end = false;
  REQUIRE((*rest)->Next(&b, &end).ok());
  REQUIRE(!end);
  std::vector<int32_t> labels = head.labels;
  labels.insert(labels.end(), b.labels.begin(), b.labels.end());
  // While the resumed job runs, its stats show the fallback.
  auto stats = client->GetStats("train");
  REQUIRE(stats.ok());
  uint64_t fallbacks = 0;
  for (const v1::JobStats& j : stats->jobs()) fallbacks += j.record_index_fallbacks();
  CHECK(fallbacks == 1);
  Got tail = ReadAll(**rest);
  REQUIRE(tail.status.ok());
  labels.insert(labels.end(), tail.labels.begin(), tail.labels.end());
  CHECK(EachLabelOnce(labels, 64));
  rest->reset();
  server.Stop(SIGTERM);
  CHECK(server.output().find(IndexPathFor(shards.paths[0]) + ":6 (record at " +
                             std::to_string(shards.index[0][5].offset)) != std::string::npos);
}

}  // namespace
}  // namespace sluice
