// `sluice index SHARD...`: writes "<shard>.idx" for shards written by other tools (TensorFlow,
// Spark), so they get the O(1) seek, resume and sharding that our own shards have. A shard that
// does not read cleanly gets no index.
#include <atomic>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <tbb/parallel_for.h>

#include "formats/record_index.h"
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
    Result<std::vector<IndexEntry>> index = BuildRecordIndex(opt.shards[i]);
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
      fmt::print("{}: {} records\n", IndexPathFor(opt.shards[i]), counts[i]);
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
      "index", "Write <shard>.idx record index files (DALI tfrecord2idx format) for shards");
  cmd->add_option("shards", opt->shards, "TFRecord files")->required();
  cmd->callback([opt, exit_code] { *exit_code = RunIndex(*opt); });
}

}  // namespace sluice
