// ServerConfig loading and validation: defaults written in, patterns replaced by the files they
// match, and every bad field reported by its name.
#include "server/server_config.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <google/protobuf/text_format.h>
#include <google/protobuf/util/message_differencer.h>

#include "pipeline/options.h"
#include "tests/test_support.h"

namespace sluice {
namespace {

using testing::TempDir;
using testing::WriteAll;

// Three empty shards: expansion only checks that files exist; nothing here reads them.
void WriteShards(const TempDir& dir) {
  for (const char* name : {"train-0.tfrecord", "train-1.tfrecord", "train-2.tfrecord"}) {
    WriteAll(dir.file(name), "");
  }
}

// Replaces every "$DIR" in `text` by the directory's path.
std::string InDir(const TempDir& dir, std::string text) {
  for (size_t at = text.find("$DIR"); at != std::string::npos; at = text.find("$DIR", at)) {
    text.replace(at, 4, dir.path().string());
  }
  return text;
}

Result<v1::ServerConfig> LoadText(const TempDir& dir, const std::string& text) {
  WriteAll(dir.file("sluice.textproto"), InDir(dir, text));
  return LoadServerConfig(dir.file("sluice.textproto"), DetectMemoryLimit());
}

const char kTrain[] = R"(datasets { name: "train" pipeline { files: "$DIR/train-*.tfrecord" } })";

TEST_CASE("GoodConfigLoadsWithDefaultsWrittenIn") {
  TempDir dir;
  WriteShards(dir);
  Result<v1::ServerConfig> c = LoadText(dir, R"(
    listen: "unix:$DIR/sluice.sock"
    listen: "[::1]:0"
    metrics_address: "127.0.0.1:9100"
    datasets {
      name: "train"
      num_classes: 10
      pipeline { files: "$DIR/train-*.tfrecord" mode: MODE_EVAL image_height: 64 }
      limits { max_batch_size: 512 fix_mode: true }
    })");
  INFO(c.status().ToString());
  REQUIRE(c.ok());
  CHECK(c->listen_size() == 2);
  CHECK(c->listen(0) == dir.file("sluice.sock").insert(0, "unix:"));
  const MemoryLimit limit = DetectMemoryLimit();
  CHECK(c->max_shared_memory_bytes() == DefaultMaxSharedMemory(limit));
  CHECK(c->memory_budget_bytes() == DefaultMemoryBudget(limit, DefaultMaxSharedMemory(limit)));
  CHECK(c->max_streams() == 64);
  CHECK(c->max_batch_bytes() == int64_t{256} << 20);
  CHECK(c->job_linger_seconds() == 30);
  CHECK(c->threads() >= 1);
  const v1::DatasetConfig& d = c->datasets(0);
  CHECK(d.num_classes() == 10);
  CHECK(d.pipeline().files_size() == 3);
  CHECK(d.pipeline().files(0) == dir.file("train-0.tfrecord"));
  CHECK(d.pipeline().batch_size() == 256);
  CHECK(d.pipeline().image_height() == 64);
  CHECK(d.pipeline().image_width() == 64);
  CHECK(d.pipeline().memory_budget_bytes() == std::min(int64_t{1} << 30, c->memory_budget_bytes()));
  CHECK(d.pipeline().mode() == v1::MODE_EVAL);
  CHECK(d.limits().max_batch_size() == 512);
  CHECK(d.limits().min_image_size() == 32);
  CHECK(d.limits().max_image_size() == 1024);
  CHECK(d.limits().fix_mode());

  // The validated config, written out and loaded again, is itself valid and unchanged.
  std::string text;
  REQUIRE(google::protobuf::TextFormat::PrintToString(*c, &text));
  WriteAll(dir.file("again.textproto"), text);
  Result<v1::ServerConfig> again =
      LoadServerConfig(dir.file("again.textproto"), DetectMemoryLimit());
  REQUIRE(again.ok());
  CHECK(google::protobuf::util::MessageDifferencer::Equals(*c, *again));
}

TEST_CASE("FleetShardInAConfigFileIsRefused") {
  TempDir dir;
  WriteAll(dir.file("fleet.textproto"), "fleet_shard { index: 0 count: 2 }\n");
  Result<v1::ServerConfig> c = LoadServerConfig(dir.file("fleet.textproto"), MemoryLimit{});
  REQUIRE(!c.ok());
  CHECK(c.status().code() == StatusCode::kInvalidArgument);
  CHECK(c.status().message().find("fleet_shard is set by `sluice serve --shard I/N`") !=
        std::string::npos);
}

TEST_CASE("EmptyListenIsLoopbackOnly") {
  TempDir dir;
  WriteShards(dir);
  Result<v1::ServerConfig> c = LoadText(dir, kTrain);
  REQUIRE(c.ok());
  REQUIRE(c->listen_size() == 1);
  CHECK(c->listen(0) == "127.0.0.1:50051");
}

TEST_CASE("SyntaxErrorsGiveFileLineAndColumn") {
  TempDir dir;
  Result<v1::ServerConfig> c = LoadText(dir, "datasets {\n  nmae: \"x\"\n}\n");
  REQUIRE(!c.ok());
  CHECK(c.status().code() == StatusCode::kInvalidArgument);
  CHECK_THAT(c.status().message(), Catch::StartsWith(dir.file("sluice.textproto") + ":2:7: "));
  CHECK_THAT(c.status().message(), Catch::Contains("nmae"));

  Result<v1::ServerConfig> missing = LoadServerConfig(dir.file("none.textproto"), MemoryLimit{});
  CHECK(missing.status().code() == StatusCode::kNotFound);
}

TEST_CASE("PatternsAreReplacedByTheFilesTheyMatch") {
  TempDir dir;
  WriteShards(dir);
  WriteAll(dir.file("odd[1].tfrecord"), "");
  Result<v1::ServerConfig> c = LoadText(dir, R"(datasets { name: "train" pipeline {
      files: "$DIR/train-[01].tfrecord" files: "$DIR/train-0.tfrecord" files: "$DIR/odd*" } })");
  INFO(c.status().ToString());
  REQUIRE(c.ok());
  const auto& files = c->datasets(0).pipeline().files();
  REQUIRE(files.size() == 3);
  // A name with glob characters is escaped so that it matches itself and nothing else.
  CHECK(files[0] == dir.file("odd\\[1\\].tfrecord"));
  CHECK(files[1] == dir.file("train-0.tfrecord"));
  CHECK(files[2] == dir.file("train-1.tfrecord"));
  WriteAll(dir.file("odd1.tfrecord"), "");
  Result<std::vector<std::string>> again = ExpandGlobs({files.begin(), files.end()});
  REQUIRE(again.ok());
  CHECK(*again == std::vector<std::string>{dir.file("odd[1].tfrecord"),
                                           dir.file("train-0.tfrecord"),
                                           dir.file("train-1.tfrecord")});
}

TEST_CASE("UnixAndIpv6ListenAddressesAreAccepted") {
  TempDir dir;
  WriteShards(dir);
  for (const char* listen : {"unix:/run/sluice/sluice.sock", "[::1]:50051", "[::]:0",
                             "0.0.0.0:65535", "localhost:8080", "unix:///run/s.sock"}) {
    Result<v1::ServerConfig> c =
        LoadText(dir, std::string("listen: \"") + listen + "\"\n" + kTrain);
    INFO(listen << ": " << c.status().ToString());
    CHECK(c.ok());
  }
}

struct BadCase {
  std::string text;  // "$DIR" is the test directory; kTrain is appended unless it names datasets
  StatusCode code;
  std::string message;  // what the error message starts with
};

TEST_CASE("EachBadFieldIsNamed") {
  const std::string ds = R"(datasets["train"])";
  const std::vector<BadCase> cases = {
      {"listen: \"localhost\"", StatusCode::kInvalidArgument,
       "listen[0]: \"localhost\" is not HOST:PORT"},
      {"listen: \"::1:50051\"", StatusCode::kInvalidArgument,
       "listen[0]: \"::1:50051\" is an IPv6 address without brackets"},
      {"listen: \"[::1]:65536\"", StatusCode::kInvalidArgument,
       "listen[0]: \"[::1]:65536\" has no port in 0..65535"},
      {"listen: \"[nope]:1\"", StatusCode::kInvalidArgument,
       "listen[0]: \"[nope]:1\" has no IPv6 address"},
      {"listen: \":50051\"", StatusCode::kInvalidArgument, "listen[0]: \":50051\" has no host"},
      {"listen: \"a:1\" listen: \"unix:sluice.sock\"", StatusCode::kInvalidArgument,
       "listen[1]: \"unix:sluice.sock\" needs an absolute path"},
      {"listen: \"a:1\" listen: \"a:1\"", StatusCode::kInvalidArgument,
       "listen[1]: \"a:1\" is listed twice"},
      {"metrics_address: \"unix:/m.sock\"", StatusCode::kInvalidArgument, "metrics_address: "},
      {"memory_budget_bytes: -1", StatusCode::kInvalidArgument, "memory_budget_bytes: -1"},
      {"max_streams: -2", StatusCode::kInvalidArgument, "max_streams: -2 is under 1"},
      {"max_batch_bytes: 1000", StatusCode::kInvalidArgument,
       "max_batch_bytes: 1000 B is under dataset \"train\"'s default batch of 256 at 224x224 "
       "(36.8 MiB)"},
      // 256 samples of up to 64 KiB of features each (and their framing) take 20 MiB more
      // than the 36.8 MiB of images.
      {"max_batch_bytes: 41943040 datasets { name: \"train\" pipeline { files: "
       "\"$DIR/train-*\" boxes { enabled: true } max_feature_bytes: 65536 } }",
       StatusCode::kInvalidArgument,
       "max_batch_bytes: 40 MiB is under dataset \"train\"'s default batch of 256 at 224x224 "
       "with its features (5"},
      {"max_batch_bytes: 3221225472", StatusCode::kInvalidArgument,
       "max_batch_bytes: 3221225472 is over gRPC's largest message"},
      {"threads: -1", StatusCode::kInvalidArgument, "threads: -1 is outside [0, 1024]"},
      {"job_linger_seconds: -1", StatusCode::kInvalidArgument, "job_linger_seconds: -1"},
      {"tls { cert_file: \"$DIR/cert.pem\" }", StatusCode::kInvalidArgument,
       "tls: cert_file is set but key_file is not"},
      {"tls { key_file: \"$DIR/key.pem\" }", StatusCode::kInvalidArgument,
       "tls: key_file is set but cert_file is not"},
      {"tls { cert_file: \"$DIR/none.pem\" key_file: \"$DIR/key.pem\" }", StatusCode::kNotFound,
       "tls.cert_file: "},
      {"tls { cert_file: \"$DIR/cert.pem\" key_file: \"$DIR/empty\" }",
       StatusCode::kInvalidArgument, "tls.key_file: $DIR/empty is empty"},
      {"token_file: \"$DIR/none\"", StatusCode::kNotFound, "token_file: "},
      {"token_file: \"$DIR/blank\"", StatusCode::kInvalidArgument,
       "token_file: $DIR/blank holds no token"},
      {"datasets { name: \"x\" pipeline { files: \"$DIR/none-*\" } }", StatusCode::kNotFound,
       "datasets[\"x\"].pipeline.files: no file matches '$DIR/none-*'"},
      {"datasets { name: \"x\" pipeline { files: \"$DIR/*\" } }", StatusCode::kInvalidArgument,
       "datasets[\"x\"].pipeline.files: '$DIR/sub' is not a regular file"},
      {"datasets { name: \"x\" }", StatusCode::kInvalidArgument,
       "datasets[\"x\"].pipeline.files: no file pattern given"},
      {"listen: \"a:1\"", StatusCode::kInvalidArgument,
       "datasets: the configuration names no dataset"},
      {"datasets { name: \"bad/name\" }", StatusCode::kInvalidArgument,
       "datasets[0].name: \"bad/name\" is not 1 to 64 of"},
      {"datasets { name: \"..\" }", StatusCode::kInvalidArgument, "datasets[0].name: \"..\""},
      {"datasets { }", StatusCode::kInvalidArgument, "datasets[0].name: \"\""},
      {std::string(kTrain) + kTrain, StatusCode::kInvalidArgument,
       "datasets[1].name: \"train\" names two datasets"},
  };
  const std::vector<std::pair<std::string, BadCase>> dataset_cases = {
      {"batch_size: 5000",
       {"", StatusCode::kInvalidArgument,
        ds + ".pipeline.batch_size: 5000 is over limits.max_batch_size 1024"}},
      {"batch_size: -3",
       {"", StatusCode::kInvalidArgument, ds + ".pipeline.batch_size: -3 is negative"}},
      {"image_height: 16",
       {"", StatusCode::kInvalidArgument,
        ds + ".pipeline.image_height: 16 is under limits.min_image_size 32"}},
      {"image_width: 2000",
       {"", StatusCode::kInvalidArgument,
        ds + ".pipeline.image_width: 2000 is over limits.max_image_size 1024"}},
      {"prefetch: 100",
       {"", StatusCode::kInvalidArgument, ds + ".pipeline: prefetch = 100 is outside [1, 64]"}},
      {"memory_budget_bytes: 1125899906842624",
       {"", StatusCode::kInvalidArgument,
        ds + ".pipeline.memory_budget_bytes: 1024 TiB is over the server's memory_budget_bytes"}},
      {"memory_budget_bytes: 1000000",
       {"", StatusCode::kResourceExhausted, ds + ".pipeline: memory_budget_bytes = 1000000"}},
  };
  const std::vector<std::pair<std::string, BadCase>> limits_cases = {
      {"min_image_size: 64 max_image_size: 48",
       {"", StatusCode::kInvalidArgument,
        ds + ".limits.min_image_size: 64 is over limits.max_image_size 48"}},
      {"max_image_size: 5000",
       {"", StatusCode::kInvalidArgument,
        ds + ".limits.max_image_size: 5000 is outside [8, 4096]"}},
      {"max_batch_size: -1",
       {"", StatusCode::kInvalidArgument, ds + ".limits.max_batch_size: -1 is outside [1, 65536]"}},
  };

  TempDir dir;
  WriteShards(dir);
  WriteAll(dir.file("cert.pem"), "-----BEGIN CERTIFICATE-----\n");
  WriteAll(dir.file("key.pem"), "-----BEGIN PRIVATE KEY-----\n");
  WriteAll(dir.file("empty"), "");
  WriteAll(dir.file("blank"), " \n\t\n");
  std::filesystem::create_directory(dir.file("sub"));
  auto check = [&](const std::string& text, const BadCase& c) {
    Result<v1::ServerConfig> r = LoadText(dir, text);
    INFO(text);
    REQUIRE(!r.ok());
    CHECK(r.status().code() == c.code);
    CHECK_THAT(r.status().message(), Catch::StartsWith(InDir(dir, c.message)));
  };
  for (const BadCase& c : cases) {
    bool names_datasets =
        c.text.find("datasets") != std::string::npos || c.message.rfind("datasets:", 0) == 0;
    check(names_datasets ? c.text : c.text + "\n" + kTrain, c);
  }
  for (const auto& [field, c] : dataset_cases) {
    check("datasets { name: \"train\" pipeline { files: \"$DIR/train-*\" " + field + " } }", c);
  }
  for (const auto& [field, c] : limits_cases) {
    check("datasets { name: \"train\" pipeline { files: \"$DIR/train-*\" } limits { " + field +
              " } }",
          c);
  }
}

TEST_CASE("TokenIsTheFileTrimmed") {
  TempDir dir;
  WriteShards(dir);
  v1::ServerConfig c;
  Result<std::string> none = ReadToken(c);
  REQUIRE(none.ok());
  CHECK(none->empty());

  WriteAll(dir.file("token"), "  s3cr3t-T0ken\r\n\n");
  c.set_token_file(dir.file("token"));
  Result<std::string> token = ReadToken(c);
  REQUIRE(token.ok());
  CHECK(*token == "s3cr3t-T0ken");
  Result<v1::ServerConfig> loaded =
      LoadText(dir, "token_file: \"" + dir.file("token") + "\"\n" + kTrain);
  CHECK(loaded.ok());

  WriteAll(dir.file("token"), "two words\n");
  Result<std::string> spaced = ReadToken(c);
  REQUIRE(!spaced.ok());
  CHECK_THAT(spaced.status().message(), Catch::Contains("space or control character"));
}

TEST_CASE("TlsNeedsBothReadableFiles") {
  TempDir dir;
  WriteShards(dir);
  WriteAll(dir.file("cert.pem"), "-----BEGIN CERTIFICATE-----\n");
  WriteAll(dir.file("key.pem"), "-----BEGIN PRIVATE KEY-----\n");
  Result<v1::ServerConfig> c =
      LoadText(dir, "tls { cert_file: \"$DIR/cert.pem\" key_file: \"$DIR/key.pem\" }\n" +
                        std::string(kTrain));
  INFO(c.status().ToString());
  CHECK(c.ok());
  if (geteuid() == 0) return;  // root reads files whatever their mode
  chmod(dir.file("key.pem").c_str(), 0);
  c = LoadText(dir, "tls { cert_file: \"$DIR/cert.pem\" key_file: \"$DIR/key.pem\" }\n" +
                        std::string(kTrain));
  REQUIRE(!c.ok());
  CHECK_THAT(c.status().message(), Catch::StartsWith("tls.key_file: "));
}

TEST_CASE("QuickConfigServesOneDatasetOnLoopback") {
  TempDir dir;
  WriteShards(dir);
  Result<v1::ServerConfig> c =
      QuickServerConfig(MemoryLimit{}, {dir.file("train-*.tfrecord")}, "train", 0);
  INFO(c.status().ToString());
  REQUIRE(c.ok());
  REQUIRE(c->listen_size() == 1);
  CHECK(c->listen(0) == "127.0.0.1:0");
  CHECK(c->metrics_address().empty());
  REQUIRE(c->datasets_size() == 1);
  CHECK(c->datasets(0).name() == "train");
  CHECK(c->datasets(0).pipeline().files_size() == 3);

  Result<v1::ServerConfig> with_metrics =
      QuickServerConfig(MemoryLimit{}, {dir.file("train-0.tfrecord")}, "val", 9000, "0.0.0.0:9100");
  REQUIRE(with_metrics.ok());
  CHECK(with_metrics->listen(0) == "127.0.0.1:9000");
  CHECK(with_metrics->metrics_address() == "0.0.0.0:9100");

  CHECK(
      QuickServerConfig(MemoryLimit{}, {dir.file("train-*")}, "train", 70000).status().message() ==
      "port 70000 is outside [0, 65535]");
  CHECK(QuickServerConfig(MemoryLimit{}, {dir.file("none-*")}).status().code() ==
        StatusCode::kNotFound);
  CHECK(QuickServerConfig(MemoryLimit{}, {}).status().code() == StatusCode::kInvalidArgument);
  CHECK(QuickServerConfig(MemoryLimit{}, {dir.file("train-*")}, "a/b").status().code() ==
        StatusCode::kInvalidArgument);
}

TEST_CASE("BatchMessageBytesIsPixelsLabelsAndFraming") {
  CHECK(BatchMessageBytes(2, 4, 5) == 2 * 4 * 5 * 3 + 2 * 40 + 128);
  // A float32 transform set's batch: four bytes a value.
  CHECK(BatchMessageBytes(2, 4, 5, 4) == 2 * 4 * 5 * 3 * 4 + 2 * 40 + 128);
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

// A config of one dataset, validated against a given memory limit.
Result<v1::ServerConfig> ValidateWithLimit(const TempDir& dir, const std::string& server_text,
                                           const MemoryLimit& limit) {
  v1::ServerConfig config;
  REQUIRE(google::protobuf::TextFormat::ParseFromString(InDir(dir, server_text + kTrain), &config));
  return ValidateServerConfig(std::move(config), limit);
}

TEST_CASE("DefaultBudgetIsHalfTheMemoryLimitLeftBySharedMemory") {
  TempDir dir;
  WriteShards(dir);
  // 4 GiB pod: segments get a quarter (1 GiB), the budget half of the other 3 GiB.
  const MemoryLimit pod{int64_t{4} << 30, MemoryLimitSource::kCgroupV2,
                        "/sys/fs/cgroup/kubepods/pod1/memory.max"};
  Result<v1::ServerConfig> c = ValidateWithLimit(dir, "", pod);
  INFO(c.status().ToString());
  REQUIRE(c.ok());
  CHECK(c->max_shared_memory_bytes() == int64_t{1} << 30);
  CHECK(c->memory_budget_bytes() == int64_t{1536} << 20);
  CHECK(c->memory_budget_bytes() + c->max_shared_memory_bytes() <= pod.bytes);
  CHECK(c->datasets(0).pipeline().memory_budget_bytes() == int64_t{1} << 30);

  SECTION("a large machine's segments stay at 2 GiB") {
    const MemoryLimit big{int64_t{64} << 30, MemoryLimitSource::kPhysical, "/proc/meminfo"};
    Result<v1::ServerConfig> b = ValidateWithLimit(dir, "", big);
    REQUIRE(b.ok());
    CHECK(b->max_shared_memory_bytes() == int64_t{2} << 30);
    CHECK(b->memory_budget_bytes() == int64_t{31} << 30);
  }
  SECTION("a small container's dataset default is the whole server budget") {
    const MemoryLimit small{int64_t{1} << 30, MemoryLimitSource::kCgroupV1,
                            "/sys/fs/cgroup/memory/memory.limit_in_bytes"};
    Result<v1::ServerConfig> s = ValidateWithLimit(dir, "", small);
    INFO(s.status().ToString());
    REQUIRE(s.ok());
    CHECK(s->memory_budget_bytes() == int64_t{384} << 20);
    CHECK(s->datasets(0).pipeline().memory_budget_bytes() == int64_t{384} << 20);
  }
  SECTION("configured segments come out of the default budget; disabled ones do not") {
    Result<v1::ServerConfig> s =
        ValidateWithLimit(dir, "max_shared_memory_bytes: 2147483648\n", pod);
    REQUIRE(s.ok());
    CHECK(s->memory_budget_bytes() == int64_t{1} << 30);
    Result<v1::ServerConfig> d = ValidateWithLimit(dir, "disable_shared_memory: true\n", pod);
    REQUIRE(d.ok());
    CHECK(d->memory_budget_bytes() == int64_t{2} << 30);
  }
  SECTION("an unknown limit keeps the fixed defaults") {
    Result<v1::ServerConfig> u = ValidateWithLimit(dir, "", MemoryLimit{});
    REQUIRE(u.ok());
    CHECK(u->memory_budget_bytes() == kDefaultServerMemoryBudget);
    CHECK(u->max_shared_memory_bytes() == kDefaultMaxSharedMemoryBytes);
  }
}

TEST_CASE("ConfiguredBudgetAndSegmentsOverACgroupLimitAreRefusedNamingTheLimit") {
  TempDir dir;
  WriteShards(dir);
  const MemoryLimit pod{int64_t{4} << 30, MemoryLimitSource::kCgroupV2,
                        "/sys/fs/cgroup/kubepods/pod1/memory.max"};
  Result<v1::ServerConfig> over = ValidateWithLimit(dir, "memory_budget_bytes: 8589934592\n", pod);
  CHECK(over.status().code() == StatusCode::kInvalidArgument);
  CHECK(over.status().message() ==
        "memory_budget_bytes: memory_budget_bytes 8 GiB plus max_shared_memory_bytes 1 GiB is "
        "over this process's memory limit, 4 GiB (cgroup v2 "
        "/sys/fs/cgroup/kubepods/pod1/memory.max); the kernel would kill the server before the "
        "budget refused a job (leave both unset for defaults that fit)");
  // The default segment cap (1 GiB) beside a 3.5 GiB budget is over 4 GiB too.
  CHECK(ValidateWithLimit(dir, "memory_budget_bytes: 3758096384\n", pod).status().code() ==
        StatusCode::kInvalidArgument);
  // Up to the limit itself, both together, is the operator's call.
  CHECK(ValidateWithLimit(dir, "memory_budget_bytes: 3221225472\n", pod).ok());
  CHECK(
      ValidateWithLimit(dir, "memory_budget_bytes: 4294967296\ndisable_shared_memory: true\n", pod)
          .ok());
}

TEST_CASE("ConfiguredBudgetOverPhysicalMemoryIsAWarning") {
  TempDir dir;
  WriteShards(dir);
  // MemTotal is under the installed memory, and swap or overcommit may cover more: not refused.
  const MemoryLimit machine{int64_t{15} << 30, MemoryLimitSource::kPhysical, "/proc/meminfo"};
  v1::ServerConfig config;
  REQUIRE(google::protobuf::TextFormat::ParseFromString(
      InDir(dir, std::string("memory_budget_bytes: 17179869184\n") + kTrain), &config));
  std::vector<std::string> warnings;
  Result<v1::ServerConfig> c = ValidateServerConfig(std::move(config), machine, &warnings);
  INFO(c.status().ToString());
  REQUIRE(c.ok());
  CHECK(c->memory_budget_bytes() == int64_t{16} << 30);
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0] ==
        "memory_budget_bytes 16 GiB plus max_shared_memory_bytes 2 GiB is over this process's "
        "memory limit, 15 GiB (physical /proc/meminfo): the machine may swap or kill the server");
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

// A file list is checked at start-up as a stream's options are: each listed file exists, each
// line parses; its path is kept absolute.
TEST_CASE("FileListDatasetIsCheckedAtStartNamingListLineAndField") {
  TempDir dir;
  WriteAll(dir.file("a.jpg"), "x");
  WriteAll(dir.file("list.csv"), "path,label\na.jpg,0\n");
  const std::string cwd = std::filesystem::current_path().string();
  std::filesystem::current_path(dir.path());
  Result<v1::ServerConfig> good =
      LoadText(dir, R"(datasets { name: "x" pipeline { file_list: "list.csv" } })");
  std::filesystem::current_path(cwd);
  INFO(good.status().ToString());
  REQUIRE(good.ok());
  CHECK(good->datasets(0).pipeline().file_list() == dir.file("list.csv"));
  CHECK(good->datasets(0).pipeline().files_size() == 0);

  WriteAll(dir.file("list.csv"), "path,label\na.jpg,0\nb.jpg,1\n");
  Result<v1::ServerConfig> missing =
      LoadText(dir, R"(datasets { name: "x" pipeline { file_list: "$DIR/list.csv" } })");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().code() == StatusCode::kNotFound);
  CHECK_THAT(
      missing.status().message(),
      Catch::StartsWith("datasets[\"x\"].pipeline: " + dir.file("list.csv") + ":3: path: ") &&
          Catch::Contains(dir.file("b.jpg")));

  Result<v1::ServerConfig> both = LoadText(
      dir, R"(datasets { name: "x" pipeline { files: "$DIR/a.jpg" file_list: "$DIR/list.csv" } })");
  REQUIRE_FALSE(both.ok());
  CHECK_THAT(both.status().message(),
             Catch::StartsWith("datasets[\"x\"].pipeline.file_list: give files or file_list"));
}

}  // namespace
}  // namespace sluice
