// The training loop of `sluice-trainer`: batches from `sluice serve` through the C++ client, the
// model on a backend (trainer/cpu_backend.h, or trainer/cuda_backend.h when built with CUDA and a
// device is usable), AdamW, evaluation on an eval stream, checkpoints and exact resume.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "formats/status.h"
#include "trainer/adamw.h"
#include "trainer/loss_scale.h"
#include "trainer/model.h"
#include "trainer/precision.h"

namespace sluice::trainer {

struct TrainerOptions {
  std::vector<std::string> targets;  // the client's targets ("HOST:PORT", "dns:///…", "unix:…")
  std::string token;
  std::string dataset = "train";
  std::string eval_dataset;  // empty: no evaluation
  int64_t steps = 100;       // optimizer steps in all (a resumed run continues up to it)
  int batch_size = 32;       // per micro-batch
  int accum = 1;             // micro-batches per step
  int image_size = 32;
  std::string device = "auto";     // auto | cpu | cuda
  std::string precision = "auto";  // auto: fp32 on the CPU, bf16 on CUDA; or fp32, bf16, fp16
  LossScaleOptions loss_scale;     // fp16 only
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

struct TrainSummary {
  int64_t steps = 0;              // the step reached (resumed runs count from the checkpoint's)
  double initial_loss = 0;        // this run's first step
  double final_loss = 0;          // mean over the last log window
  double train_accuracy = 0;      // mean over the last log window
  double eval_accuracy = -1;      // -1: no eval dataset
  double images_per_sec = 0;      // training images / training wall time (evaluation excluded)
  // Training wall time spent waiting for data: on the CPU, blocked in Next(); on CUDA, the device
  // idle before each step (measured by events), except for the first step and each step after an
  // evaluation or a checkpoint, whose batches are fetched only then: for those, the host's wait.
  double data_wait_fraction = 0;
  int64_t skipped_updates = 0;    // steps whose loss or gradient was not finite
  std::string device;
  std::string precision;
  double loss_scale = 0;          // fp16: the dynamic loss scale at the end; 0 otherwise
  // CUDA: host→device bytes per second of the batches' copies (copy stream, event-timed), and of
  // a plain pinned cudaMemcpyAsync loop of the same size measured at start-up; 0 on the CPU.
  double h2d_bytes_per_sec = 0, h2d_plain_bytes_per_sec = 0;
  // CUDA: micro-batches replayed from a CUDA Graph and launched eagerly; whether capture was given
  // up; batches (training and evaluation) copied to the device straight from page-locked memory
  // (the client's pinned buffers or its registered shared-memory segment) or through the staging
  // buffer; training batches the stream delivered through shared memory.
  int64_t cuda_graph_launches = 0, cuda_eager_launches = 0;
  bool graphs_given_up = false;
  int64_t staged_in_place = 0, staged_via_copy = 0, shared_memory_batches = 0;
  std::vector<double> losses;  // per step of this run (mean per sample)

  // {"steps","initial_loss","final_loss","train_accuracy","eval_accuracy","images_per_sec",
  //  "data_wait_fraction","device","skipped_updates","precision"}, plus "loss_scale" with fp16 and
  //  "h2d_gb_per_sec", "h2d_plain_gb_per_sec" and "cuda": {"graph_launches", "eager_launches",
  //  "graphs_given_up", "staged_in_place", "staged_via_copy", "shared_memory_batches"} on CUDA;
  //  NaN and absent values are null.
  std::string ToJson() const;
};

// "cpu" → "cpu"; "auto" → "cuda" when this build has the CUDA backend and CudaDeviceCount() > 0,
// else "cpu"; "cuda" → "cuda", FailedPrecondition without a usable device, Unimplemented in a
// build without nvcc. *note says why "auto" chose what it did.
Result<std::string> ResolveDevice(const std::string& device, std::string* note);
// The precision a resolved device trains in: "auto" → fp32 on "cpu", bf16 on "cuda"; "fp32",
// "bf16", "fp16" as named (on the CPU the narrow ones are emulated, trainer/cpu_backend.h).
// InvalidArgument for any other name. *note (optional) says what the choice means.
Result<Precision> ResolvePrecision(const std::string& device, const std::string& precision,
                                   std::string* note = nullptr);

// Runs the training described by `options`, writing the progress lines to `log`. The first line
// names the device. Errors: the client's (connection, bad request), InvalidArgument for bad
// options or a batch that does not fit the model, FailedPrecondition for a checkpoint of another
// model.
Result<TrainSummary> Train(const TrainerOptions& options, std::ostream& log);

}  // namespace sluice::trainer
