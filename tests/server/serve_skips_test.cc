// Nothing a `sluice serve` stream skips goes unseen: skips after the last batch reach GetStats,
// /metrics and the stream's trailing metadata; an epoch with nothing usable fails naming what
// the records hold; many skips are logged; bad labels are skipped; a lying record index is caught.
#include <grpcpp/grpcpp.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <string>
#include <thread>
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
using serve_testing::FetchMetrics;
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

TEST_CASE("TwoConsumersOfASharedJobGetItsTrailingSkipsExactlyOnce") {
  TempDir dir;
  WriteMixedShard(dir, 44, [](int i) { return i < 40; });  // 5 full batches, then 4 bad
  ServerProcess server({"--config", WriteConfig(dir, "    drop_remainder: true\n")});
  REQUIRE(server.running());
  v1::StreamRequest r = Request();
  r.set_job_name("both");
  RawStream a, b;
  std::thread other([&] { b = ReadRaw(server.address(), r); });
  a = ReadRaw(server.address(), r);
  other.join();
  REQUIRE(a.status.ok());
  REQUIRE(b.status.ok());
  CHECK(a.skipped_in_batches + b.skipped_in_batches == 0);
  // One of them carries the 4 trailing skips, the other none.
  CHECK(((a.trailing_skipped == "4" && b.trailing_skipped.empty()) ||
         (b.trailing_skipped == "4" && a.trailing_skipped.empty())));
  auto stats = Connect(server.address())->GetStats("train");
  REQUIRE(stats.ok());
  CHECK(stats->datasets(0).skipped_records() == 4);
}

TEST_CASE("AStreamEndingInAnErrorCarriesItsTrailingSkipsAndTheClientCountsThem") {
  TempDir dir;
  // 16 good records (2 batches), then 10 bad: max_errors 5 fails the stream at the 6th.
  WriteMixedShard(dir, 26, [](int i) { return i < 16; });
  ServerProcess server({"--config", WriteConfig(dir, "    max_errors: 5\n")});
  REQUIRE(server.running());
  const RawStream raw = ReadRaw(server.address(), Request());
  CHECK(raw.status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(raw.status.error_message().find("more than max_errors = 5 bad records") !=
        std::string::npos);
  CHECK(raw.skipped_in_batches == 0);
  CHECK(raw.trailing_skipped == "6");
  // An error the client does not retry ends the stream: its trailer counts.
  auto stream = Connect(server.address())->Stream(Request());
  REQUIRE(stream.ok());
  Got got = ReadAll(**stream);
  CHECK(got.status.code() == StatusCode::kInvalidArgument);
  CHECK(got.labels.size() == 16);
  CHECK((*stream)->skipped_after_last_batch() == 6);
}

// Sums a GetStats answer's skipped_records of the running jobs, and says whether any is left.
struct JobsSkipped {
  uint64_t skipped = 0;
  int jobs = 0;
};
JobsSkipped RunningJobsSkipped(const v1::Stats& stats) {
  JobsSkipped out;
  for (const v1::JobStats& j : stats.jobs()) {
    out.skipped += j.skipped_records();
    ++out.jobs;
  }
  return out;
}

TEST_CASE("SkipsInBatchesAClientNeverReceivedAreCountedOnceInGetStatsAndMetrics") {
  // Records 40..49 do not decode: the job's sixth batch carries their 10 skips. The client reads
  // nothing and leaves: of batches this big the server writes a couple into gRPC's buffers, and
  // the sixth, ready in the prefetch queue, is never written; yet the pipeline skipped them.
  TempDir dir;
  WriteMixedShard(dir, 90, [](int i) { return i < 40 || i >= 50; });
  const std::string config = dir.file("sluice.textproto");
  testing::WriteAll(config,
                    "listen: \"127.0.0.1:0\"\nmetrics_address: \"127.0.0.1:0\"\n"
                    "job_linger_seconds: 1\n"
                    "datasets {\n  name: \"train\"\n  pipeline {\n    files: \"" +
                        dir.file("shard-*.tfrecord") +
                        "\"\n    batch_size: 8\n    image_height: 256\n"
                        "    threads: 2\n    epochs: 1\n    prefetch: 8\n"
                        "    memory_budget_bytes: 67108864\n  }\n}\n");
  ServerProcess server({"--config", config});
  REQUIRE(server.running());
  auto client = Connect(server.address());
  {
    auto stub = v1::DataService::NewStub(
        grpc::CreateChannel(server.address(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    v1::StreamRequest r = Request();
    r.set_job_name("left");  // shared: it lingers after its consumer leaves, then goes
    auto reader = stub->StreamBatches(&context, r);
    // The running job counts its skips as the pipeline makes them, and so does the dataset.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    for (;;) {
      REQUIRE(std::chrono::steady_clock::now() < deadline);
      auto stats = client->GetStats("train");
      REQUIRE(stats.ok());
      if (RunningJobsSkipped(*stats).skipped == 10) {
        CHECK(stats->datasets(0).skipped_records() == 10);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    context.TryCancel();
    reader->Finish();
  }
  // Once the job is gone its skips stay counted, once.
  v1::Stats stats;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (;;) {
    REQUIRE(std::chrono::steady_clock::now() < deadline);
    auto s = client->GetStats("train");
    REQUIRE(s.ok());
    stats = *s;
    if (RunningJobsSkipped(stats).jobs == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  CHECK(stats.datasets(0).skipped_records() == 10);
  CHECK(stats.datasets(0).images_served() < 40);  // the batch with the skips never went out
  CHECK(FetchMetrics(server).find("sluice_skipped_records_total{dataset=\"train\"} 10\n") !=
        std::string::npos);
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

TEST_CASE("AnEpochSkippingMoreThanSkipWarnPercentIsLoggedAtMostOnceAMinuteWithItsReasons") {
  TempDir dir;
  WriteMixedShard(dir, 40, [](int i) { return i % 5 != 0; });  // 8 of 40 bad: 20%
  ServerProcess server({"--config", WriteConfig(dir, "", "", /*epochs=*/3)});
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
  // Later epochs over the share within the minute are not logged again (with epochs: 0 they
  // would be, every epoch, forever).
  CHECK(out.find("epoch 1 skipped") == std::string::npos);
  CHECK(out.find("epoch 2 skipped") == std::string::npos);

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
  CHECK(calm.output().find("over skip_warn_percent") == std::string::npos);
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
  server.Stop(SIGTERM);
  // However few, labels past num_classes are logged: once per job, naming one of them.
  const std::string out = server.output();
  INFO(out);
  const std::string logged =
      "; records with such labels are skipped (this is logged once). If "
      "the labels run from 1 to num_classes, set label_offset: -1";
  const size_t at = out.find(logged);
  REQUIRE(at != std::string::npos);
  CHECK(out.find(logged, at + 1) == std::string::npos);
  CHECK(out.find(" + label_offset -1), not below num_classes 30" + logged) != std::string::npos);
  CHECK(out.find("sluice: WARNING: dataset 'train', job 'private-1': " +
                 dir.file("shard-0.tfrecord") + ":") != std::string::npos);
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
  auto rest = client->Stream(serve_testing::ResumeAfter(head));
  REQUIRE(rest.ok());
  ReceivedBatch b;
  bool end = false;
  REQUIRE((*rest)->Next(&b, &end).ok());
  REQUIRE(!end);
  std::vector<int32_t> labels = head.labels;
  labels.insert(labels.end(), b.labels.begin(), b.labels.end());
  // The dataset's count holds it whether the resumed job still runs or (its batches all read
  // ahead by the client) has ended; a running job shows it in its own stats too.
  auto stats = client->GetStats("train");
  REQUIRE(stats.ok());
  CHECK(stats->datasets(0).record_index_fallbacks() == 1);
  uint64_t fallbacks = 0;
  for (const v1::JobStats& j : stats->jobs()) fallbacks += j.record_index_fallbacks();
  CHECK(fallbacks <= 1);
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
