// A `sluice serve`'s memory budget holds whatever the data: its peak RSS (VmHWM) stays within
// what the process holds anyway plus each stream's job budget, under a record far larger than a
// job's budget, under progressive and baseline decompression bombs, under a shuffle buffer of
// large records, and under 16 streams whose consumers stop reading.
//
// What no budget counts (code, gRPC, oneTBB, thread stacks: ~25 MB with one stream, ~60-80 MB
// with eight) is measured first, as the peak after a warm-up of as many streams of small images:
// the baseline. Each stream is a private job with its dataset's memory_budget_bytes (64 MiB, 32
// MiB for the sixteen stalled streams), so the bound is baseline + streams x job budget + a
// margin for the allocator's slack (kMarginPercent of the budgets, kMinMarginBytes at least).
// Before the fix an oversized record or a bomb took the server to 0.7-2 GB here, and 16 records of
// 12 MB in a shuffle buffer of 16 to 213 MiB with one stream (bound ~100 MiB).

#include <zlib.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "formats/crc32c.h"
#include "formats/image_example.h"
#include "formats/png_codec.h"
#include "formats/record_index.h"
#include "formats/tfrecord_reader.h"
#include "formats/tfrecord_writer.h"
#include "tests/jpeg_test_images.h"
#include "tests/png_test_images.h"
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
using testing::WriteTestShards;

constexpr int64_t kServerBudget = int64_t{512} << 20;
constexpr int64_t kMiB = int64_t{1} << 20;

// Peak resident set size of a process (VmHWM), in bytes.
int64_t PeakRssBytes(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    long kb = 0;  // NOLINT(google-runtime-int)
    if (std::sscanf(line.c_str(), "VmHWM: %ld kB", &kb) == 1) return int64_t{kb} * 1024;
  }
  return -1;
}

// The allocator's slack: freed records' chunks kept for reuse, arenas per thread.
constexpr int64_t kMarginPercent = 10;
constexpr int64_t kMinMarginBytes = 16 * kMiB;

// Peak RSS after `streams` concurrent streams of dataset "warm" (small images): what the process
// holds whatever the budget.
int64_t WarmUpBaseline(const ServerProcess& server, int streams);

// The peak RSS is within the baseline and each stream's job budget (see the top).
void CheckPeakWithinBudget(const ServerProcess& server, int64_t baseline, int streams,
                           int64_t job_budget) {
  const int64_t peak = PeakRssBytes(server.pid());
  const int64_t budgets = streams * job_budget;
  const int64_t bound =
      baseline + budgets + std::max(kMinMarginBytes, budgets * kMarginPercent / 100);
  // For the record (README "Reliability" quotes these).
  std::fprintf(stderr,
               "sluice serve peak RSS: %lld MiB; baseline %lld MiB + %d x %lld MiB = %lld MiB\n",
               static_cast<long long>(peak / kMiB),      // NOLINT(google-runtime-int)
               static_cast<long long>(baseline / kMiB),  // NOLINT(google-runtime-int)
               streams,
               static_cast<long long>(job_budget / kMiB),             // NOLINT(google-runtime-int)
               static_cast<long long>((baseline + budgets) / kMiB));  // NOLINT(google-runtime-int)
  INFO("peak RSS " << peak / kMiB << " MiB against a baseline of " << baseline / kMiB << " MiB + "
                   << streams << " x " << job_budget / kMiB << " MiB + " << kMarginPercent
                   << "% (16 MiB at least)");
  CHECK(baseline > 0);
  CHECK(peak <= bound);
}

void PutFixed64(std::string* s, uint64_t v) {
  for (int i = 0; i < 8; ++i) s->push_back(static_cast<char>(v >> (8 * i)));
}
void PutFixed32(std::string* s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s->push_back(static_cast<char>(v >> (8 * i)));
}

// Writes one TFRecord frame of `record` at the end of out, its long runs of zeros seeked over: the
// file reads the same, but the disk holds only the other bytes (a hole reads as zeros). Returns
// its index entry.
IndexEntry WriteSparseFrame(std::ofstream& out, std::string_view record) {
  const auto offset = static_cast<uint64_t>(out.tellp());
  std::string header;
  PutFixed64(&header, record.size());
  PutFixed32(&header, crc32c::Mask(crc32c::Value(header.data(), 8)));
  out << header;
  constexpr size_t kBlock = 1 << 16;
  for (size_t i = 0; i < record.size(); i += kBlock) {
    const std::string_view block = record.substr(i, kBlock);
    if (block.size() == kBlock && block.find_first_not_of('\0') == std::string_view::npos) {
      out.seekp(static_cast<std::streamoff>(kBlock), std::ios::cur);
    } else {
      out.write(block.data(), static_cast<std::streamsize>(block.size()));
    }
  }
  std::string footer;
  PutFixed32(&footer, crc32c::Mask(crc32c::Value(record.data(), record.size())));
  out << footer;
  return IndexEntry{offset, kTFRecordHeaderBytes + record.size() + kTFRecordFooterBytes};
}

std::string SmallRecord(int label) {
  const std::string jpeg = testing::IdJpeg(label);
  return EncodeImageExample(ImageRecord{jpeg, label, "c", 48, 64, "x.jpg"});
}

// A TFRecord file of one valid record of `bytes` zeros (not an Example), framed between two small
// image records with labels first_label and first_label + 1. The zeros are a hole: neither the
// test nor the disk holds them.
void WriteOversizedRecordShard(const std::string& path, uint64_t bytes, int first_label) {
  std::ofstream out(path, std::ios::binary);
  WriteSparseFrame(out, SmallRecord(first_label));
  std::string header;
  PutFixed64(&header, bytes);
  PutFixed32(&header, crc32c::Mask(crc32c::Value(header.data(), 8)));
  out << header;
  const std::string zeros(1 << 20, '\0');
  uint32_t crc = 0;
  for (uint64_t done = 0; done < bytes;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(zeros.size(), bytes - done));
    crc = crc32c::Extend(crc, zeros.data(), n);
    done += n;
  }
  out.seekp(static_cast<std::streamoff>(bytes), std::ios::cur);
  std::string footer;
  PutFixed32(&footer, crc32c::Mask(crc));
  out << footer;
  WriteSparseFrame(out, SmallRecord(first_label + 1));
  REQUIRE(out.good());
}

// A width x height JPEG of smooth colour: a few hundred KB whatever its size, as a bomb is.
// Progressive 4:4:4 makes libjpeg hold the coefficients of the whole image to decode it (6 bytes
// per pixel); baseline 4:2:0 needs only a few rows.
std::string BombJpeg(int width, int height, bool progressive) {
  return testing::EncodeRowsWithLibjpeg(
      width, height, progressive, /*subsampled=*/!progressive, 50,
      [width](int y, uint8_t* samples) {
        for (int x = 0; x < width; ++x) {
          samples[3 * x] = static_cast<uint8_t>(x / 64);
          samples[3 * x + 1] = static_cast<uint8_t>(y / 64);
          samples[3 * x + 2] = 128;
        }
      });
}

// Small images for the warm-up streams, written once per test binary.
const TempDir& WarmDir() {
  static const TempDir* dir = [] {
    auto* d = new TempDir;
    WriteTestShards(*d, 2, 16);
    return d;
  }();
  return *dir;
}

// Datasets "train" (skipping bad records) and "strict" (failing on them) of the
// shard-*.tfrecord files in dir, and "warm" of WarmDir()'s; each stream is a job of its own with
// job_budget of the server's kServerBudget.
std::string WriteConfig(const TempDir& dir, int64_t job_budget, const std::string& pipeline_extra,
                        int batch_size = 8, int image_size = 32, int threads = 2) {
  std::string config = dir.file("sluice.textproto");
  auto dataset = [&](const std::string& name, const std::string& files, const std::string& extra) {
    return "datasets {\n  name: \"" + name +
           "\"\n  num_classes: 1000\n  pipeline {\n"
           "    files: \"" +
           files + "\"\n    batch_size: " + std::to_string(batch_size) +
           "\n    image_height: " + std::to_string(image_size) +
           "\n    threads: " + std::to_string(threads) +
           "\n    seed: 7\n    epochs: 1\n    memory_budget_bytes: " + std::to_string(job_budget) +
           "\n" + extra + "  }\n}\n";
  };
  const std::string files = dir.file("shard-*.tfrecord");
  testing::WriteAll(
      config,
      "listen: \"127.0.0.1:0\"\nmemory_budget_bytes: " + std::to_string(kServerBudget) + "\n" +
          dataset("train", files, pipeline_extra) +
          dataset("strict", files, pipeline_extra + "    error_policy: ERROR_POLICY_FAIL\n") +
          dataset("warm", WarmDir().file("shard-*.tfrecord"), ""));
  return config;
}

// The status a stream of "strict" ends with.
Status StrictStreamStatus(const ServerProcess& server) {
  auto client = Connect(server.address());
  auto stream = client->Stream(Request("strict"));
  if (!stream.ok()) return stream.status();
  return ReadAll(**stream).status;
}

// `streams` concurrent streams of their own jobs of `dataset`, each read to its end.
std::vector<Got> ReadStreams(const ServerProcess& server, int streams,
                             const std::string& dataset = "train") {
  std::vector<Got> got(streams);
  std::vector<std::thread> threads;
  for (int i = 0; i < streams; ++i) {
    threads.emplace_back([&, i] {
      auto client = Connect(server.address());
      auto stream = client->Stream(Request(dataset));
      if (!stream.ok()) {
        got[i].status = stream.status();
        return;
      }
      got[i] = ReadAll(**stream);
    });
  }
  for (std::thread& t : threads) t.join();
  return got;
}

int64_t WarmUpBaseline(const ServerProcess& server, int streams) {
  for (const Got& g : ReadStreams(server, streams, "warm")) REQUIRE(g.status.ok());
  return PeakRssBytes(server.pid());
}

// Each stream's epoch: every label of 0..records-1 once but the refused ones, and `skipped`
// skips counted in its batches.
void CheckEpochs(const std::vector<Got>& got, int records, const std::vector<int32_t>& refused,
                 uint64_t skipped) {
  std::vector<int32_t> expected;
  for (int32_t i = 0; i < records; ++i) {
    if (std::find(refused.begin(), refused.end(), i) == refused.end()) expected.push_back(i);
  }
  for (const Got& g : got) {
    INFO(g.status.ToString());
    REQUIRE(g.status.ok());
    REQUIRE(!g.metas.empty());
    uint64_t skips = 0;  // each batch counts those skipped while it was filled
    for (const BatchMeta& m : g.metas) skips += m.skipped_records;
    CHECK(skips == skipped);
    CHECK(testing::Sorted(g.labels) == expected);
  }
}

// Before the fix the reader grew its buffer to the record and the source copied it out again:
// 2 x 320 MB per stream.
void OversizedRecordCase(int streams) {
  TempDir dir;
  WriteTestShards(dir, 2, 16);
  WriteOversizedRecordShard(dir.file("shard-big.tfrecord"), uint64_t{320} << 20, 32);
  ServerProcess server({"--config", WriteConfig(dir, 64 * kMiB, "")});
  REQUIRE(server.running());
  const int64_t rss_baseline = WarmUpBaseline(server, streams);
  std::vector<Got> got = ReadStreams(server, streams);
  // Labels 0..33; the big record between 32 and 33 carries none and is the one skip.
  CheckEpochs(got, 34, {}, 1);
  Status strict = StrictStreamStatus(server);
  INFO(strict.ToString());
  CHECK(strict.code() == StatusCode::kResourceExhausted);
  // Its offset: after the first small record's frame.
  CHECK(strict.message().find(dir.file("shard-big.tfrecord") + ":") != std::string::npos);
  CHECK(strict.message().find("of 335544320 bytes is over the limit of") != std::string::npos);
  CheckPeakWithinBudget(server, rss_baseline, streams, 64 * kMiB);
}

TEST_CASE("OversizedRecordIsRefusedFromItsLengthWithOneStream") { OversizedRecordCase(1); }

TEST_CASE("OversizedRecordIsRefusedFromItsLengthWithFourStreams") { OversizedRecordCase(4); }

// Writes shard-bombs.tfrecord: the given JPEGs, labelled from first_label on.
void WriteBombShard(const TempDir& dir, const std::vector<std::string>& jpegs, int first_label) {
  auto writer = TFRecordWriter::Create(dir.file("shard-bombs.tfrecord"));
  REQUIRE(writer.ok());
  int label = first_label;
  for (const std::string& jpeg : jpegs) {
    REQUIRE(
        (*writer)->Write(EncodeImageExample(ImageRecord{jpeg, label++, "c", 0, 0, "b.jpg"})).ok());
  }
  REQUIRE((*writer)->Close().ok());
}

// Progressive 8000x8000 4:4:4 (~170 KB): 384 MB of coefficients per decode, before the fix held
// by every decode thread of every job at once (two at a time are over the bound). Refused from its
// header (over the job's decode share). Baseline 8000x8000: decoded at 1/8 scale in a few MB,
// within the budget; served.
TEST_CASE("ProgressiveBombIsRefusedAndBaselineBombDecodedWithinTheBudget") {
  TempDir dir;
  WriteTestShards(dir, 2, 16);
  const std::string progressive = BombJpeg(8000, 8000, true);
  const std::string baseline = BombJpeg(8000, 8000, false);
  WriteBombShard(dir, {progressive, baseline, progressive, baseline}, 32);
  ServerProcess server({"--config", WriteConfig(dir, 64 * kMiB, "")});
  REQUIRE(server.running());
  const int64_t rss_baseline = WarmUpBaseline(server, 8);
  std::vector<Got> got = ReadStreams(server, 8);
  CheckEpochs(got, 36, {32, 34}, 2);
  Status strict = StrictStreamStatus(server);
  INFO(strict.ToString());
  CHECK(strict.code() == StatusCode::kResourceExhausted);
  CHECK(strict.message().find(dir.file("shard-bombs.tfrecord") + ":") != std::string::npos);
  CHECK(strict.message().find("8000x8000 progressive JPEG: decoding it needs an estimated") !=
        std::string::npos);
  CHECK(strict.message().find("the memory budget leaves for decoding") != std::string::npos);
  CheckPeakWithinBudget(server, rss_baseline, 8, 64 * kMiB);
}

// The DECODED cache decodes whole images: a 9990x9990 baseline JPEG (just under max_pixels) is
// 300 MB of pixels, before the fix allocated by every decode thread of every job. Refused from its
// header.
TEST_CASE("BaselineBombIsRefusedBeforeAFullDecodeForTheDecodedCache") {
  TempDir dir;
  WriteTestShards(dir, 2, 16);
  const std::string baseline = BombJpeg(9990, 9990, false);
  WriteBombShard(dir, {baseline, baseline, baseline}, 32);
  ServerProcess server(
      {"--config", WriteConfig(dir, 64 * kMiB, "    cache { mode: CACHE_DECODED }\n")});
  REQUIRE(server.running());
  const int64_t rss_baseline = WarmUpBaseline(server, 8);
  std::vector<Got> got = ReadStreams(server, 8);
  CheckEpochs(got, 35, {32, 33, 34}, 3);
  CheckPeakWithinBudget(server, rss_baseline, 8, 64 * kMiB);
}

// A width x 1 RGBA PNG of a smooth pattern (a few hundred KB), written here: libpng's writer
// stops at a million columns.
std::string WideRgbaPng(int width) {
  std::string raw(1 + size_t{4} * width, '\0');  // filter byte 0, then the samples
  for (size_t i = 1; i < raw.size(); ++i) raw[i] = static_cast<char>((i - 1) / 64 % 251);
  uLongf n = compressBound(static_cast<uLong>(raw.size()));
  std::string z(n, '\0');
  REQUIRE(compress2(reinterpret_cast<Bytef*>(z.data()), &n,
                    reinterpret_cast<const Bytef*>(raw.data()), static_cast<uLong>(raw.size()),
                    6) == Z_OK);
  z.resize(n);
  std::string ihdr;
  for (uint32_t v : {static_cast<uint32_t>(width), uint32_t{1}}) {
    for (int shift = 24; shift >= 0; shift -= 8) ihdr += static_cast<char>(v >> shift);
  }
  ihdr += std::string("\x08\x06\x00\x00\x00", 5);  // 8-bit RGBA, not interlaced
  return std::string(kPngSignature) + testing::PngChunk("IHDR", ihdr) +
         testing::PngChunk("IDAT", z) + testing::PngChunk("IEND", "");
}

// Sixteen 4,000,000 x 1 RGBA PNGs composited by sixteen decode threads: the decode share (a
// quarter of what the batch pool leaves, ~110 MiB) admits one decode at a time (92 MB estimated),
// and records and batches are small, so past the baseline the server holds no more than one
// decode's estimate. Before the fix each thread then kept its 16 MB row of RGBA, which no budget
// counts: 0.48 GB with eight threads under a 700 MB budget (the reviewer's `sluice profile`).
TEST_CASE("WideCompositedPngRowsAreNotKeptPastTheirDecode") {
  TempDir dir;
  WriteTestShards(dir, 2, 16);
  const std::string png = WideRgbaPng(4'000'000);
  WriteBombShard(dir, std::vector<std::string>(16, png), 32);
  const int64_t budget = 448 * kMiB;
  // RSS is to show what the server holds, not what glibc keeps of what it freed: with its dynamic
  // mmap threshold, freed buffers of a few MB stay in each decode thread's arena, so the peak
  // depends on how many threads took turns (seen 40 MiB more under load). A fixed threshold of
  // 1 MiB returns every freed large buffer at once; a row a thread keeps is still counted.
  setenv("MALLOC_MMAP_THRESHOLD_", "1048576", 1);
  ServerProcess server({"--config", WriteConfig(dir, budget, "    alpha: ALPHA_COMPOSITE_WHITE\n",
                                                8, 32, /*threads=*/16)});
  unsetenv("MALLOC_MMAP_THRESHOLD_");
  REQUIRE(server.running());
  const int64_t rss_baseline = WarmUpBaseline(server, 1);
  CheckEpochs(ReadStreams(server, 1), 48, {}, 0);
  Result<PngHeader> header = ReadPngHeader(png);
  REQUIRE(header.ok());
  const int64_t decode = EstimatePngDecodeBytes(*header, Alpha::kCompositeWhite);
  const int64_t peak = PeakRssBytes(server.pid());
  std::fprintf(stderr, "sluice serve peak RSS: %lld MiB; baseline %lld MiB + one decode %lld MiB\n",
               static_cast<long long>(peak / kMiB),          // NOLINT(google-runtime-int)
               static_cast<long long>(rss_baseline / kMiB),  // NOLINT(google-runtime-int)
               static_cast<long long>(decode / kMiB));       // NOLINT(google-runtime-int)
  CHECK(peak <= rss_baseline + decode + kMinMarginBytes);
}

// 16 streams of their own jobs, each consumer taking one batch and then nothing: every job fills
// its prefetch queue, batch pool and in-flight window and waits. Records of ~100 KB and batches
// of 32 images of 96x96 make each job hold tens of MB.
TEST_CASE("SixteenStalledStreamsStayWithinTheBudget") {
  TempDir dir;
  WriteTestShards(dir, 4, 64, 320, 240, /*noisy=*/true);
  ServerProcess server({"--config", WriteConfig(dir, 32 * kMiB, "", 32, 96)});
  REQUIRE(server.running());
  const int64_t rss_baseline = WarmUpBaseline(server, 16);
  auto client = Connect(server.address());
  std::vector<std::unique_ptr<BatchStream>> streams;
  for (int i = 0; i < 16; ++i) {
    auto stream = client->Stream(Request());
    REQUIRE(stream.ok());
    ReceivedBatch b;
    bool end = false;
    REQUIRE((*stream)->Next(&b, &end).ok());
    REQUIRE_FALSE(end);
    streams.push_back(std::move(*stream));
  }
  // Until every job's prefetch queue is full: all the server can hold for a stalled consumer.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  bool full = false;
  while (!full && std::chrono::steady_clock::now() < deadline) {
    auto stats = client->GetStats();
    REQUIRE(stats.ok());
    full = stats->jobs_size() == 16;
    for (const auto& job : stats->jobs()) full = full && job.queue_fill() == job.queue_capacity();
    if (!full) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  CHECK(full);
  // The decoders' reservations are accounted as the "decode" pool, against its share.
  auto stats = client->GetStats();
  REQUIRE(stats.ok());
  for (const auto& job : stats->jobs()) {
    bool seen = false;
    for (const auto& pool : job.pools()) {
      if (pool.name() != "decode") continue;
      seen = true;
      CHECK(pool.limit_bytes() > 0);
      CHECK(pool.peak_bytes() > 0);
      CHECK(pool.peak_bytes() <= pool.limit_bytes());
    }
    CHECK(seen);
  }
  CheckPeakWithinBudget(server, rss_baseline, 16, 32 * kMiB);
}

// 32 records, every other one a small image padded to 12 MB (the padding a hole of zeros in the
// filename feature), with a record index. Labels 0..31.
void WritePaddedShard(const std::string& path) {
  std::ofstream out(path, std::ios::binary);
  std::vector<IndexEntry> index;
  const std::string padding(12 * kMiB, '\0');
  for (int label = 0; label < 32; ++label) {
    const std::string jpeg = testing::IdJpeg(label);
    const std::string_view filename = label % 2 == 0 ? std::string_view(padding) : "x.jpg";
    index.push_back(
        WriteSparseFrame(out, EncodeImageExample(ImageRecord{jpeg, label, "c", 48, 64, filename})));
  }
  REQUIRE(out.good());
  out.close();
  REQUIRE(WriteRecordIndex(IndexPathFor(path), index).ok());
}

// The review's case: records of 12 MB through a shuffle buffer of 16 with a job budget of 64 MiB
// held 16 of them at once (213 MiB). Its byte share (a quarter of what the budget leaves) makes it
// emit early instead, logged (at most once a minute); and the order depends only on the records'
// lengths and the share, so a stream resumed after 2 batches with the share its batches carry
// (passing over the records before its start unread, from the record index) delivers exactly the
// batches that followed them.
TEST_CASE("ShuffleBufferOfLargeRecordsKeepsToItsByteShareAndResumesExactly") {
  TempDir dir;
  WritePaddedShard(dir.file("shard-0.tfrecord"));
  ServerProcess server(
      {"--config", WriteConfig(dir, 64 * kMiB, "    shuffle { buffer_size: 16 }\n")});
  REQUIRE(server.running());
  const int64_t rss_baseline = WarmUpBaseline(server, 1);
  auto client = Connect(server.address());
  auto first = client->Stream(Request());
  REQUIRE(first.ok());
  const Got full = ReadAll(**first);
  REQUIRE(full.status.ok());
  CHECK(EachLabelOnce(full.labels, 32));
  REQUIRE(full.metas.size() == 4);
  CHECK(full.labels != testing::Iota(32));  // shuffled
  first->reset();
  CheckPeakWithinBudget(server, rss_baseline, 1, 64 * kMiB);

  // The batches carry the share that made their order; the resume carries it back, as the
  // clients do.
  CHECK(full.metas[1].shuffle_bytes > 0);
  v1::StreamRequest r = Request();
  r.mutable_start_position()->set_epoch(0);
  r.mutable_start_position()->set_index(2);
  r.mutable_start_position()->set_end_record(full.metas[1].end_record);
  r.mutable_start_position()->set_shuffle_bytes(full.metas[1].shuffle_bytes);
  auto rest = client->Stream(r);
  REQUIRE(rest.ok());
  const Got tail = ReadAll(**rest);
  REQUIRE(tail.status.ok());
  CHECK(tail.labels == std::vector<int32_t>(full.labels.begin() + 16, full.labels.end()));
  rest->reset();

  server.Stop(SIGTERM);
  const std::string log = server.output();
  CHECK(log.find("the shuffle buffer held ") != std::string::npos);
  CHECK(log.find("records at most of buffer_size 16: its byte share ") != std::string::npos);
  // Each job logs its shares at start.
  CHECK(log.find(": memory budget 67108864 bytes: records in flight ") != std::string::npos);
}

// Once the byte share binds, the order depends on it, and the share on the dataset's budget: a
// stream resumed on a server whose budget gives another share would cut a different permutation at
// end_record, losing and repeating records. It is refused, naming both shares; a position without
// a share (built by hand, or by an older client) is accepted as before.
TEST_CASE("ResumeUnderAnotherShuffleShareIsRefusedNamingBoth") {
  TempDir dir;
  WritePaddedShard(dir.file("shard-0.tfrecord"));
  BatchMeta after;
  {
    ServerProcess server(
        {"--config", WriteConfig(dir, 64 * kMiB, "    shuffle { buffer_size: 16 }\n")});
    REQUIRE(server.running());
    auto client = Connect(server.address());
    v1::StreamRequest three = Request();
    three.set_epochs(3);
    {
      auto stream = client->Stream(three);
      REQUIRE(stream.ok());
      const Got full = ReadAll(**stream);
      REQUIRE(full.status.ok());
      REQUIRE(full.metas.size() == 12);
      after = full.metas[1];
    }
    // Every epoch is capped; the warning is logged once a minute at most, not once per epoch.
    server.Stop(SIGTERM);
    const std::string log = server.output();
    const std::string warning = "the shuffle buffer held ";
    const size_t first = log.find(warning);
    CHECK(first != std::string::npos);
    CHECK(log.find(warning, first + 1) == std::string::npos);
  }
  REQUIRE(after.shuffle_bytes > 0);
  ServerProcess server(
      {"--config", WriteConfig(dir, 96 * kMiB, "    shuffle { buffer_size: 16 }\n")});
  REQUIRE(server.running());
  auto client = Connect(server.address());
  v1::StreamRequest r = Request();
  r.mutable_start_position()->set_epoch(0);
  r.mutable_start_position()->set_index(2);
  r.mutable_start_position()->set_end_record(after.end_record);
  r.mutable_start_position()->set_shuffle_bytes(after.shuffle_bytes);
  Status refused;
  {
    auto stream = client->Stream(r);
    refused = stream.ok() ? ReadAll(**stream).status : stream.status();
  }
  CHECK(refused.code() == StatusCode::kFailedPrecondition);
  const std::string named = "start_position.shuffle_bytes " + std::to_string(after.shuffle_bytes) +
                            " is not this job's shuffle share ";
  const size_t at = refused.message().find(named);
  REQUIRE(at != std::string::npos);
  const int64_t other = std::stoll(refused.message().substr(at + named.size()));
  CHECK(other > 0);
  CHECK(other != after.shuffle_bytes);
  CHECK(refused.message().find("resume with the same memory_budget_bytes, batch and image size, "
                               "prefetch and cache, or start the epoch over") != std::string::npos);

  // Without the share (a position made by hand) the resume is refused too once this job's share
  // binds before end_record: its order up to there would be a guess.
  r.mutable_start_position()->set_shuffle_bytes(0);
  Status guessed;
  {
    auto stream = client->Stream(r);
    guessed = stream.ok() ? ReadAll(**stream).status : stream.status();
  }
  CHECK(guessed.code() == StatusCode::kFailedPrecondition);
  CHECK(guessed.message().find("cannot resume at end_record " + std::to_string(after.end_record)) !=
        std::string::npos);

  // At end_record 0 nothing is cut: the epoch starts over under any share.
  r.mutable_start_position()->set_index(0);
  r.mutable_start_position()->set_end_record(0);
  r.mutable_start_position()->set_shuffle_bytes(after.shuffle_bytes);
  auto stream = client->Stream(r);
  REQUIRE(stream.ok());
  const Got whole = ReadAll(**stream);
  CHECK(whole.status.ok());
  CHECK(whole.labels.size() == 32);
}

}  // namespace
}  // namespace sluice
