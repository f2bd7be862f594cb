// What the server does with a StreamRequest from the network before any pipeline runs: parse it,
// find the dataset, apply the request within the dataset's limits (PipelineForRequest) and
// resolve the pipeline's options. Any bytes a client sends end in a clean InvalidArgument,
// NotFound or ResourceExhausted, or in options inside every limit of the configuration.
#include <google/protobuf/text_format.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "pipeline/options.h"
#include "server/request_policy.h"
#include "server/server_config.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/server/request_policy_test_data.h"

namespace {

// testing::ThreeDatasetsConfig over three empty shards.
const sluice::v1::ServerConfig& Config() {
  static const sluice::v1::ServerConfig config = [] {
    std::string dir =
        (std::filesystem::temp_directory_path() / "sluice-request-fuzz-XXXXXX").string();
    if (mkdtemp(dir.data()) == nullptr) std::abort();
    for (const char* name : {"a-0.tfrecord", "a-1.tfrecord", "a-2.tfrecord"}) {
      std::ofstream(dir + "/" + name).flush();
    }
    const std::string text = sluice::testing::ThreeDatasetsConfig(dir + "/a-*.tfrecord");
    sluice::v1::ServerConfig parsed;
    if (!google::protobuf::TextFormat::ParseFromString(text, &parsed)) std::abort();
    sluice::Result<sluice::v1::ServerConfig> validated =
        sluice::ValidateServerConfig(parsed, sluice::MemoryLimit{});
    if (!validated.ok()) std::abort();
    return *validated;
  }();
  return config;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sluice;
  const v1::ServerConfig& config = Config();
  v1::StreamRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  const Result<const v1::DatasetConfig*> dataset = FindDataset(config, request.dataset());
  if (!dataset.ok()) {
    const StatusCode code = dataset.status().code();
    FUZZ_CHECK(code == StatusCode::kInvalidArgument || code == StatusCode::kNotFound, "%s",
               dataset.status().ToString().c_str());
    return 0;
  }
  const v1::DatasetConfig& d = **dataset;
  const Result<v1::PipelineOptions> options = PipelineForRequest(config, d, request);
  if (!options.ok()) {
    FUZZ_CHECK(options.status().code() == StatusCode::kInvalidArgument, "%s",
               options.status().ToString().c_str());
    return 0;
  }
  const v1::PipelineOptions& o = *options;
  const v1::ClientLimits& limits = d.limits();
  FUZZ_CHECK(o.batch_size() >= 1 && o.batch_size() <= limits.max_batch_size(), "batch_size %d",
             o.batch_size());
  FUZZ_CHECK(
      o.image_height() >= limits.min_image_size() && o.image_height() <= limits.max_image_size() &&
          o.image_width() >= limits.min_image_size() && o.image_width() <= limits.max_image_size(),
      "image %dx%d", o.image_height(), o.image_width());
  FUZZ_CHECK(BatchMessageBytes(o.batch_size(), o.image_height(), o.image_width()) <=
                 config.max_batch_bytes(),
             "batch over max_batch_bytes");
  const int shard_count = std::max(1, o.shard().count());
  FUZZ_CHECK(o.shard().index() >= 0 && o.shard().index() < shard_count, "shard %d of %d",
             o.shard().index(), o.shard().count());
  FUZZ_CHECK(o.memory_budget_bytes() == d.pipeline().memory_budget_bytes(),
             "a request changed the memory budget");
  if (limits.fix_batch_size()) FUZZ_CHECK(o.batch_size() == d.pipeline().batch_size(), "fixed");
  if (limits.fix_mode()) FUZZ_CHECK(o.mode() == d.pipeline().mode(), "fixed mode changed");
  if (limits.fix_seed()) FUZZ_CHECK(o.seed() == d.pipeline().seed(), "fixed seed changed");
  if (limits.fix_epochs()) FUZZ_CHECK(o.epochs() == d.pipeline().epochs(), "fixed epochs changed");

  const Result<ResolvedOptions> resolved = ResolveOptions(o);
  if (!resolved.ok()) {
    const StatusCode code = resolved.status().code();
    FUZZ_CHECK(code == StatusCode::kInvalidArgument || code == StatusCode::kResourceExhausted, "%s",
               resolved.status().ToString().c_str());
  }
  return 0;
}
