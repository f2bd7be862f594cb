#include "trainer/trainer.h"

#include <fmt/format.h>
#include <oneapi/tbb/info.h>

#include <algorithm>
#include <chrono>
#include <memory>

#include "client/client.h"
#include "trainer/checkpointing.h"
#include "trainer/evaluation.h"
#include "trainer/step_log.h"
#include "trainer/step_loop.h"

namespace sluice::trainer {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

Status CheckOptions(const TrainerOptions& o) {
  if (o.steps < 1) return InvalidArgument("--steps must be at least 1");
  if (o.batch_size < 1) return InvalidArgument("--batch-size must be at least 1");
  if (o.accum < 1) return InvalidArgument("--accum must be at least 1");
  if (!(o.lr > 0)) return InvalidArgument("--lr must be positive");
  if (o.resume && o.checkpoint_dir.empty())
    return InvalidArgument("--resume needs --checkpoint DIR");
  return Status::OK();
}

// The dataset `name` (given as `flag`) in the server's list; NotFound listing the server's
// datasets otherwise.
Result<v1::DatasetInfo> FindDataset(const std::vector<v1::DatasetInfo>& datasets,
                                    const std::string& name, const char* flag) {
  std::string names;
  for (const v1::DatasetInfo& info : datasets) {
    if (info.name() == name) return info;
    names += (names.empty() ? "" : ", ") + info.name();
  }
  return NotFound(fmt::format("{}: no dataset '{}'; the server has: {}", flag, name,
                              names.empty() ? "none" : names));
}

// The model the options ask for; its number of classes from ListDatasets unless given. Both
// datasets are looked up first, so that a mistyped name fails before any step (and not, for the
// eval dataset, after the whole run). A server that is not up yet is waited for as the stream
// would wait for it (reconnect_deadline).
Result<ModelConfig> ModelFor(const TrainerOptions& o, Client& client) {
  ASSIGN_OR_RETURN(std::vector<v1::DatasetInfo> datasets, client.ListDatasetsWhenReady());
  ASSIGN_OR_RETURN(const v1::DatasetInfo info, FindDataset(datasets, o.dataset, "--dataset"));
  // A classifier trains and evaluates on labels: an unlabeled dataset's batches carry none.
  if (info.unlabeled()) {
    return FailedPrecondition("--dataset " + o.dataset +
                              ": the dataset is unlabeled (its batches carry no labels); the "
                              "trainer needs a labeled dataset");
  }
  if (!o.eval_dataset.empty()) {
    ASSIGN_OR_RETURN(const v1::DatasetInfo eval,
                     FindDataset(datasets, o.eval_dataset, "--eval-dataset"));
    if (eval.unlabeled()) {
      return FailedPrecondition("--eval-dataset " + o.eval_dataset +
                                ": the dataset is unlabeled (its batches carry no labels); the "
                                "trainer needs a labeled dataset");
    }
  }
  ModelConfig config;
  config.image_size = o.image_size;
  config.patch = o.patch;
  config.width = o.width;
  config.depth = o.depth;
  config.classes = o.num_classes != 0 ? o.num_classes : info.num_classes();
  if (config.classes == 0) {
    return InvalidArgument("dataset " + o.dataset +
                           ": the server does not give num_classes; pass --num-classes");
  }
  RETURN_IF_ERROR(config.Validate());
  RETURN_IF_ERROR(config.ValidateBatch(o.batch_size));
  return config;
}

// A fresh run's state: weights initialized from the seed, zero moments, the initial loss scale.
TrainState InitialState(const ModelConfig& config, const TrainerOptions& o, bool fp16) {
  const ParameterLayout layout(config);
  TrainState state;
  state.params = InitParameters(config, layout, o.seed);
  state.first_moment.assign(layout.total(), 0.0f);
  state.second_moment.assign(layout.total(), 0.0f);
  if (fp16) state.loss_scale.scale = o.loss_scale.initial;
  return state;
}

v1::StreamRequest BaseRequest(const TrainerOptions& o, const std::string& dataset) {
  v1::StreamRequest r;
  r.set_dataset(dataset);
  r.set_batch_size(o.batch_size);
  r.set_image_height(o.image_size);
  r.set_image_width(o.image_size);
  return r;
}

// Evaluates on o.eval_dataset (nothing without one), logs the result and sets *accuracy.
Status EvaluateAndLog(Client& client, const TrainerOptions& o, const ModelConfig& config,
                      Backend& backend, const char* when, int64_t step, std::ostream& log,
                      double* accuracy) {
  if (o.eval_dataset.empty()) return Status::OK();
  const Clock::time_point start = Clock::now();
  v1::StreamRequest request = BaseRequest(o, o.eval_dataset);
  request.set_mode(v1::MODE_EVAL);
  request.set_epochs(1);
  ASSIGN_OR_RETURN(const EvalResult r, Evaluate(client, request, config, backend));
  if (r.images == 0)
    return FailedPrecondition("eval dataset " + o.eval_dataset + " gave no images");
  *accuracy = static_cast<double>(r.correct) / r.images;
  log << fmt::format("eval {} step {}: accuracy {:.4f}, loss {:.4f} over {} images ({:.1f} s)\n",
                     when, step, *accuracy, r.loss_sum / r.images, r.images,
                     Seconds(Clock::now() - start))
      << std::flush;
  return Status::OK();
}

void LogStart(const TrainerOptions& o, const TrainSummary& summary, const ModelConfig& config,
              const std::string& device_note, const std::string& precision_note,
              std::ostream& log) {
  log << fmt::format(
             "sluice-trainer: device {} ({}), {}, {} threads; model S={} P={} D={} L={} "
             "hidden={} "
             "classes={} ({} parameters); batch {}, accum {}, {} steps, lr {}\n",
             DeviceName(summary.device), device_note, precision_note,
             tbb::info::default_concurrency(), config.image_size, config.patch, config.width,
             config.depth, config.hidden(), config.classes, ParameterLayout(config).parameters(),
             o.batch_size, o.accum, o.steps, o.lr)
      << std::flush;
}

}  // namespace

Result<TrainSummary> Train(const TrainerOptions& o, std::ostream& log) {
  TrainSummary summary;
  std::string device_note, precision_note;
  ASSIGN_OR_RETURN(summary.device, ResolveDevice(o.device, &device_note));
  summary.precision = ResolvePrecision(summary.device, o.precision, &precision_note);
  const bool fp16 = summary.precision == Precision::kFp16;
  RETURN_IF_ERROR(CheckOptions(o));

  ClientOptions client_options;
  client_options.targets = o.targets;
  client_options.token = o.token;
  client_options.allow_partial_fleet = o.allow_partial_fleet;
  // GPU: the step in flight holds its micro-batches and the next step's are fetched meanwhile.
  client_options.max_held = 2 * o.accum;
  client_options.allocator = BatchAllocatorFor(summary.device);
  ASSIGN_OR_RETURN(std::unique_ptr<Client> client, Client::Create(client_options));
  ASSIGN_OR_RETURN(const ModelConfig config, ModelFor(o, *client));

  TrainState state = InitialState(config, o, fp16);
  v1::StreamRequest request = BaseRequest(o, o.dataset);
  request.set_seed(o.seed);
  request.set_epochs(0);
  RunPosition position;
  if (o.resume) {
    RETURN_IF_ERROR(ResumeFrom(o.checkpoint_dir, config, fp16, o.loss_scale.max_scale, &state,
                               &position, log));
    StartAfter(position, &request);
  }
  const BackendOptions backend_options{summary.device, summary.precision, o.batch_size, o.adamw,
                                       o.loss_scale};
  ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, CreateBackend(config, backend_options, state));
  state = TrainState();
  LogStart(o, summary, config, device_note, precision_note, log);

  ASSIGN_OR_RETURN(std::unique_ptr<BatchStream> stream, client->Stream(request));
  const int64_t end_step =
      o.stop_after > 0 ? std::min(o.steps, position.step + o.stop_after) : o.steps;
  const PauseSchedule schedule(o, end_step);
  Checkpointer checkpointer(o.checkpoint_dir, config, fp16);
  StepLog step_log(log, o.log_every, fp16);
  StepLoop loop(o, config, end_step, schedule, *backend, *stream, step_log, &position, log);
  for (;;) {
    ASSIGN_OR_RETURN(const bool stepped, loop.RunStep());
    if (!stepped) break;
    const int64_t step = position.step;
    if (schedule.checkpoint_after(step)) RETURN_IF_ERROR(checkpointer.Save(*backend, position));
    if (schedule.eval_after(step)) {
      RETURN_IF_ERROR(
          EvaluateAndLog(*client, o, config, *backend, "at", step, log, &summary.eval_accuracy));
    }
    if (schedule.pauses_after(step)) backend->ExcludeGapFromDataWait();
  }
  if (loop.stream_ended()) log << "the training stream ended at step " << position.step << "\n";
  RETURN_IF_ERROR(checkpointer.Save(*backend, position));
  RETURN_IF_ERROR(EvaluateAndLog(*client, o, config, *backend, "final, at", position.step, log,
                                 &summary.eval_accuracy));

  step_log.Finish(&summary);
  summary.steps = position.step;
  if (fp16) summary.loss_scale = backend->loss_scale().scale;
  const BackendCounters c = backend->counters();
  summary.h2d_bytes_per_sec = c.h2d_bytes_per_sec;
  summary.h2d_plain_bytes_per_sec = c.h2d_plain_bytes_per_sec;
  summary.cuda_graph_launches = c.graph_launches;
  summary.cuda_eager_launches = c.eager_launches;
  summary.graphs_given_up = c.graphs_given_up;
  summary.staged_in_place = c.staged_in_place;
  summary.staged_via_copy = c.staged_via_copy;
  if (summary.device == Device::kCuda)
    summary.shared_memory_batches = stream->shared_memory_batches();
  return summary;
}

}  // namespace sluice::trainer
