#include "trainer/trainer.h"

#include <fmt/format.h>
#include <oneapi/tbb/info.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>

#include "client/client.h"
#include "trainer/checkpoint.h"
#include "trainer/cpu_backend.h"
#if SLUICE_HAVE_CUDA
#include "trainer/cuda_backend.h"
#include "trainer/cuda_util.h"
#endif

namespace sluice::trainer {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Linear warm-up to `peak`, then cosine decay to 10% of it at `total` steps.
float LearningRate(const TrainerOptions& o, int64_t step) {
  const int64_t warmup =
      o.warmup_steps >= 0 ? o.warmup_steps : std::min<int64_t>(100, o.steps / 10);
  if (step < warmup) return o.lr * static_cast<float>(step + 1) / static_cast<float>(warmup);
  const double span = std::max<int64_t>(1, o.steps - warmup);
  const double progress = std::min(1.0, static_cast<double>(step - warmup) / span);
  return static_cast<float>(o.lr * (0.1 + 0.9 * 0.5 * (1.0 + std::cos(M_PI * progress))));
}

Status CheckBatch(const ReceivedBatch& batch, const ModelConfig& config,
                  const std::string& dataset) {
  const BatchMeta& m = batch.meta;
  if (m.height != config.image_size || m.width != config.image_size || m.channels != 3) {
    return InvalidArgument(fmt::format(
        "dataset {}: batch {}:{} is {}×{}×{}, the model takes {}×{}×3", dataset, m.epoch, m.index,
        m.height, m.width, m.channels, config.image_size, config.image_size));
  }
  for (int32_t label : batch.labels) {
    if (label < 0 || label >= config.classes) {
      return InvalidArgument(fmt::format(
          "dataset {}: batch {}:{} has label {}, outside [0, {}) (set --num-classes, or the "
          "dataset's label_offset)",
          dataset, m.epoch, m.index, label, config.classes));
    }
  }
  return Status::OK();
}

v1::StreamRequest BaseRequest(const TrainerOptions& o, const std::string& dataset) {
  v1::StreamRequest r;
  r.set_dataset(dataset);
  r.set_batch_size(o.batch_size);
  r.set_image_height(o.image_size);
  r.set_image_width(o.image_size);
  return r;
}

// The model on one of the backends, for evaluation: the CPU's with `params`, or the GPU's own
// weights when `gpu` is set.
struct EvalBackend {
  CpuBackend* cpu = nullptr;
  std::span<const float> params;
#if SLUICE_HAVE_CUDA
  CudaBackend* gpu = nullptr;
#endif
  const ModelConfig& config() const { return cpu->config(); }
  Result<StepResult> Forward(const ReceivedBatch& batch) {
#if SLUICE_HAVE_CUDA
    if (gpu != nullptr) return gpu->Forward(batch.images, batch.labels);
#endif
    return cpu->Forward(params, batch.images, batch.labels);
  }
};

// Accuracy (and mean loss) over one epoch of the eval stream.
Result<StepResult> Evaluate(Client& client, const TrainerOptions& o, EvalBackend& backend,
                            int64_t* images) {
  v1::StreamRequest request = BaseRequest(o, o.eval_dataset);
  request.set_mode(v1::MODE_EVAL);
  request.set_epochs(1);
  ASSIGN_OR_RETURN(std::unique_ptr<BatchStream> stream, client.Stream(request));
  StepResult total;
  *images = 0;
  for (;;) {
    ReceivedBatch batch;
    bool end = false;
    RETURN_IF_ERROR(stream->Next(&batch, &end).WithContext("eval stream"));
    if (end) break;
    RETURN_IF_ERROR(CheckBatch(batch, backend.config(), o.eval_dataset));
    ASSIGN_OR_RETURN(const StepResult r, backend.Forward(batch));
    total.loss_sum += r.loss_sum;
    total.correct += r.correct;
    *images += batch.meta.n;
  }
  return total;
}

// The log line of a step whose update was skipped. fp16: a gradient overflow is routine (the
// loss scale was too high and backs off), so the line says so rather than sounding an alarm.
std::string SkipMessage(int64_t step, double loss, double norm, bool fp16, float scale,
                        float next_scale) {
  if (fp16 && std::isfinite(loss)) {
    return fmt::format(
        "step {}: gradient overflow at loss scale {:g}; update skipped, scale → {:g}\n", step,
        scale, next_scale);
  }
  return fmt::format("step {}: non-finite {} (loss {}, gradient norm {}); update skipped\n", step,
                     std::isfinite(loss) ? "gradient" : "loss", loss, norm);
}

nlohmann::json Number(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
}

}  // namespace

std::string TrainSummary::ToJson() const {
  nlohmann::json j = {
      {"steps", steps},
      {"initial_loss", Number(initial_loss)},
      {"final_loss", Number(final_loss)},
      {"train_accuracy", Number(train_accuracy)},
      {"eval_accuracy", eval_accuracy >= 0 ? Number(eval_accuracy) : nlohmann::json(nullptr)},
      {"images_per_sec", Number(images_per_sec)},
      {"data_wait_fraction", Number(data_wait_fraction)},
      {"device", device},
      {"skipped_updates", skipped_updates},
      {"precision", precision},
  };
  if (loss_scale > 0) j["loss_scale"] = loss_scale;
  if (h2d_bytes_per_sec > 0) j["h2d_gb_per_sec"] = Number(h2d_bytes_per_sec / 1e9);
  if (h2d_plain_bytes_per_sec > 0)
    j["h2d_plain_gb_per_sec"] = Number(h2d_plain_bytes_per_sec / 1e9);
  if (device == "cuda") {
    j["cuda"] = {
        {"graph_launches", cuda_graph_launches},
        {"eager_launches", cuda_eager_launches},
        {"graphs_given_up", graphs_given_up},
        {"staged_in_place", staged_in_place},
        {"staged_via_copy", staged_via_copy},
        {"shared_memory_batches", shared_memory_batches},
    };
  }
  return j.dump();
}

Result<std::string> ResolveDevice(const std::string& device, std::string* note) {
  if (device == "cpu") {
    *note = "as asked";
    return std::string("cpu");
  }
  if (device != "auto" && device != "cuda")
    return InvalidArgument("--device " + device + ": expected auto, cpu or cuda");
#if SLUICE_HAVE_CUDA
  std::string reason;
  const int devices = CudaDeviceCount(&reason);
  if (devices > 0) {
    *note = fmt::format("{}: {} CUDA device{}, using device 0", device, devices,
                        devices == 1 ? "" : "s");
    return std::string("cuda");
  }
  if (device == "cuda") {
    return FailedPrecondition("--device cuda: no usable CUDA device (" + reason +
                              "); use --device cpu or auto");
  }
  *note = "auto: no usable CUDA device: " + reason;
  return std::string("cpu");
#else
  if (device == "cuda") {
    return Unimplemented(
        "--device cuda: this build has no CUDA backend (built without nvcc); use --device cpu or "
        "auto");
  }
  *note = "auto: this build has no CUDA backend (built without nvcc)";
  return std::string("cpu");
#endif
}

Result<Precision> ResolvePrecision(const std::string& device, const std::string& precision,
                                   std::string* note) {
  std::string unused;
  if (note == nullptr) note = &unused;
  const bool cpu = device == "cpu";
  if (precision == "auto") {
    *note = cpu ? "fp32 (auto on the CPU)" : "bf16 (auto on CUDA)";
    return cpu ? Precision::kFp32 : Precision::kBf16;
  }
  Result<Precision> p = ParsePrecision(precision);
  if (!p.ok()) {
    return InvalidArgument("--precision " + precision + ": expected auto, fp32, bf16 or fp16");
  }
  *note = precision;
  if (cpu && *p != Precision::kFp32)
    *note += " emulated on the CPU (fp32 arithmetic, rounded storage)";
  if (*p == Precision::kFp16) *note += " with dynamic loss scaling";
  return *p;
}

Result<TrainSummary> Train(const TrainerOptions& o, std::ostream& log) {
  TrainSummary summary;
  std::string device_note;
  ASSIGN_OR_RETURN(summary.device, ResolveDevice(o.device, &device_note));
  std::string precision_note;
  ASSIGN_OR_RETURN(const Precision precision,
                   ResolvePrecision(summary.device, o.precision, &precision_note));
  summary.precision = PrecisionName(precision);
  const bool fp16 = precision == Precision::kFp16;
  if (o.steps < 1) return InvalidArgument("--steps must be at least 1");
  if (o.batch_size < 1) return InvalidArgument("--batch-size must be at least 1");
  if (o.accum < 1) return InvalidArgument("--accum must be at least 1");
  if (!(o.lr > 0)) return InvalidArgument("--lr must be positive");
  if (o.resume && o.checkpoint_dir.empty())
    return InvalidArgument("--resume needs --checkpoint DIR");

  ClientOptions client_options;
  client_options.targets = o.targets;
  client_options.token = o.token;
  // GPU: the step in flight holds its micro-batches and the next step's are fetched meanwhile.
  client_options.max_held = 2 * o.accum;
#if SLUICE_HAVE_CUDA
  // Batches decoded straight into page-locked memory go to the device with no staging copy.
  if (summary.device == "cuda") client_options.allocator = std::make_shared<PinnedAllocator>();
#endif
  ASSIGN_OR_RETURN(std::unique_ptr<Client> client, Client::Create(client_options));

  ModelConfig config;
  config.image_size = o.image_size;
  config.patch = o.patch;
  config.width = o.width;
  config.depth = o.depth;
  config.classes = o.num_classes;
  if (config.classes == 0) {
    ASSIGN_OR_RETURN(std::vector<v1::DatasetInfo> datasets, client->ListDatasets());
    for (const v1::DatasetInfo& info : datasets) {
      if (info.name() == o.dataset) config.classes = info.num_classes();
    }
    if (config.classes == 0) {
      return InvalidArgument("dataset " + o.dataset +
                             ": the server does not give num_classes; pass --num-classes");
    }
  }
  RETURN_IF_ERROR(config.Validate());

  CpuBackend backend(config, precision);
  LossScaleState scaler;
  if (fp16) scaler.scale = o.loss_scale.initial;
  const ParameterLayout& layout = backend.layout();
  std::vector<float> params = InitParameters(config, layout, o.seed);
  std::vector<float> grads(layout.total());
  AdamW optimizer(layout, o.adamw);

  v1::StreamRequest request = BaseRequest(o, o.dataset);
  request.set_seed(o.seed);
  request.set_epochs(0);
  int64_t step = 0;
  bool has_position = false;
  BatchMeta last;  // the last training batch consumed
  if (o.resume) {
    Result<Checkpoint> loaded = LoadCheckpoint(o.checkpoint_dir);
    if (!loaded.ok() && loaded.status().code() != StatusCode::kNotFound) return loaded.status();
    if (loaded.ok()) {
      Checkpoint& ck = *loaded;
      const ModelConfig& c = ck.config;
      if (c != config || ck.params.size() != params.size()) {
        return FailedPrecondition(fmt::format(
            "{} holds a model of image size {}, patch {}, width {}, depth {}, {} classes; this run "
            "asks for {}, {}, {}, {}, {}",
            CheckpointPath(o.checkpoint_dir), c.image_size, c.patch, c.width, c.depth, c.classes,
            config.image_size, config.patch, config.width, config.depth, config.classes));
      }
      params = std::move(ck.params);
      optimizer.first_moment() = std::move(ck.first_moment);
      optimizer.second_moment() = std::move(ck.second_moment);
      optimizer.set_updates(ck.adam_updates);
      step = ck.step;
      has_position = ck.has_position;
      last.epoch = ck.epoch;
      last.index = ck.index;
      last.end_record = ck.end_record;
      if (fp16 && ck.loss_scale > 0) {
        scaler.scale = ck.loss_scale;
        scaler.good_steps = ck.loss_scale_good_steps;
      }
      if (has_position) {
        request.mutable_start_position()->set_epoch(last.epoch);
        request.mutable_start_position()->set_index(last.index + 1);
        request.mutable_start_position()->set_end_record(last.end_record);
      }
      log << fmt::format("resuming from {} at step {} (stream after batch {}:{})\n",
                         CheckpointPath(o.checkpoint_dir), step, last.epoch, last.index);
    } else {
      log << "no checkpoint in " << o.checkpoint_dir << "; starting from step 0\n";
    }
  }

#if SLUICE_HAVE_CUDA
  std::unique_ptr<CudaBackend> gpu;
  if (summary.device == "cuda") {
    CudaBackendOptions gpu_options;
    gpu_options.max_batch = o.batch_size;
    gpu_options.adamw = o.adamw;
    gpu_options.precision = precision;
    gpu_options.loss_scale = o.loss_scale;
    ASSIGN_OR_RETURN(gpu, CudaBackend::Create(config, gpu_options));
    RETURN_IF_ERROR(gpu->SetParameters(params));
    if (optimizer.updates() > 0) {
      RETURN_IF_ERROR(gpu->SetOptimizerState(optimizer.first_moment(), optimizer.second_moment(),
                                             optimizer.updates()));
    }
    RETURN_IF_ERROR(gpu->SetLossScale(scaler));
    const size_t batch_bytes = size_t(o.batch_size) * o.image_size * o.image_size * 3;
    ASSIGN_OR_RETURN(summary.h2d_plain_bytes_per_sec, MeasurePinnedCopyBandwidth(batch_bytes));
  }
#endif

  log << fmt::format(
             "sluice-trainer: device {} ({}), {}, {} threads; model S={} P={} D={} L={} "
             "hidden={} "
             "classes={} ({} parameters); batch {}, accum {}, {} steps, lr {}\n",
             summary.device, device_note, precision_note, tbb::info::default_concurrency(),
             config.image_size, config.patch, config.width, config.depth, config.hidden(),
             config.classes, layout.total(), o.batch_size, o.accum, o.steps, o.lr)
      << std::flush;

  // Brings the GPU's weights and optimizer state to the host copies (checkpoints).
  auto sync_from_device = [&]() -> Status {
#if SLUICE_HAVE_CUDA
    if (gpu != nullptr) {
      int64_t updates = 0;
      RETURN_IF_ERROR(gpu->GetParameters(&params));
      RETURN_IF_ERROR(
          gpu->GetOptimizerState(&optimizer.first_moment(), &optimizer.second_moment(), &updates));
      optimizer.set_updates(updates);
    }
#endif
    return Status::OK();
  };
  int64_t saved_step = -1;  // the last checkpoint's step: the end need not write it again
  auto save = [&]() -> Status {
    if (o.checkpoint_dir.empty() || saved_step == step) return Status::OK();
    RETURN_IF_ERROR(sync_from_device());
    Checkpoint ck;
    ck.config = config;
    ck.step = step;
    ck.adam_updates = optimizer.updates();
    ck.has_position = has_position;
    ck.epoch = last.epoch;
    ck.index = last.index;
    ck.end_record = last.end_record;
    if (fp16) {
      ck.loss_scale = scaler.scale;
      ck.loss_scale_good_steps = scaler.good_steps;
    }
    ck.params = params;
    ck.first_moment = optimizer.first_moment();
    ck.second_moment = optimizer.second_moment();
    RETURN_IF_ERROR(SaveCheckpoint(o.checkpoint_dir, ck));
    saved_step = step;
    return Status::OK();
  };
  auto evaluate = [&](const char* when) -> Status {
    if (o.eval_dataset.empty()) return Status::OK();
    const Clock::time_point start = Clock::now();
    int64_t images = 0;
    EvalBackend eval{&backend, params};
#if SLUICE_HAVE_CUDA
    eval.gpu = gpu.get();
#endif
    ASSIGN_OR_RETURN(StepResult r, Evaluate(*client, o, eval, &images));
    if (images == 0)
      return FailedPrecondition("eval dataset " + o.eval_dataset + " gave no images");
    summary.eval_accuracy = static_cast<double>(r.correct) / images;
    log << fmt::format("eval {} step {}: accuracy {:.4f}, loss {:.4f} over {} images ({:.1f} s)\n",
                       when, step, summary.eval_accuracy, r.loss_sum / images, images,
                       Seconds(Clock::now() - start))
        << std::flush;
    return Status::OK();
  };

  ASSIGN_OR_RETURN(std::unique_ptr<BatchStream> stream, client->Stream(request));
  const int64_t end_step = o.stop_after > 0 ? std::min(o.steps, step + o.stop_after) : o.steps;
  Clock::duration train_time{}, wait_time{};
  int64_t train_images = 0;
  // The current log window.
  double window_loss = 0, window_steps = 0;
  int64_t window_correct = 0, window_images = 0;
  Clock::duration window_time{}, window_wait{};
  bool stream_ended = false;

  // The step's micro-batches (`current`; on the CPU, simply the step's batches). GPU pipeline:
  // `current` holds the micro-batches of the step on the device, `ahead` the next step's,
  // fetched, staged and enqueued (ahead_ticket >= 0) while the device runs the current one, so
  // their copies overlap its compute; unless the host must see this step's results first (an
  // evaluation or a checkpoint after it): then `ahead` stays empty. Taken batches: their leases
  // keep them intact until the step that staged them has been waited for.
  std::vector<ReceivedBatch> current, ahead;
  [[maybe_unused]] int ahead_ticket = -1;
#if SLUICE_HAVE_CUDA
  // Whatever the exit, the device finishes first, so no copy still reads a batch whose lease
  // goes (declared after the batches: destroyed before them).
  struct DrainOnExit {
    CudaBackend* gpu;
    ~DrainOnExit() {
      if (gpu != nullptr) gpu->Synchronize();
    }
  } drain{gpu.get()};
#endif
  auto fetch_step = [&](std::vector<ReceivedBatch>* batches,
                                         Clock::duration* wait) -> Status {
    batches->clear();
    for (int k = 0; k < o.accum && !stream_ended; ++k) {
      ReceivedBatch batch;
      bool end = false;
      const Clock::time_point wait_start = Clock::now();
      RETURN_IF_ERROR(stream->Take(&batch, &end).WithContext("training stream"));
      if (wait != nullptr) *wait += Clock::now() - wait_start;
      if (end) {
        stream_ended = true;
        break;
      }
      RETURN_IF_ERROR(CheckBatch(batch, config, o.dataset));
      batches->push_back(std::move(batch));
    }
    return Status::OK();
  };

#if SLUICE_HAVE_CUDA
  // Stages and enqueues one step's micro-batches as step number `at` (its learning rate).
  auto enqueue_step = [&](const std::vector<ReceivedBatch>& batches, int64_t at) -> Result<int> {
    int samples = 0;
    for (const ReceivedBatch& b : batches) samples += b.meta.n;
    int ticket = -1;
    for (size_t k = 0; k < batches.size(); ++k) {
      ASSIGN_OR_RETURN(const int slot, gpu->Stage(batches[k].images, batches[k].labels));
      ASSIGN_OR_RETURN(ticket, gpu->Enqueue(slot, k == 0, k + 1 == batches.size(),
                                            /*update=*/true, LearningRate(o, at), samples));
    }
    return ticket;
  };
#endif
  // Whether a checkpoint, or an evaluation, follows step `s` (counted from 1): the host then needs
  // the parameters as that step left them.
  auto checkpoint_after = [&](int64_t s) {
    return !o.checkpoint_dir.empty() && o.checkpoint_every > 0 && s % o.checkpoint_every == 0;
  };
  auto eval_after = [&](int64_t s) {
    return !o.eval_dataset.empty() && o.eval_every > 0 && s % o.eval_every == 0 && s < end_step;
  };
  [[maybe_unused]] auto pauses_after = [&](int64_t s) {
    return checkpoint_after(s) || eval_after(s);
  };

  const bool on_gpu = summary.device == "cuda";
  [[maybe_unused]] bool gpu_noted_graph = false, gpu_noted_epilogue = false;
  while (step < end_step && (!stream_ended || !ahead.empty())) {
    const Clock::time_point step_start = Clock::now();
    Clock::duration step_wait{};
    StepResult sum;
    int64_t samples = 0;
    double loss = 0, norm = 0;
#if SLUICE_HAVE_CUDA
    if (gpu != nullptr) {
      int ticket = ahead_ticket;
      ahead_ticket = -1;
      if (ticket >= 0) {
        current = std::move(ahead);
      } else {
        // The first step, or the one after a pause: nothing was fetched ahead and the device is
        // idle, so the host's wait for these batches is the device's wait for data.
        RETURN_IF_ERROR(fetch_step(&current, &step_wait));
        if (current.empty()) break;
        ASSIGN_OR_RETURN(ticket, enqueue_step(current, step));
      }
      ahead.clear();
      for (const ReceivedBatch& b : current) samples += b.meta.n;
      last = current.back().meta;
      has_position = true;
      // Overlap: the next step is fetched, copied and queued while the device runs this one,
      // unless a pause follows this step; its gap is then excluded from the device's idle time,
      // and the next step's fetch, after the pause, is timed on the host instead.
      if (step + 1 < end_step && !pauses_after(step + 1)) {
        RETURN_IF_ERROR(fetch_step(&ahead, nullptr));
        if (!ahead.empty()) {
          ASSIGN_OR_RETURN(ahead_ticket, enqueue_step(ahead, step + 1));
        }
      }
      ASSIGN_OR_RETURN(const CudaStepOutcome outcome, gpu->Wait(ticket));
      // Data wait on the GPU: the time the device sat idle before this step.
      step_wait += std::chrono::duration_cast<Clock::duration>(
          std::chrono::duration<double>(outcome.idle_seconds));
      sum = outcome.result;
      loss = sum.loss_sum / samples;
      norm = outcome.grad_norm;
      scaler = outcome.next_loss_scale;  // the step updated it on the device
      ++step;
      if (!gpu_noted_graph && !gpu->graph_error().empty()) {
        gpu_noted_graph = true;
        log << "cuda: CUDA Graph capture failed (" << gpu->graph_error()
            << "); that step ran eagerly, and the capture is tried again\n";
      }
      if (gpu_noted_graph && gpu->graphs_given_up() && !summary.graphs_given_up) {
        summary.graphs_given_up = true;
        log << "cuda: CUDA Graph capture failed " << CudaBackend::kMaxCaptureFailures
            << " times (last: " << gpu->graph_error() << "); every step now launches eagerly\n";
      }
      if (!gpu_noted_epilogue && gpu->epilogue_fallbacks() > 0) {
        gpu_noted_epilogue = true;
        log << "cuda: cuBLASLt had no fused bias/GELU epilogue for some GEMMs; running those "
               "epilogues as separate kernels\n";
      }
      if (outcome.skipped) {
        ++summary.skipped_updates;
        log << SkipMessage(step, loss, norm, fp16, outcome.loss_scale, scaler.scale);
      }
    }
#endif
    if (!on_gpu) {
      RETURN_IF_ERROR(fetch_step(&current, &step_wait));
      if (current.empty()) break;
      std::fill(grads.begin(), grads.end(), 0.0f);
      for (const ReceivedBatch& batch : current) {
        const StepResult r =
            backend.ForwardBackward(params, batch.images, batch.labels, grads, scaler.scale);
        sum.loss_sum += r.loss_sum;
        sum.correct += r.correct;
        samples += batch.meta.n;
      }
      last = current.back().meta;
      has_position = true;
      // Undo the loss scale with the averaging (the scale is a power of two: exact).
      const float inv = 1.0f / (static_cast<float>(samples) * scaler.scale);
      for (float& g : grads) g *= inv;
      loss = sum.loss_sum / samples;
      norm = GlobalNorm(grads);
      ++step;
      const float step_scale = scaler.scale;
      const bool finite_grad = std::isfinite(norm);
      if (fp16) UpdateLossScale(&scaler, finite_grad, o.loss_scale);
      if (std::isfinite(loss) && finite_grad) {
        optimizer.Update(params, grads, norm, LearningRate(o, step - 1));
      } else {
        ++summary.skipped_updates;
        log << SkipMessage(step, loss, norm, fp16, step_scale, scaler.scale);
      }
    }
    const Clock::duration step_time = Clock::now() - step_start;
    train_time += step_time;
    wait_time += step_wait;
    train_images += samples;
    if (summary.losses.empty()) summary.initial_loss = loss;
    summary.losses.push_back(loss);
    window_loss += loss;
    window_steps += 1;
    window_correct += sum.correct;
    window_images += samples;
    window_time += step_time;
    window_wait += step_wait;

    if (step % o.log_every == 0 || step == end_step || stream_ended) {
      summary.final_loss = window_loss / window_steps;
      summary.train_accuracy = static_cast<double>(window_correct) / window_images;
      log << fmt::format(
                 "step {:>6}  loss {:.4f}  acc {:.3f}  img/s {:.1f}  data-wait {:.1f}%  step "
                 "{:.1f} ms{}\n",
                 step, summary.final_loss, summary.train_accuracy,
                 window_images / Seconds(window_time),
                 100.0 * Seconds(window_wait) / Seconds(window_time),
                 1000.0 * Seconds(window_time) / window_steps,
                 fp16 ? fmt::format("  loss-scale {:g}", scaler.scale) : std::string())
          << std::flush;
      window_loss = window_steps = 0;
      window_correct = window_images = 0;
      window_time = window_wait = {};
    }
    if (checkpoint_after(step)) RETURN_IF_ERROR(save());
    if (eval_after(step)) RETURN_IF_ERROR(evaluate("at"));
#if SLUICE_HAVE_CUDA
    if (gpu != nullptr && pauses_after(step)) gpu->ExcludeGapFromDataWait();
#endif
  }
  if (stream_ended) log << "the training stream ended at step " << step << "\n";
  RETURN_IF_ERROR(save());
  RETURN_IF_ERROR(evaluate("final, at"));
  if (summary.losses.empty()) {
    summary.initial_loss = summary.final_loss = std::numeric_limits<double>::quiet_NaN();
    summary.train_accuracy = std::numeric_limits<double>::quiet_NaN();
  }
  summary.steps = step;
  if (fp16) summary.loss_scale = scaler.scale;
#if SLUICE_HAVE_CUDA
  if (gpu != nullptr) {
    summary.h2d_bytes_per_sec = gpu->h2d_bytes_per_sec();
    summary.cuda_graph_launches = gpu->graph_launches();
    summary.cuda_eager_launches = gpu->eager_launches();
    summary.staged_in_place = gpu->staged_in_place();
    summary.staged_via_copy = gpu->staged_via_copy();
    summary.shared_memory_batches = stream->shared_memory_batches();
  }
#endif
  summary.images_per_sec = train_images / std::max(1e-9, Seconds(train_time));
  summary.data_wait_fraction = Seconds(wait_time) / std::max(1e-9, Seconds(train_time));
  return summary;
}

}  // namespace sluice::trainer
