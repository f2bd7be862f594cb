// The training run of `sluice-trainer`: batches from `sluice serve` through the C++ client, the
// model on a Backend (trainer/backend.h: the CPU's, or CUDA's when built with nvcc and a device is
// usable) stepped by trainer/step_loop.h, evaluation on an eval stream (trainer/evaluation.h),
// checkpoints and exact resume (trainer/checkpointing.h), the progress log (trainer/step_log.h).
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "formats/status.h"
#include "trainer/adamw.h"
#include "trainer/backend_factory.h"
#include "trainer/device.h"
#include "trainer/loss_scale.h"
#include "trainer/precision.h"
#include "trainer/train_summary.h"

namespace sluice::trainer {

struct TrainerOptions {
  std::vector<std::string> targets;  // the client's targets ("HOST:PORT", "dns:///…", "unix:…")
  std::string token;
  bool allow_partial_fleet = false;  // ClientOptions::allow_partial_fleet
  std::string dataset = "train";
  std::string eval_dataset;  // empty: no evaluation
  int64_t steps = 100;       // optimizer steps in all (a resumed run continues up to it)
  int batch_size = 32;       // per micro-batch
  int accum = 1;             // micro-batches per step
  int image_size = 32;
  Device device = Device::kAuto;
  std::optional<Precision> precision;  // nullopt (auto): fp32 on the CPU, bf16 on CUDA
  LossScaleOptions loss_scale;         // fp16 only
  int width = 64, depth = 2, patch = 8;
  int num_classes = 0;        // 0: from ListDatasets
  float lr = 1e-3f;           // peak learning rate
  int64_t warmup_steps = -1;  // linear warm-up; -1: min(100, steps / 10)
  AdamWOptions adamw;
  uint64_t seed = 0;             // model init and the training stream's shuffle/augmentation
  std::string checkpoint_dir;    // empty: no checkpoints
  bool resume = false;           // continue from checkpoint_dir when it holds a checkpoint
  int64_t checkpoint_every = 0;  // also checkpoint every this many steps (0: only at the end)
  int64_t log_every = 10;
  int64_t eval_every = 0;  // 0: evaluate at the end only
  // Stop after this many steps of THIS run (0: run to `steps`), checkpointing as at the end; the
  // learning-rate schedule still spans `steps`. For preemption drills and the resume test.
  int64_t stop_after = 0;
};

// ResolveDevice: trainer/backend_factory.h; ResolvePrecision: trainer/device.h.

// Runs the training described by `options`, writing the progress lines to `log`. The first line
// names the device. Errors: the client's (connection, bad request), InvalidArgument for bad
// options or a batch that does not fit the model, FailedPrecondition for a checkpoint of another
// model.
Result<TrainSummary> Train(const TrainerOptions& options, std::ostream& log);

}  // namespace sluice::trainer
