// How `convert` and `synth` lay a data set out on disk: a seeded, stratified train/validation
// split, "train-*"/"validation-*" shard sets written in parallel, and labels.txt — the shared part
// of both commands, which differ only in how one record is made.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "formats/seed.h"
#include "formats/status.h"
#include "server/tools/shard_set_writer.h"

namespace sluice {

struct DatasetLayoutOptions {
  std::string out;
  int shards = 16;
  int val_shards = 0;  // 0: max(1, shards / 8)
  double val_fraction = 0;
  std::string compression = "none";
  uint64_t seed = 0;
  int threads = 0;  // 0: all cores
  bool overwrite = false;
};

// Adds --out, --shards, --val-fraction, --val-shards, --compression, --seed, --threads and
// --overwrite to cmd.
void AddDatasetLayoutFlags(CLI::App* cmd, DatasetLayoutOptions* opt);

struct Split {
  std::vector<uint64_t> train;       // item ids, shuffled
  std::vector<uint64_t> validation;  // item ids, shuffled
};

// labels[i] is item i's class. Each class gives round(count * val_fraction) of its items to
// validation, so rare classes are represented in both; both lists come back shuffled. Depends
// only on labels, val_fraction and seed.
Split StratifiedSplit(const std::vector<int>& labels, double val_fraction, uint64_t seed);

// Makes the record of item `id` (an index into labels). Called concurrently.
using MakeItemFn = std::function<Status(uint64_t id, std::string* record)>;

// Splits the items, writes both shard sets and labels.txt (one class name per line, line i =
// label i), printing a line per set and a progress bar on a terminal. on_skip hears of each item
// whose record could not be made (by id) and may abort. Runs on oneTBB within opt.threads.
Status WriteDataset(const DatasetLayoutOptions& opt, std::string_view verb,
                    const std::vector<int>& labels, const std::vector<std::string>& class_names,
                    const MakeItemFn& make, const std::function<bool(uint64_t id,
                                                                     const Status& why)>& on_skip);

}  // namespace sluice
