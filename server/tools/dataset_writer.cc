#include "server/tools/dataset_writer.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <optional>
#include <random>

#include <fmt/format.h>
#include <tbb/global_control.h>

#include "formats/compression.h"
#include "formats/file.h"
#include "formats/record_index.h"
#include "server/tools/progress.h"

namespace sluice {

void AddDatasetLayoutFlags(CLI::App* cmd, DatasetLayoutOptions* opt) {
  cmd->add_option("--out", opt->out, "Output directory")->required();
  cmd->add_option("--shards", opt->shards, "Training shards")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  cmd->add_option("--val-fraction", opt->val_fraction,
                  "Fraction of each class written to validation-* shards")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd->add_option("--val-shards", opt->val_shards, "Validation shards (default: max(1, shards/8))")
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--compression", opt->compression, "none, gzip or zlib")
      ->check(CLI::IsMember({"none", "gzip", "zlib"}))
      ->capture_default_str();
  cmd->add_option("--seed", opt->seed, "Seed of the shuffle and split; same seed, same files")
      ->capture_default_str();
  cmd->add_option("--threads", opt->threads, "Worker threads (0 = all cores)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--overwrite", opt->overwrite, "Replace shards of the same names");
}

Split StratifiedSplit(const std::vector<int>& labels, double val_fraction, uint64_t seed) {
  std::map<int, std::vector<uint64_t>> by_class;
  for (uint64_t i = 0; i < labels.size(); ++i) by_class[labels[i]].push_back(i);
  std::mt19937_64 rng(MixSeed(seed, 0x5917));
  Split split;
  for (auto& [label, items] : by_class) {
    std::shuffle(items.begin(), items.end(), rng);
    auto n_val = static_cast<size_t>(std::llround(static_cast<double>(items.size()) * val_fraction));
    split.validation.insert(split.validation.end(), items.begin(), items.begin() + n_val);
    split.train.insert(split.train.end(), items.begin() + n_val, items.end());
  }
  std::shuffle(split.train.begin(), split.train.end(), rng);
  std::shuffle(split.validation.begin(), split.validation.end(), rng);
  return split;
}

Status WriteDataset(const DatasetLayoutOptions& opt, std::string_view verb,
                    const std::vector<int>& labels, const std::vector<std::string>& class_names,
                    const MakeItemFn& make,
                    const std::function<bool(uint64_t id, const Status& why)>& on_skip) {
  std::optional<tbb::global_control> threads;
  if (opt.threads > 0) threads.emplace(tbb::global_control::max_allowed_parallelism, opt.threads);
  ASSIGN_OR_RETURN(Compression compression, ParseCompression(opt.compression));
  Split split = StratifiedSplit(labels, opt.val_fraction, opt.seed);
  struct Part {
    const char* prefix;
    const std::vector<uint64_t>* ids;
    int shards;
  };
  std::vector<Part> parts = {{"train", &split.train, opt.shards}};
  if (!split.validation.empty()) {
    parts.push_back({"validation", &split.validation,
                     opt.val_shards > 0 ? opt.val_shards : std::max(1, opt.shards / 8)});
  }
  // Sets already complete are removed again if a later one fails: a run leaves all or nothing.
  std::vector<std::string> done;
  auto undo = [&](Status s) {
    std::error_code ec;
    for (const std::string& path : done) {
      std::filesystem::remove(path, ec);
      std::filesystem::remove(IndexPathFor(path), ec);
    }
    return s;
  };
  for (const Part& part : parts) {
    ShardSetOptions so;
    so.dir = opt.out;
    so.prefix = part.prefix;
    so.shards = part.shards;
    so.compression = compression;
    so.overwrite = opt.overwrite;
    const std::vector<uint64_t>& ids = *part.ids;
    Progress progress(fmt::format("{} {}", verb, part.prefix), ids.size(), "images");
    uint64_t written = 0;
    Status s = WriteShardSet(
        so, ids.size(), [&](uint64_t i, std::string* record) { return make(ids[i], record); },
        [&](uint64_t i, const Status& why) { return on_skip(ids[i], why); }, &progress, &written);
    progress.Finish();
    if (!s.ok()) return undo(s);
    for (int shard = 0; shard < part.shards; ++shard) {
      done.push_back((std::filesystem::path(opt.out) / ShardFileName(part.prefix, shard, part.shards))
                         .string());
    }
    fmt::print("{}: {} images in {} shards\n", part.prefix, written, part.shards);
  }
  std::string labels_txt;
  for (const std::string& c : class_names) labels_txt += c + "\n";
  std::string labels_path = (std::filesystem::path(opt.out) / "labels.txt").string();
  Status s = WriteFileAtomically(labels_path, labels_txt);
  if (!s.ok()) return undo(s);
  fmt::print("{} classes in {}\n", class_names.size(), labels_path);
  return Status::OK();
}

}  // namespace sluice
