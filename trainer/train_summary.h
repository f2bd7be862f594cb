// What a training run reports at its end (`sluice-trainer` prints it as one JSON line).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainer/device.h"
#include "trainer/precision.h"

namespace sluice::trainer {

struct TrainSummary {
  int64_t steps = 0;          // the step reached (resumed runs count from the checkpoint's)
  double initial_loss = 0;    // this run's first step
  double final_loss = 0;      // mean over the last log window
  double train_accuracy = 0;  // mean over the last log window
  double eval_accuracy = -1;  // -1: no eval dataset
  double images_per_sec = 0;  // training images / training wall time (evaluation excluded)
  // Training wall time spent waiting for data: on the CPU, blocked in Next(); on CUDA, the device
  // idle before each step (measured by events), except for the first step and each step after an
  // evaluation or a checkpoint, whose batches are fetched only then: for those, the host's wait.
  double data_wait_fraction = 0;
  int64_t skipped_updates = 0;   // steps whose loss or gradient was not finite
  Device device = Device::kCpu;  // resolved: kCpu or kCuda
  Precision precision = Precision::kFp32;
  double loss_scale = 0;  // fp16: the dynamic loss scale at the end; 0 otherwise
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
  //  NaN and absent values are null. Device and precision by their names (trainer/device.h).
  std::string ToJson() const;
};

}  // namespace sluice::trainer
