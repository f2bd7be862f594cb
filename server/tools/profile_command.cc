// `sluice profile`: runs a pipeline in-process for --batches N or --seconds T and reports where
// the time goes: throughput per stage, how busy each stage was, memory per pool, and the
// bottleneck with the change that would help. --json prints the same as one object.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "formats/dtype.h"
#include "formats/example_scanner.h"
#include "formats/file.h"
#include "formats/jpeg_codec.h"
#include "formats/tfrecord_reader.h"
#include "pipeline/pipeline.h"
#include "pipeline/tunables.h"
#include "server/commands.h"
#include "server/tools/profile_report.h"
#include "server/tools/profile_target.h"
#include "server/tools/progress.h"
#include "server/textproto.h"

namespace sluice {
namespace {

struct ProfileFlags {
  std::vector<std::string> files;
  std::string options_file;
  int batch_size = 0;      // 0: the tunable's default (pipeline/tunables.h) or the --options file's
  std::string image_size;  // "": the tunable's default or the file's
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
  std::string transform_set;
  int consumer_index = 0;
  int num_consumers = 0;
  bool no_shared_memory = false;
  bool allow_partial_fleet = false;
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
  if (o.files().empty() && o.file_list().empty()) {
    return InvalidArgument("give --files GLOB or --options FILE");
  }
  RETURN_IF_ERROR(CheckLiteralPathsExist({o.files().begin(), o.files().end()}));
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

// The measured window of a local profile: the pipeline's stats at both ends, and what the
// consumer (this command) got.
struct Measurement {
  StatsSnapshot before;
  StatsSnapshot after;
  int64_t batches = 0;
  uint64_t images = 0;
  double wall = 0;  // seconds, as this command timed the window
  double cpu = 0;   // CPU seconds all of this process's threads used in the window
};

// CPU seconds used so far by all threads of this process.
double ProcessCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

// Reads and drops the first batches (and whole epochs, e.g. to fill a cache): they are not
// measured.
Status WarmUp(Iterator* it, const ProfileFlags& f) {
  Progress progress("warm-up", 0, "batches");
  Batch batch;
  bool end = false;
  for (int64_t warm = 1;; ++warm) {
    RETURN_IF_ERROR(it->GetNext(&batch, &end));
    if (end) return Status::OK();
    progress.Add(1);
    if (batch.position().epoch >= f.warmup_epochs && warm >= f.warmup_batches) break;
  }
  return Status::OK();
}

Result<Measurement> Measure(Iterator* it, const ProfileFlags& f) {
  const int64_t target_batches = f.batches > 0 ? f.batches : (f.seconds > 0 ? 0 : 30);
  Measurement m;
  m.before = it->Stats();
  const double cpu_start = ProcessCpuSeconds();
  const auto start = std::chrono::steady_clock::now();
  Progress progress("profile", static_cast<uint64_t>(target_batches), "batches");
  Batch batch;
  bool end = false;
  for (;;) {
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (target_batches > 0 ? m.batches >= target_batches : elapsed >= f.seconds) break;
    RETURN_IF_ERROR(it->GetNext(&batch, &end));
    if (end) break;
    m.images += static_cast<uint64_t>(batch.size());
    batch.Release();
    ++m.batches;
    progress.Add(1);
  }
  progress.Finish();
  m.wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  m.cpu = ProcessCpuSeconds() - cpu_start;
  m.after = it->Stats();
  return m;
}

// The share of the window the consumer waited for a batch: the consumer stage's starved time.
double ConsumerWait(const Measurement& m) {
  for (size_t i = 0; i < m.after.stages.size() && i < m.before.stages.size(); ++i) {
    if (m.after.stages[i].name != "consumer") continue;
    const double window = m.after.wall_seconds - m.before.wall_seconds;
    const double starved = m.after.stages[i].starved_seconds - m.before.stages[i].starved_seconds;
    return window > 0 ? starved / window : 0;
  }
  return 0;
}

// Boxes the transforms dropped in the window, when the report shows them: with boxes configured,
// or (which cannot be otherwise) when some were dropped.
std::optional<uint64_t> BoxesDropped(const ResolvedOptions& o, const Measurement& m) {
  const uint64_t dropped = m.after.boxes_dropped - m.before.boxes_dropped;
  if (!o.features.boxes.enabled && dropped == 0) return std::nullopt;
  return dropped;
}

ProfileContext LocalContext(const ResolvedOptions& o) {
  ProfileContext c;
  c.side = ProfileSide::kLocal;
  c.cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  c.decoded_short_side = o.decoded_short_side;
  c.files = o.files.size();
  c.compressed = o.compression != Compression::kNone;
  return c;
}

void PrintJson(const ResolvedOptions& o, const Measurement& m, const ProfileReport& report,
               std::optional<double> single_decode) {
  const double images_per_sec = static_cast<double>(m.images) / m.wall;
  nlohmann::json memory = nlohmann::json::object();
  for (const PoolSnapshot& p : m.after.pools) {
    memory[p.name] = {
        {"bytes", p.bytes}, {"peak_bytes", p.peak_bytes}, {"limit_bytes", p.limit_bytes}};
  }
  nlohmann::json j = {{"images_per_sec", images_per_sec},
                      {"bytes_per_sec", images_per_sec * static_cast<double>(o.image_bytes())},
                      {"batches", m.batches},
                      {"images", m.images},
                      {"seconds", m.wall},
                      {"cpu_seconds", m.cpu},
                      {"images_per_cpu_sec", m.cpu > 0 ? static_cast<double>(m.images) / m.cpu : 0},
                      {"threads", o.threads},
                      {"decode_parallelism", m.after.decode_parallelism},
                      {"decode_parallelism_max", m.after.decode_parallelism_max},
                      {"autotune", o.autotune},
                      {"batch_size", o.batch_size},
                      {"height", o.height},
                      {"width", o.width},
                      {"dtype", DTypeName(o.transforms.output.dtype)},
                      {"layout", LayoutName(o.transforms.output.layout)},
                      {"consumer_wait_fraction", report.consumer_wait_fraction},
                      {"skipped", m.after.skipped - m.before.skipped},
                      {"cache_full", m.after.cache_full},
                      {"stages", StagesJson(report)},
                      {"memory", memory},
                      {"bottleneck", BottleneckJson(report)}};
  if (const std::optional<uint64_t> dropped = BoxesDropped(o, m)) j["boxes_dropped"] = *dropped;
  if (single_decode) {
    j["decode_bound"] = {{"single_thread_full_decode_per_sec", *single_decode},
                         {"ratio", images_per_sec / (*single_decode * o.threads)}};
  }
  fmt::print("{}\n", j.dump());
}

void PrintText(const ResolvedOptions& o, const Measurement& m, const ProfileReport& report,
               std::optional<double> single_decode) {
  const double images_per_sec = static_cast<double>(m.images) / m.wall;
  const char* cache_names[] = {"none", "records", "decoded"};
  fmt::print("sluice profile: {} batches of {} at {}x{} ({}), {} threads, cache {}\n", m.batches,
             o.batch_size, o.height, o.width, o.mode == PipelineMode::kTrain ? "train" : "eval",
             o.threads, cache_names[static_cast<int>(o.cache)]);
  fmt::print("  {:.0f} images/s   {:.1f} MB/s   {:.2f} batches/s   {:.2f} s measured\n\n",
             images_per_sec, images_per_sec * static_cast<double>(o.image_bytes()) / 1e6,
             static_cast<double>(m.batches) / m.wall, m.wall);
  fmt::print("{}", FormatStageTable(report));
  fmt::print("  {:<9} waited for batches {:.0f}% of the time\n", "consumer",
             100 * report.consumer_wait_fraction);
  fmt::print("  decode parallelism now {} of {} ({})\n\n", m.after.decode_parallelism,
             m.after.decode_parallelism_max, o.autotune ? "autotuned" : "fixed: no_autotune");
  fmt::print("  memory (bytes now / peak / limit):\n");
  for (const PoolSnapshot& p : m.after.pools) {
    fmt::print("    {:<18} {:>8.1f} MB {:>8.1f} MB {:>10}\n", p.name, p.bytes / 1e6,
               p.peak_bytes / 1e6,
               p.limit_bytes ? fmt::format("{:.1f} MB", p.limit_bytes / 1e6) : "-");
  }
  if (m.after.cache_full) fmt::print("  the cache reached its budget and stopped growing\n");
  if (m.after.skipped > m.before.skipped) {
    fmt::print("  skipped records: {}\n", m.after.skipped - m.before.skipped);
  }
  if (const std::optional<uint64_t> dropped = BoxesDropped(o, m)) {
    fmt::print("  boxes dropped: {} (too little of them left: boxes.min_overlap, min_size)\n",
               *dropped);
  }
  if (single_decode) {
    fmt::print("\n  decode bound: one thread decodes {:.0f} full images/s; the pipeline ran at "
               "{:.2f}x that x {} threads\n",
               *single_decode, images_per_sec / (*single_decode * o.threads), o.threads);
  }
  fmt::print("{}", FormatBottleneck(report));
}

Status Profile(const ProfileFlags& f) {
  ASSIGN_OR_RETURN(const v1::PipelineOptions options, BuildOptions(f));
  ASSIGN_OR_RETURN(std::unique_ptr<Pipeline> pipeline, Pipeline::Create(options));
  const ResolvedOptions& o = pipeline->options();
  ASSIGN_OR_RETURN(std::unique_ptr<Iterator> it, pipeline->MakeIterator());
  RETURN_IF_ERROR(WarmUp(it.get(), f));
  ASSIGN_OR_RETURN(const Measurement m, Measure(it.get(), f));
  const ProfileReport report =
      MakeProfileReport(m.before, m.after, ConsumerWait(m), LocalContext(o));

  it.reset();  // its threads would otherwise compete with the single-thread measurement
  std::optional<double> single_decode;
  if (f.decode_bound) {
    ASSIGN_OR_RETURN(single_decode, MeasureFullDecode(o, 300));
  }
  if (f.json) {
    PrintJson(o, m, report, single_decode);
  } else {
    PrintText(o, m, report, single_decode);
  }
  return Status::OK();
}

int RunProfile(const ProfileFlags& f) {
  const Status s = Profile(f);
  if (s.ok()) return 0;
  fmt::print(stderr, "sluice profile: {}\n", s.message());
  return 1;
}

}  // namespace

void RegisterProfileCommand(CLI::App& app, int* exit_code) {
  auto f = std::make_shared<ProfileFlags>();
  CLI::App* cmd = app.add_subcommand(
      "profile", "Run a pipeline in-process and report throughput, stage load and the bottleneck");
  cmd->add_option("--files", f->files,
                  "Glob(s) of TFRecord or WebDataset tar shards, or of image files");
  cmd->add_option("--options", f->options_file,
                  "Text-format sluice.v1.PipelineOptions (flags given as well override it)");
  cmd->add_option("--batch-size", f->batch_size,
                  fmt::format("Images per batch (default {})",
                              Spec(Tunable::kBatchSize).default_value));
  cmd->add_option("--image-size", f->image_size,
                  fmt::format("Output size: N or HxW (default {})",
                              Spec(Tunable::kImageHeight).default_value));
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
  cmd->add_option("--transform-set", f->transform_set,
                  "With --target: one of the dataset's transform sets (ListDatasets); default: "
                  "its own list");
  cmd->add_option("--num-consumers", f->num_consumers,
                  "With --job-name: the job's consumers in lockstep (each gets every N-th batch, "
                  "the same number per epoch)");
  cmd->add_option("--consumer-index", f->consumer_index,
                  "With --num-consumers: this consumer's index, 0..N-1");
  cmd->add_flag("--no-shared-memory", f->no_shared_memory,
                "With --target: images through the socket even from a server on this host");
  cmd->add_flag("--allow-partial-fleet", f->allow_partial_fleet,
                "With --target: when the targets do not reach every part of a `sluice serve "
                "--shard I/N` fleet, warn and read the parts reached (default: refuse)");
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
    r.transform_set = f->transform_set;
    r.consumer_index = f->consumer_index;
    r.num_consumers = f->num_consumers;
    r.shared_memory = !f->no_shared_memory;
    r.allow_partial_fleet = f->allow_partial_fleet;
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
