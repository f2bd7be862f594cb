// `sluice index SHARD...`: writes "<shard>.idx" for shards written by other tools (TensorFlow,
// Spark, webdataset's TarWriter, tar), so they get the O(1) seek, resume and sharding that our own
// shards have: a TFRecord shard's in DALI tfrecord2idx's format, a tar shard's (by its name, as
// the pipeline tells kinds) in DALI wds2idx's. A shard that does not read cleanly gets no index.
#include <fmt/format.h>
#include <tbb/parallel_for.h>

#include <atomic>
#include <string>
#include <vector>

#include "formats/record_index.h"
#include "formats/source_kind.h"
#include "formats/tar_index.h"
#include "server/commands.h"

namespace sluice {
namespace {

struct IndexOptions {
  std::vector<std::string> shards;
};

int RunIndex(const IndexOptions& opt) {
  std::vector<Status> results(opt.shards.size());
  std::vector<size_t> counts(opt.shards.size(), 0);
  tbb::parallel_for(size_t{0}, opt.shards.size(), [&](size_t i) {
    const std::string& shard = opt.shards[i];
    if (DetectSourceKind(shard) == SourceKind::kTar) {
      Result<std::vector<TarIndexSample>> index = BuildTarIndex(shard);
      if (!index.ok()) {
        results[i] = index.status();
        return;
      }
      counts[i] = index->size();
      results[i] = WriteTarIndex(IndexPathFor(shard), *index);
      return;
    }
    Result<std::vector<IndexEntry>> index = BuildRecordIndex(shard);
    if (!index.ok()) {
      results[i] = index.status();
      return;
    }
    counts[i] = index->size();
    results[i] = WriteRecordIndex(IndexPathFor(opt.shards[i]), *index);
  });
  int failed = 0;
  for (size_t i = 0; i < opt.shards.size(); ++i) {
    if (results[i].ok()) {
      const bool tar = DetectSourceKind(opt.shards[i]) == SourceKind::kTar;
      fmt::print("{}: {} {}\n", IndexPathFor(opt.shards[i]), counts[i],
                 tar ? "samples" : "records");
    } else {
      ++failed;
      fmt::print(stderr, "sluice index: no index for {}: {}\n", opt.shards[i],
                 results[i].message());
    }
  }
  return failed ? 1 : 0;
}

}  // namespace

void RegisterIndexCommand(CLI::App& app, int* exit_code) {
  auto opt = std::make_shared<IndexOptions>();
  CLI::App* cmd = app.add_subcommand(
      "index",
      "Write <shard>.idx index files for shards: TFRecord (DALI tfrecord2idx format) or "
      "WebDataset tar (.tar, .tar.gz, .tgz; DALI wds2idx format)");
  cmd->add_option("shards", opt->shards, "TFRecord files or WebDataset tar shards")->required();
  cmd->callback([opt, exit_code] { *exit_code = RunIndex(*opt); });
}

}  // namespace sluice
