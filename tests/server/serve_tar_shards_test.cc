// `sluice serve` over WebDataset tar shards (written here by GNU tar, an independent writer):
// served by their names alone, batch for batch the same images and labels as the same samples in
// TFRecord shards; sharded across ranks and resumed mid-epoch with each sample once; the image key
// set to the members' extension; a shard cut between members served as far as it goes, warned of
// once; a resumed stream over indexed shards reading only the headers of the samples it passes
// over, ranks sharing an indexed shard reading only their own samples, a stale index falling back
// to reading, a TFRecord index beside a tar not used.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "formats/image_example.h"
#include "formats/record_index.h"
#include "formats/tfrecord_writer.h"
#include "tests/server/serve_fixture.h"

namespace sluice {
namespace {

using serve_testing::Connect;
using serve_testing::EachLabelOnce;
using serve_testing::Got;
using serve_testing::ReadAll;
using serve_testing::Request;
using serve_testing::StatsWhen;
using testing::ServerProcess;
using testing::TempDir;

// Tar shards dir/tar/shard-<f>.tar of sizes[f] samples each (members <key>.jpg and <key>.cls,
// written by GNU tar), and the same samples as dir/tfrecord/shard-<f>.tfrecord: labelled (and
// drawn, IdJpeg) by global sample id from 0 in file order. With bin_bytes > 0 each tar sample
// also has a member <key>.bin of that many bytes (bin_bytes + grow for the sample whose id is
// grow_id): a payload that rides along unused.
void WriteShards(const TempDir& dir, const std::vector<int>& sizes, size_t bin_bytes = 0,
                 int grow_id = -1, size_t grow = 0) {
  for (const char* sub : {"src", "tar", "tfrecord"})
    std::filesystem::create_directory(dir.file(sub));
  int id = 0;
  for (size_t f = 0; f < sizes.size(); ++f) {
    auto writer =
        TFRecordWriter::Create(dir.file("tfrecord/shard-" + std::to_string(f) + ".tfrecord"));
    REQUIRE(writer.ok());
    std::string members;
    for (int r = 0; r < sizes[f]; ++r, ++id) {
      const std::string jpeg = testing::IdJpeg(id);
      const std::string key = "sample" + std::to_string(100 + id);
      testing::WriteAll(dir.file("src/" + key + ".jpg"), jpeg);
      testing::WriteAll(dir.file("src/" + key + ".cls"), std::to_string(id) + "\n");
      members += " " + key + ".jpg " + key + ".cls";
      if (bin_bytes > 0) {
        const size_t n = bin_bytes + (id == grow_id ? grow : 0);
        testing::WriteAll(dir.file("src/" + key + ".bin"), std::string(n, static_cast<char>(id)));
        members += " " + key + ".bin";
      }
      REQUIRE((*writer)->Write(EncodeImageExample(ImageRecord{jpeg, id, "c", 48, 64, "x"})).ok());
    }
    REQUIRE((*writer)->Close().ok());
    const std::string tar = dir.file("tar/shard-" + std::to_string(f) + ".tar");
    REQUIRE(
        testing::RunCommand("tar", "-C " + dir.file("src") + " -cf " + tar + members).exit_code ==
        0);
  }
}

// A config serving dir/tar/*.tar as dataset "train" (batches of 4 at 32 x 32, one epoch unless
// `extra` says otherwise; `extra` goes into its pipeline).
std::string WriteConfig(const TempDir& dir, const std::string& extra = "",
                        const std::string& name = "sluice.textproto") {
  const std::string path = dir.file(name);
  testing::WriteAll(path,
                    "listen: \"127.0.0.1:0\"\ndatasets {\n  name: \"train\"\n"
                    "  num_classes: 1000\n  pipeline {\n    files: \"" +
                        dir.file("tar/*.tar") +
                        "\"\n    batch_size: 4\n    image_height: 32\n"
                        "    threads: 2\n    seed: 7\n    epochs: 1\n"
                        "    memory_budget_bytes: 67108864\n"
                        "    shuffle { buffer_size: 16 }\n" +
                        extra + "  }\n}\n");
  return path;
}

// The offset just after the data (and padding) of the tar's n-th member: where a shard cut
// between members ends.
uint64_t OffsetAfterMember(const std::string& tar, int n) {
  uint64_t at = 0;
  for (int i = 0; i < n; ++i) {
    const uint64_t size = std::stoull(tar.substr(at + 124, 11), nullptr, 8);
    at += 512 + (size + 511) / 512 * 512;
  }
  return at;
}

TEST_CASE("TarShardsServeTheSameBatchesAsTheSameSamplesInTFRecordShards") {
  TempDir dir;
  WriteShards(dir, {7, 5, 6});
  ServerProcess tar({"--files", dir.file("tar/*.tar"), "--port", "0"});
  ServerProcess tfrecord({"--files", dir.file("tfrecord/*.tfrecord"), "--port", "0"});
  REQUIRE(tar.running());
  REQUIRE(tfrecord.running());
  v1::StreamRequest r = Request();
  r.set_batch_size(4);
  r.set_image_height(32);
  r.set_seed(11);
  r.set_epochs(2);
  auto from_tar = Connect(tar.address())->Stream(r);
  auto from_tfrecord = Connect(tfrecord.address())->Stream(r);
  REQUIRE(from_tar.ok());
  REQUIRE(from_tfrecord.ok());
  const Got a = ReadAll(**from_tar);
  const Got b = ReadAll(**from_tfrecord);
  INFO(a.status.ToString() << "\n" << tar.output());
  REQUIRE(a.status.ok());
  REQUIRE(b.status.ok());
  CHECK(a.labels.size() >= 2 * 16);  // two epochs of 18, less what drop_remainder drops
  CHECK(a.labels == b.labels);
  CHECK(a.images == b.images);
  CHECK((*from_tar)->skipped_after_last_batch() == 0);
}

TEST_CASE("TarShardsShardedAcrossTwoRanksGiveEachSampleOnceInEqualShares") {
  TempDir dir;
  WriteShards(dir, {7, 5, 6, 4});  // 22 samples
  ServerProcess server({"--config", WriteConfig(dir)});
  REQUIRE(server.running());
  auto client = Connect(server.address());
  // PAD: as many batches each as the larger share needs, padding marked; OFF: each share as it
  // is. Either way every sample comes once, from one rank.
  for (v1::EqualShares mode : {v1::EQUAL_SHARES_PAD, v1::EQUAL_SHARES_OFF}) {
    std::vector<int32_t> all;
    std::vector<size_t> batches;
    for (int i = 0; i < 2; ++i) {
      v1::StreamRequest r = Request();
      r.mutable_shard()->set_index(i);
      r.mutable_shard()->set_count(2);
      r.set_equal_shares(mode);
      auto s = client->Stream(r);
      REQUIRE(s.ok());
      size_t n = 0;
      for (;;) {
        ReceivedBatch b;
        bool end = false;
        REQUIRE((*s)->Next(&b, &end).ok());
        if (end) break;
        ++n;
        for (size_t k = 0; k < b.labels.size(); ++k) {
          if (b.valid.empty() || b.valid[k] != 0) all.push_back(b.labels[k]);
        }
      }
      batches.push_back(n);
    }
    INFO(server.output());
    CHECK(EachLabelOnce(all, 22));
    if (mode == v1::EQUAL_SHARES_PAD) CHECK(batches[0] == batches[1]);
  }
}

// A whole epoch of "train" (`batches` batches) and, from a second stream, its first `head`.
struct EpochAndHead {
  Got all;
  Got head;
};

EpochAndHead ReadEpochAndHead(Client& client, size_t batches, size_t head) {
  EpochAndHead e;
  {
    auto whole = client.Stream(Request());
    REQUIRE(whole.ok());
    e.all = ReadAll(**whole);
  }
  REQUIRE(e.all.status.ok());
  REQUIRE(e.all.metas.size() == batches);
  {
    auto first = client.Stream(Request());
    REQUIRE(first.ok());
    e.head = ReadAll(**first, head);
  }
  REQUIRE(e.head.status.ok());
  REQUIRE(e.head.metas.size() == head);
  return e;
}

// The head and then a stream resumed after it are exactly the whole epoch; returns the labels
// of the two together.
std::vector<int32_t> CheckHeadThenTailIsTheEpoch(const EpochAndHead& e, const Got& tail) {
  REQUIRE(tail.status.ok());
  std::vector<int32_t> labels = e.head.labels;
  labels.insert(labels.end(), tail.labels.begin(), tail.labels.end());
  CHECK(labels == e.all.labels);
  CHECK(e.head.images + tail.images == e.all.images);
  return labels;
}

TEST_CASE("AResumedStreamOverTarShardsDeliversExactlyTheRestOfTheEpoch") {
  TempDir dir;
  WriteShards(dir, {9, 7, 8});  // 24 samples: 6 batches of 4
  ServerProcess server({"--config", WriteConfig(dir)});
  REQUIRE(server.running());
  auto client = Connect(server.address());
  // Two batches, then a stream resumed from there: the rest of the same epoch, in the same order.
  const EpochAndHead e = ReadEpochAndHead(*client, 6, 2);
  auto rest = client->Stream(serve_testing::ResumeAfter(e.head));
  REQUIRE(rest.ok());
  const Got tail = ReadAll(**rest);
  INFO(tail.status.ToString() << "\n" << server.output());
  CHECK(EachLabelOnce(CheckHeadThenTailIsTheEpoch(e, tail), 24));
}

TEST_CASE("ImageKeyJpgServesTheTarsJpgMembers") {
  TempDir dir;
  WriteShards(dir, {6, 5});
  const std::string config = WriteConfig(dir, "    image_key: \"jpg\"\n");
  ServerProcess by_extension({"--config", config});
  ServerProcess by_default({"--config", WriteConfig(dir, "", "default.textproto")});
  REQUIRE(by_extension.running());
  REQUIRE(by_default.running());
  v1::StreamRequest r = Request();
  r.set_batch_size(4);
  r.set_image_height(32);
  r.set_seed(3);
  auto a = Connect(by_extension.address())->Stream(r);
  auto b = Connect(by_default.address())->Stream(r);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  const Got got = ReadAll(**a);
  const Got want = ReadAll(**b);
  INFO(got.status.ToString() << "\n" << by_extension.output());
  REQUIRE(got.status.ok());
  REQUIRE(want.status.ok());
  CHECK(got.labels.size() >= 8);  // 11 samples, less what drop_remainder drops
  CHECK(got.labels == want.labels);
  CHECK(got.images == want.images);
  CHECK((*a)->skipped_after_last_batch() == 0);
}

TEST_CASE("ATarShardCutBetweenMembersIsServedAsFarAsItGoesAndWarnedOfOnce") {
  TempDir dir;
  WriteShards(dir, {6, 5});
  // shard-1 cut after its third sample (six members), at a block boundary: no end marker.
  const std::string cut = dir.file("tar/shard-1.tar");
  std::string bytes = testing::ReadAll(cut);
  const uint64_t at = OffsetAfterMember(bytes, 6);
  bytes.resize(at);
  testing::WriteAll(cut, bytes);
  ServerProcess server({"--config", WriteConfig(dir)});
  REQUIRE(server.running());
  v1::StreamRequest r = Request();
  r.set_batch_size(1);
  r.set_epochs(2);
  auto s = Connect(server.address())->Stream(r);
  REQUIRE(s.ok());
  const Got got = ReadAll(**s);
  REQUIRE(got.status.ok());
  // Both epochs: the 6 samples of shard-0 and the 3 before the cut, each once an epoch.
  REQUIRE(got.labels.size() == 18);
  const std::vector<int32_t> epoch0(got.labels.begin(), got.labels.begin() + 9);
  const std::vector<int32_t> epoch1(got.labels.begin() + 9, got.labels.end());
  CHECK(EachLabelOnce(epoch0, 9));
  CHECK(EachLabelOnce(epoch1, 9));
  CHECK((*s)->skipped_after_last_batch() == 0);
  s->reset();
  server.Stop(SIGTERM);
  const std::string out = server.output();
  const std::string warning =
      "no end-of-archive marker: the shard may be cut short at " + cut + ":" + std::to_string(at);
  INFO(out);
  const size_t first = out.find(warning);
  REQUIRE(first != std::string::npos);
  CHECK(out.rfind("sluice: WARNING: ", first) != std::string::npos);
  CHECK(out.find(warning, first + 1) == std::string::npos);
}

// Bytes the process has read(2) or pread(2) so far (rchar of /proc/PID/io): the page cache holds
// the shards, so read_bytes would show nothing.
uint64_t ReadChars(pid_t pid) {
  std::ifstream io("/proc/" + std::to_string(pid) + "/io");
  std::string key;
  uint64_t value = 0;
  while (io >> key >> value) {
    if (key == "rchar:") return value;
  }
  return 0;
}

// `sluice index` over every tar shard in dir/tar.
void IndexShards(const TempDir& dir, int shards) {
  std::string args = "index";
  for (int f = 0; f < shards; ++f)
    args += " " + dir.file("tar/shard-" + std::to_string(f) + ".tar");
  const testing::CommandResult indexed = testing::RunSluice(args);
  INFO(indexed.err);
  REQUIRE(indexed.exit_code == 0);
}

// A stream resumed after a head: what it delivered and the bytes the server read meanwhile.
struct Resumed {
  Got tail;
  uint64_t read_chars = 0;
};

Resumed ResumeAfterHead(ServerProcess& server, Client& client, const Got& head) {
  Resumed r;
  // The streams before may leave a job reading ahead until the reaper ends it: its reads are not
  // this stream's. A job leaves the list before the reaper destroys it, which gives back its
  // budget.
  StatsWhen(client, "train", [](const v1::Stats& s) {
    return s.jobs_size() == 0 && s.memory_reserved_bytes() == 0;
  });
  const uint64_t before = ReadChars(server.pid());
  auto rest = client.Stream(serve_testing::ResumeAfter(head));
  REQUIRE(rest.ok());
  r.tail = ReadAll(**rest);
  r.read_chars = ReadChars(server.pid()) - before;
  return r;
}

// 3 shards of 16 samples, each with a 256 KiB member besides its image: a resumed stream after 8
// batches (32 samples) passes over at least the 16 samples the shuffle buffer (16) no longer holds
// without reading their payloads, with the shards' indexes or without (each built from its
// shard's headers on open): at least 4 MiB under the shards' bytes, which reading through them
// reads; and both deliver exactly the epoch's last 4 batches.
TEST_CASE("AResumedStreamOverTarShardsReadsOnlyTheHeadersOfTheSamplesItPassesOver") {
  TempDir dir;
  constexpr size_t kBin = 256 << 10;
  WriteShards(dir, {16, 16, 16}, kBin);
  IndexShards(dir, 3);
  uint64_t shard_bytes = 0;
  for (int f = 0; f < 3; ++f) {
    shard_bytes += std::filesystem::file_size(dir.file("tar/shard-" + std::to_string(f) + ".tar"));
  }
  ServerProcess server({"--config", WriteConfig(dir)});
  REQUIRE(server.running());
  auto client = Connect(server.address());
  const EpochAndHead e = ReadEpochAndHead(*client, 12, 8);

  const Resumed indexed = ResumeAfterHead(server, *client, e.head);
  for (int f = 0; f < 3; ++f) {
    std::filesystem::remove(IndexPathFor(dir.file("tar/shard-" + std::to_string(f) + ".tar")));
  }
  const Resumed built = ResumeAfterHead(server, *client, e.head);
  INFO(server.output());
  for (const Resumed* r : {&indexed, &built}) CheckHeadThenTailIsTheEpoch(e, r->tail);
  INFO("shards " << shard_bytes << " bytes; read with their indexes " << indexed.read_chars
                 << ", built on open " << built.read_chars);
  CHECK(indexed.read_chars + 16 * kBin <= shard_bytes);
  CHECK(built.read_chars + 16 * kBin <= shard_bytes);
  auto stats = client->GetStats("train");
  REQUIRE(stats.ok());
  CHECK(stats->datasets(0).record_index_fallbacks() == 0);
}

// Three ranks sharing one tar shard (fewer files than ranks: every third sample is a rank's), each
// sample with a 256 KiB member besides its image: together they deliver each sample once, and the
// server reads the shard about once for all three, not once for each, with its `.idx` and without
// (the index built from the shard's headers when each stream opens it).
TEST_CASE("RanksSharingOneTarShardReadOnlyTheirOwnSamplesWithItsIndexOrOneBuiltOnOpen") {
  TempDir dir;
  constexpr size_t kBin = 256 << 10;
  WriteShards(dir, {24}, kBin);
  IndexShards(dir, 1);
  const std::string tar = dir.file("tar/shard-0.tar");
  const uint64_t size = std::filesystem::file_size(tar);
  ServerProcess server({"--config", WriteConfig(dir)});
  REQUIRE(server.running());
  auto client = Connect(server.address());
  auto read_ranks = [&] {
    const uint64_t before = ReadChars(server.pid());
    std::vector<int32_t> labels;
    for (int rank = 0; rank < 3; ++rank) {
      v1::StreamRequest r = Request();
      r.mutable_shard()->set_index(rank);
      r.mutable_shard()->set_count(3);
      r.set_equal_shares(v1::EQUAL_SHARES_OFF);
      auto s = client->Stream(r);
      REQUIRE(s.ok());
      const Got got = ReadAll(**s);
      REQUIRE(got.status.ok());
      CHECK(got.labels.size() == 8);
      labels.insert(labels.end(), got.labels.begin(), got.labels.end());
    }
    CHECK(EachLabelOnce(labels, 24));
    return ReadChars(server.pid()) - before;
  };
  const uint64_t indexed = read_ranks();
  std::filesystem::remove(IndexPathFor(tar));
  const uint64_t built = read_ranks();
  INFO(server.output());
  INFO("shard " << size << " bytes; read with its index " << indexed << ", built on open "
                << built);
  // Each rank reading the whole shard would make it three times its size.
  CHECK(indexed < size + size / 2);
  CHECK(built < size + size / 2);
  CHECK_FALSE(std::filesystem::exists(IndexPathFor(tar)));  // nothing written beside the shard
  auto stats = client->GetStats("train");
  REQUIRE(stats.ok());
  CHECK(stats->datasets(0).record_index_fallbacks() == 0);
}

// Shard 0 rewritten after it was indexed (its second sample's extra member grew): the resumed
// stream trusts the index up to the first sample, reads shard 0 from its second sample on, logs
// the index line and counts the fallback, and delivers exactly what the unresumed stream did.
TEST_CASE("AResumedStreamOverAStaleTarIndexFallsBackAndDeliversTheSameBatches") {
  TempDir dir;
  WriteShards(dir, {16, 16, 16}, 4096);
  IndexShards(dir, 3);
  WriteShards(dir, {16, 16, 16}, 4096, /*grow_id=*/1, /*grow=*/3000);
  ServerProcess server({"--config", WriteConfig(dir)});
  REQUIRE(server.running());
  auto client = Connect(server.address());
  const EpochAndHead e = ReadEpochAndHead(*client, 12, 8);
  CheckHeadThenTailIsTheEpoch(e, ResumeAfterHead(server, *client, e.head).tail);
  auto stats = client->GetStats("train");
  REQUIRE(stats.ok());
  CHECK(stats->datasets(0).record_index_fallbacks() == 1);
  server.Stop(SIGTERM);
  const std::string index = IndexPathFor(dir.file("tar/shard-0.tar"));
  INFO(server.output());
  CHECK(server.output().find("tar index " + index + ":3 (sample at ") != std::string::npos);
}

// A TFRecord index (DALI tfrecord2idx's "<offset> <length>" lines) beside a tar shard is not that
// shard's index: not used to count nor to resume, nothing misread, no fallback counted.
TEST_CASE("ATFRecordIndexBesideATarShardIsNotUsed") {
  TempDir dir;
  WriteShards(dir, {16, 16, 16});
  const std::string tar = dir.file("tar/shard-0.tar");
  const uint64_t size = std::filesystem::file_size(tar);
  testing::WriteAll(IndexPathFor(tar),
                    FormatRecordIndex({{0, size / 2}, {size / 2, size - size / 2}}));
  ServerProcess server({"--config", WriteConfig(dir)});
  REQUIRE(server.running());
  auto client = Connect(server.address());
  const EpochAndHead e = ReadEpochAndHead(*client, 12, 8);
  CHECK(EachLabelOnce(e.all.labels, 48));
  CheckHeadThenTailIsTheEpoch(e, ResumeAfterHead(server, *client, e.head).tail);
  auto stats = client->GetStats("train");
  REQUIRE(stats.ok());
  CHECK(stats->datasets(0).record_index_fallbacks() == 0);
}

}  // namespace
}  // namespace sluice
