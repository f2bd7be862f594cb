// The seam between the training loop (trainer/step_loop.h) and the device that runs the model:
// one optimizer step is staged, then stepped; evaluation runs the forward pass alone; the
// weights, AdamW's state and the loss scale go in and out for checkpoints. Implemented by
// trainer/cpu_training_backend.h and, in builds with nvcc, trainer/cuda_training_backend.h.
//
// Thread-safety: one Backend per training loop; its calls must not overlap.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "formats/status.h"
#include "trainer/loss_scale.h"

namespace sluice::trainer {

// One micro-batch as a backend reads it: labels.size() × S × S × 3 uint8 images (NHWC).
struct MicroBatch {
  std::span<const uint8_t> images;
  std::span<const int32_t> labels;
};

struct StepResult {
  double loss_sum = 0;  // Σ over the batch of per-sample cross-entropy (nats)
  int64_t correct = 0;  // samples whose argmax logit is the label
};

struct StepOutcome {
  StepResult result;        // summed over the step's micro-batches
  double grad_norm = 0;     // of the averaged gradient, before clipping (update steps only)
  bool skipped = false;     // loss or gradient not finite: the update was not applied
  double idle_seconds = 0;  // device idle between the previous step's end and this one's start
  float loss_scale = 1;     // the loss scale the step ran with (1 unless fp16)
  LossScaleState next_loss_scale;  // after the step's update of it
};

// What a checkpoint keeps of a backend. Vectors: one value per parameter (fp32).
struct TrainState {
  std::vector<float> params, first_moment, second_moment;  // weights; AdamW's moments
  int64_t adam_updates = 0;  // updates applied (skipped steps do not count)
  LossScaleState loss_scale;
};

// Counters only the CUDA backend keeps (TrainSummary's CUDA fields); zero elsewhere.
struct BackendCounters {
  double h2d_bytes_per_sec = 0, h2d_plain_bytes_per_sec = 0;
  int64_t graph_launches = 0, eager_launches = 0;
  bool graphs_given_up = false;
  int64_t staged_in_place = 0, staged_via_copy = 0;
};

class Backend {
 public:
  Backend() = default;
  virtual ~Backend() = default;
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  // Stages one optimizer step over `batches` (its micro-batches, gradients accumulated) with
  // learning rate `lr`, and returns the ticket that Step completes. The batches' memory must stay
  // unchanged until Step(ticket) has returned (and, on error, until Drain()).
  // REQUIRES: !batches.empty(); every label in [0, classes); with overlaps_steps(), at most one
  // other step staged and not yet stepped, else none.
  virtual Result<int> Stage(std::span<const MicroBatch> batches, float lr) = 0;
  // Completes the step of `ticket`: its losses, gradient norm and whether it was skipped.
  // REQUIRES: tickets are stepped in the order Stage returned them.
  virtual Result<StepOutcome> Step(int ticket) = 0;
  // true: the next step may be staged before this one is stepped, so its copies overlap this
  // step's compute; false: Stage only records the batches and Step does all the work.
  virtual bool overlaps_steps() const = 0;

  // The forward pass alone over one micro-batch, with the current weights.
  // REQUIRES: no step staged and not yet stepped.
  virtual Result<StepResult> Evaluate(const MicroBatch& batch) = 0;

  // REQUIRES for both: no step staged and not yet stepped.
  virtual Status GetState(TrainState* state) = 0;
  virtual Status SetState(const TrainState& state) = 0;

  // The dynamic loss scale (fp16; 1 otherwise) as the last step left it, or as SetState set it.
  virtual LossScaleState loss_scale() const = 0;

  // The gap before the next step (an evaluation, a checkpoint) is not waiting for data.
  virtual void ExcludeGapFromDataWait() {}
  // Waits until no staged batch is read any more (error paths that drop batches).
  virtual void Drain() {}
  // Log lines about what the backend had to change since the last call (e.g. a failed CUDA
  // Graph capture), each ending in '\n'; empty when there is nothing new.
  virtual std::string TakeNotes() { return {}; }
  virtual BackendCounters counters() const { return {}; }
};

}  // namespace sluice::trainer
