// `sluice profile`: runs a pipeline in-process for --batches N or --seconds T and reports where
// the time goes: throughput per stage, how busy each stage was, memory per pool, and the
// bottleneck with the change that would help. --json prints the same as one object.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "formats/example_scanner.h"
#include "formats/file.h"
#include "formats/jpeg_codec.h"
#include "formats/tfrecord_reader.h"
#include "pipeline/pipeline.h"
#include "server/commands.h"
#include "server/tools/profile_target.h"
#include "server/tools/progress.h"
#include "server/textproto.h"

namespace sluice {
namespace {

struct ProfileFlags {
  std::vector<std::string> files;
  std::string options_file;
  int batch_size = 0;     // 0: PipelineOptions' default (256) or the --options file's
  std::string image_size;  // "": default (224) or the file's
  std::string mode;        // "": default (train) or the file's
  int threads = 0;
  std::string cache;  // "": none, or the file's
  std::string cache_budget;
  std::string memory_budget;
  int64_t shuffle_buffer = -1;
  int cycle_length = 0;
  int block_length = 0;
  int prefetch = 0;
  uint64_t seed = 0;
  int64_t batches = 0;
  double seconds = 0;
  int64_t warmup_batches = 2;
  int64_t warmup_epochs = 0;
  bool json = false;
  bool decode_bound = false;
  // Remote: measure a running `sluice serve` instead (profile_target.h).
  std::vector<std::string> targets;
  std::string dataset;
  std::string token_file;
  std::string tls_ca_file;
  std::string job_name;
  bool no_shared_memory = false;
};

// "512M", "2G", "1.5GiB", "1000000" → bytes.
Result<int64_t> ParseBytes(const std::string& text) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (...) {
    return InvalidArgument("not a size: '" + text + "'");
  }
  std::string unit = text.substr(used);
  std::transform(unit.begin(), unit.end(), unit.begin(), ::tolower);
  double m = 1;
  if (unit == "k" || unit == "kb" || unit == "kib") m = 1024;
  else if (unit == "m" || unit == "mb" || unit == "mib") m = 1024.0 * 1024;
  else if (unit == "g" || unit == "gb" || unit == "gib") m = 1024.0 * 1024 * 1024;
  else if (!unit.empty() && unit != "b")
    return InvalidArgument("unknown size unit in '" + text + "'");
  return static_cast<int64_t>(v * m);
}

// --image-size N or HxW, as {height, width}.
Result<std::pair<int, int>> ParseImageSize(const std::string& flag) {
  int h = 0, w = 0;
  if (std::sscanf(flag.c_str(), "%dx%d", &h, &w) == 2) return std::pair{h, w};
  if (std::sscanf(flag.c_str(), "%d", &h) == 1) return std::pair{h, h};
  return InvalidArgument("--image-size wants N or HxW, not '" + flag + "'");
}

Result<v1::PipelineOptions> BuildOptions(const ProfileFlags& f) {
  v1::PipelineOptions o;
  if (!f.options_file.empty()) {
    RETURN_IF_ERROR(ParseTextProtoFile(f.options_file, &o));
  }
  for (const std::string& g : f.files) o.add_files(g);
  if (o.files().empty()) return InvalidArgument("give --files GLOB or --options FILE");
  if (f.batch_size > 0) o.set_batch_size(f.batch_size);
  if (!f.image_size.empty()) {
    ASSIGN_OR_RETURN(const auto size, ParseImageSize(f.image_size));
    o.set_image_height(size.first);
    o.set_image_width(size.second);
  }
  if (!f.mode.empty()) o.set_mode(f.mode == "eval" ? v1::MODE_EVAL : v1::MODE_TRAIN);
  if (f.threads > 0) o.set_threads(f.threads);
  if (f.cache == "none") o.mutable_cache()->set_mode(v1::CACHE_NONE);
  if (f.cache == "records") o.mutable_cache()->set_mode(v1::CACHE_RECORDS);
  if (f.cache == "decoded") o.mutable_cache()->set_mode(v1::CACHE_DECODED);
  if (!f.cache_budget.empty()) {
    ASSIGN_OR_RETURN(int64_t b, ParseBytes(f.cache_budget));
    o.mutable_cache()->set_budget_bytes(b);
  }
  if (!f.memory_budget.empty()) {
    ASSIGN_OR_RETURN(int64_t b, ParseBytes(f.memory_budget));
    o.set_memory_budget_bytes(b);
  }
  if (f.shuffle_buffer >= 0) o.mutable_shuffle()->set_buffer_size(f.shuffle_buffer);
  if (f.cycle_length > 0) o.mutable_interleave()->set_cycle_length(f.cycle_length);
  if (f.block_length > 0) o.mutable_interleave()->set_block_length(f.block_length);
  if (f.prefetch > 0) o.set_prefetch(f.prefetch);
  if (f.seed) o.set_seed(f.seed);
  o.set_epochs(0);  // profile runs until it has measured enough
  return o;
}

// Single-thread full decode of up to `n` images from the files: the per-core yardstick.
Result<double> MeasureFullDecode(const ResolvedOptions& o, int n) {
  std::vector<std::string> jpegs;
  ExampleScanner scanner(o.image_key, o.label_key);
  for (const std::string& path : o.files) {
    if (static_cast<int>(jpegs.size()) >= n) break;
    TFRecordReaderOptions ro;
    ro.compression = o.compression;
    ASSIGN_OR_RETURN(auto reader, TFRecordReader::Open(path, ro));
    while (static_cast<int>(jpegs.size()) < n) {
      std::string_view record, image;
      bool eof = false;
      int64_t label;
      if (!reader->ReadRecord(&record, &eof).ok() || eof) break;
      if (scanner.Scan(record, &image, &label).ok()) jpegs.emplace_back(image);
    }
  }
  if (jpegs.empty()) return NotFound("no decodable records for --decode-bound");
  JpegDecoder decoder;
  Image image;
  auto start = std::chrono::steady_clock::now();
  int ok = 0;
  for (const std::string& j : jpegs) ok += decoder.Decode(j, &image, o.max_pixels).ok();
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return ok / s;
}

struct StageRow {
  std::string name;
  double items_per_sec = 0;
  double mb_per_sec = 0;
  double busy_fraction = 0;  // of the threads the stage may use
  int parallelism = 0;
  double starved_fraction = 0;
  double blocked_fraction = 0;
};

struct Bottleneck {
  std::string stage;
  std::string reason;
  std::vector<std::string> fixes;
};

Bottleneck FindBottleneck(const ResolvedOptions& o, const std::vector<StageRow>& rows,
                          double consumer_wait_fraction) {
  auto row = [&](const std::string& name) {
    for (const StageRow& r : rows) {
      if (r.name == name) return r;
    }
    return StageRow{};
  };
  StageRow read = row("read"), decode = row("decode");
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  Bottleneck b;
  if (consumer_wait_fraction < 0.05) {
    b.stage = "consumer";
    b.reason = fmt::format("batches were waiting for the consumer {:.0f}% of the time",
                           100 * (1 - consumer_wait_fraction));
    b.fixes.push_back("the pipeline keeps up; speed up the consumer (trainer) instead");
    return b;
  }
  if (read.busy_fraction > 0.7 && read.busy_fraction >= decode.busy_fraction) {
    b.stage = "read";
    b.reason = fmt::format("the reader was busy {:.0f}% of the time", 100 * read.busy_fraction);
    if (o.cache == CacheKind::kNone)
      b.fixes.push_back("--cache records (later epochs skip file I/O)");
    b.fixes.push_back("a larger --cycle-length (more files read at once)");
    if (o.files.size() > 256) b.fixes.push_back("fewer, larger files (~100-200 MB each)");
    if (o.compression != Compression::kNone)
      b.fixes.push_back("uncompressed shards (inflate is serial)");
    return b;
  }
  if (decode.busy_fraction > 0.7) {
    b.stage = "decode";
    b.reason = fmt::format("decode threads were busy {:.0f}% of the time on {} threads",
                           100 * decode.busy_fraction, o.threads);
    if (o.threads < cores) b.fixes.push_back(fmt::format("more --threads ({} cores here)", cores));
    if (o.cache != CacheKind::kDecoded) {
      // A 4:3 image at the cache's short side, RGB.
      double per_image = static_cast<double>(o.decoded_short_side) * o.decoded_short_side * 4;
      b.fixes.push_back(fmt::format(
          "--cache decoded if the data set fits in memory: ~{:.0f} KB per image at short side {} "
          "({:.1f} GB per million images)",
          per_image / 1e3, o.decoded_short_side, per_image * 1e6 / 1e9));
    }
    b.fixes.push_back("more machines: serve shards from several `sluice serve` workers");
    return b;
  }
  b.stage = "pipeline";
  b.reason = fmt::format("no stage is saturated (read {:.0f}%, decode {:.0f}% busy)",
                         100 * read.busy_fraction, 100 * decode.busy_fraction);
  b.fixes.push_back("a larger --prefetch, or a larger shuffle buffer if reads stall on it");
  return b;
}

int RunProfile(const ProfileFlags& f) {
  Result<v1::PipelineOptions> options = BuildOptions(f);
  if (!options.ok()) {
    fmt::print(stderr, "sluice profile: {}\n", options.status().message());
    return 1;
  }
  Result<std::unique_ptr<Pipeline>> pipeline = Pipeline::Create(*options);
  if (!pipeline.ok()) {
    fmt::print(stderr, "sluice profile: {}\n", pipeline.status().message());
    return 1;
  }
  const ResolvedOptions& o = (*pipeline)->options();
  int64_t target_batches = f.batches > 0 ? f.batches : (f.seconds > 0 ? 0 : 30);
  auto it = (*pipeline)->MakeIterator();
  if (!it.ok()) {
    fmt::print(stderr, "sluice profile: {}\n", it.status().message());
    return 1;
  }

  // Warm-up: the first batches (and whole epochs, e.g. to fill a cache) are not measured.
  Batch batch;
  bool end = false;
  int64_t warm = 0;
  {
    Progress progress("warm-up", 0, "batches");
    for (;;) {
      Status s = (*it)->GetNext(&batch, &end);
      if (!s.ok()) {
        fmt::print(stderr, "sluice profile: {}\n", s.message());
        return 1;
      }
      if (end) break;
      progress.Add(1);
      ++warm;
      if (batch.position().epoch >= f.warmup_epochs && warm >= f.warmup_batches) break;
    }
  }
  batch.Release();
  StatsSnapshot before = (*it)->Stats();
  auto start = std::chrono::steady_clock::now();
  int64_t measured = 0;
  uint64_t images = 0;
  {
    Progress progress("profile", static_cast<uint64_t>(target_batches), "batches");
    for (;;) {
      double elapsed =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (target_batches > 0 ? measured >= target_batches : elapsed >= f.seconds) break;
      Status s = (*it)->GetNext(&batch, &end);
      if (!s.ok()) {
        fmt::print(stderr, "sluice profile: {}\n", s.message());
        return 1;
      }
      if (end) break;
      images += static_cast<uint64_t>(batch.size());
      batch.Release();
      ++measured;
      progress.Add(1);
    }
  }
  double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  StatsSnapshot after = (*it)->Stats();

  std::vector<StageRow> rows;
  double consumer_wait = 0;
  for (size_t i = 0; i < after.stages.size(); ++i) {
    const StageSnapshot& a = after.stages[i];
    const StageSnapshot& b = before.stages[i];
    if (a.name == "consumer") {
      consumer_wait = (a.starved_seconds - b.starved_seconds) / wall;
      continue;
    }
    if (a.name == "shuffle") continue;  // timed as part of read
    StageRow r;
    r.name = a.name;
    r.items_per_sec = static_cast<double>(a.items - b.items) / wall;
    r.mb_per_sec = static_cast<double>(a.bytes - b.bytes) / wall / 1e6;
    int lanes = a.name == "decode" ? o.threads : 1;
    r.busy_fraction = (a.busy_seconds - b.busy_seconds) / (wall * lanes);
    r.parallelism = a.max_parallelism;
    r.starved_fraction = (a.starved_seconds - b.starved_seconds) / (wall * lanes);
    r.blocked_fraction = (a.blocked_seconds - b.blocked_seconds) / (wall * lanes);
    rows.push_back(r);
  }
  if (rows.size() >= 2 && rows[0].name == "read") {
    // The batch stage's bytes are the images it delivered.
    rows.back().mb_per_sec = static_cast<double>(images) * static_cast<double>(o.image_bytes()) /
                             wall / 1e6;
  }
  Bottleneck bottleneck = FindBottleneck(o, rows, consumer_wait);
  double images_per_sec = static_cast<double>(images) / wall;
  double bytes_per_sec = images_per_sec * static_cast<double>(o.image_bytes());

  it->reset();  // its threads would otherwise compete with the single-thread measurement
  std::optional<double> single_decode;
  if (f.decode_bound) {
    Result<double> r = MeasureFullDecode(o, 300);
    if (!r.ok()) {
      fmt::print(stderr, "sluice profile: {}\n", r.status().message());
      return 1;
    }
    single_decode = *r;
  }

  if (f.json) {
    nlohmann::json stages = nlohmann::json::array();
    for (const StageRow& r : rows) {
      stages.push_back({{"name", r.name},
                        {"items_per_sec", r.items_per_sec},
                        {"mb_per_sec", r.mb_per_sec},
                        {"busy_fraction", r.busy_fraction},
                        {"parallelism", r.parallelism},
                        {"starved_fraction", r.starved_fraction},
                        {"blocked_fraction", r.blocked_fraction}});
    }
    nlohmann::json memory = nlohmann::json::object();
    for (const PoolSnapshot& p : after.pools) {
      memory[p.name] = {
          {"bytes", p.bytes}, {"peak_bytes", p.peak_bytes}, {"limit_bytes", p.limit_bytes}};
    }
    nlohmann::json j = {{"images_per_sec", images_per_sec},
                        {"bytes_per_sec", bytes_per_sec},
                        {"batches", measured},
                        {"images", images},
                        {"seconds", wall},
                        {"threads", o.threads},
                        {"decode_parallelism", after.decode_parallelism},
                        {"decode_parallelism_max", after.decode_parallelism_max},
                        {"autotune", o.autotune},
                        {"batch_size", o.batch_size},
                        {"height", o.height},
                        {"width", o.width},
                        {"consumer_wait_fraction", consumer_wait},
                        {"skipped", after.skipped - before.skipped},
                        {"cache_full", after.cache_full},
                        {"stages", stages},
                        {"memory", memory},
                        {"bottleneck",
                         {{"stage", bottleneck.stage},
                          {"reason", bottleneck.reason},
                          {"fixes", bottleneck.fixes}}}};
    if (single_decode) {
      j["decode_bound"] = {{"single_thread_full_decode_per_sec", *single_decode},
                           {"ratio", images_per_sec / (*single_decode * o.threads)}};
    }
    fmt::print("{}\n", j.dump());
    return 0;
  }

  const char* cache_names[] = {"none", "records", "decoded"};
  fmt::print("sluice profile: {} batches of {} at {}x{} ({}), {} threads, cache {}\n", measured,
             o.batch_size, o.height, o.width, o.mode == PipelineMode::kTrain ? "train" : "eval",
             o.threads, cache_names[static_cast<int>(o.cache)]);
  fmt::print("  {:.0f} images/s   {:.1f} MB/s   {:.2f} batches/s   {:.2f} s measured\n\n",
             images_per_sec, bytes_per_sec / 1e6, measured / wall, wall);
  fmt::print("  {:<9} {:>11} {:>9} {:>7} {:>6} {:>9} {:>9}\n", "stage", "items/s", "MB/s", "busy",
             "par", "starved", "blocked");
  for (const StageRow& r : rows) {
    fmt::print("  {:<9} {:>11.0f} {:>9.1f} {:>6.0f}% {:>6} {:>8.0f}% {:>8.0f}%\n", r.name,
               r.items_per_sec, r.mb_per_sec, 100 * r.busy_fraction, r.parallelism,
               100 * r.starved_fraction, 100 * r.blocked_fraction);
  }
  fmt::print("  {:<9} waited for batches {:.0f}% of the time\n", "consumer", 100 * consumer_wait);
  fmt::print("  decode parallelism now {} of {} ({})\n\n", after.decode_parallelism,
             after.decode_parallelism_max, o.autotune ? "autotuned" : "fixed: no_autotune");
  fmt::print("  memory (bytes now / peak / limit):\n");
  for (const PoolSnapshot& p : after.pools) {
    fmt::print("    {:<18} {:>8.1f} MB {:>8.1f} MB {:>10}\n", p.name, p.bytes / 1e6,
               p.peak_bytes / 1e6,
               p.limit_bytes ? fmt::format("{:.1f} MB", p.limit_bytes / 1e6) : "-");
  }
  if (after.cache_full) fmt::print("  the cache reached its budget and stopped growing\n");
  if (after.skipped > before.skipped) {
    fmt::print("  skipped records: {}\n", after.skipped - before.skipped);
  }
  if (single_decode) {
    fmt::print("\n  decode bound: one thread decodes {:.0f} full images/s; the pipeline ran at "
               "{:.2f}x that x {} threads\n",
               *single_decode, images_per_sec / (*single_decode * o.threads), o.threads);
  }
  fmt::print("\n  bottleneck: {} — {}\n", bottleneck.stage, bottleneck.reason);
  for (const std::string& fix : bottleneck.fixes) fmt::print("    try: {}\n", fix);
  return 0;
}

}  // namespace

void RegisterProfileCommand(CLI::App& app, int* exit_code) {
  auto f = std::make_shared<ProfileFlags>();
  CLI::App* cmd = app.add_subcommand(
      "profile", "Run a pipeline in-process and report throughput, stage load and the bottleneck");
  cmd->add_option("--files", f->files, "TFRecord glob(s)");
  cmd->add_option("--options", f->options_file,
                  "Text-format sluice.v1.PipelineOptions (flags given as well override it)");
  cmd->add_option("--batch-size", f->batch_size, "Images per batch (default 256)");
  cmd->add_option("--image-size", f->image_size, "Output size: N or HxW (default 224)");
  cmd->add_option("--mode", f->mode, "train (random crop + flip; default) or eval (centre crop)")
      ->check(CLI::IsMember({"train", "eval"}));
  cmd->add_option("--threads", f->threads, "Decode threads (0 = all cores)");
  cmd->add_option("--cache", f->cache, "none (default), records or decoded")
      ->check(CLI::IsMember({"none", "records", "decoded"}));
  cmd->add_option("--cache-budget", f->cache_budget, "Cache size, e.g. 2G");
  cmd->add_option("--memory-budget", f->memory_budget, "Pipeline memory budget, e.g. 4G");
  cmd->add_option("--shuffle-buffer", f->shuffle_buffer, "Records in the shuffle buffer");
  cmd->add_option("--cycle-length", f->cycle_length, "Files read at once");
  cmd->add_option("--block-length", f->block_length, "Records taken from each file in turn");
  cmd->add_option("--prefetch", f->prefetch, "Ready batches queued");
  cmd->add_option("--seed", f->seed, "Seed");
  cmd->add_option("--batches", f->batches, "Batches to measure (default 30)");
  cmd->add_option("--seconds", f->seconds, "Or: seconds to measure");
  cmd->add_option("--warmup-batches", f->warmup_batches, "Batches not measured")
      ->capture_default_str();
  cmd->add_option("--warmup-epochs", f->warmup_epochs,
                  "Whole epochs not measured (1 to time a warm cache)")
      ->capture_default_str();
  cmd->add_flag("--json", f->json, "Print one JSON object");
  cmd->add_flag("--decode-bound", f->decode_bound,
                "Also time single-thread full decode and compare");
  cmd->add_option("--target", f->targets,
                  "Profile a running `sluice serve` at HOST:PORT, unix:PATH or dns:///HOST:PORT "
                  "(repeat to fan in)");
  cmd->add_option("--dataset", f->dataset, "With --target: the dataset's name");
  cmd->add_option("--token-file", f->token_file, "With --target: file holding the bearer token");
  cmd->add_option("--tls-ca", f->tls_ca_file, "With --target: PEM roots to trust (enables TLS)");
  cmd->add_option("--job-name", f->job_name, "With --target: join this shared job");
  cmd->add_flag("--no-shared-memory", f->no_shared_memory,
                "With --target: images through the socket even from a server on this host");
  cmd->callback([f, exit_code] {
    if (f->targets.empty()) {
      *exit_code = RunProfile(*f);
      return;
    }
    if (f->dataset.empty() || !f->files.empty() || !f->options_file.empty()) {
      fmt::print(stderr, "sluice profile: --target needs --dataset NAME (and no --files or "
                         "--options: the server's configuration names the files)\n");
      *exit_code = 2;
      return;
    }
    RemoteProfileFlags r;
    r.targets = f->targets;
    r.dataset = f->dataset;
    r.token_file = f->token_file;
    r.tls_ca_file = f->tls_ca_file;
    r.job_name = f->job_name;
    r.shared_memory = !f->no_shared_memory;
    r.batch_size = f->batch_size;
    if (!f->image_size.empty()) {
      const Result<std::pair<int, int>> size = ParseImageSize(f->image_size);
      if (!size.ok()) {
        fmt::print(stderr, "sluice profile: {}\n", size.status().message());
        *exit_code = 2;
        return;
      }
      std::tie(r.height, r.width) = *size;
    }
    r.mode = f->mode;
    if (f->seed) r.seed = f->seed;
    r.prefetch = f->prefetch;
    r.batches = f->batches;
    r.seconds = f->seconds;
    r.warmup_batches = f->warmup_batches;
    r.json = f->json;
    *exit_code = RunRemoteProfile(r);
  });
}

}  // namespace sluice
