// The devices this build and machine can train on, and the Backend (trainer/backend.h) for each.
// The one place that knows whether the build has the CUDA backend (SLUICE_HAVE_CUDA): compiled
// into sluice_trainer, and into trainer_emulated_cuda_backend_test against an emulated device.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "client/wire/buffer_allocator.h"
#include "formats/status.h"
#include "trainer/adamw.h"
#include "trainer/backend.h"
#include "trainer/device.h"
#include "trainer/loss_scale.h"
#include "trainer/model.h"
#include "trainer/precision.h"

namespace sluice::trainer {

// kCpu → kCpu; kAuto → kCuda when this build has the CUDA backend and CudaDeviceCount() > 0,
// else kCpu; kCuda → kCuda, FailedPrecondition without a usable device, Unimplemented in a build
// without nvcc. *note says why kAuto chose what it did.
Result<Device> ResolveDevice(Device device, std::string* note);

// Where the client should put batches for `device` (a resolved one): page-locked memory on
// CUDA, so that they go to the device with no staging copy; null (the default) otherwise.
std::shared_ptr<BufferAllocator> BatchAllocatorFor(Device device);

struct BackendOptions {
  Device device = Device::kCpu;  // resolved
  Precision precision = Precision::kFp32;
  int max_batch = 32;  // the largest micro-batch Stage accepts
  AdamWOptions adamw;
  LossScaleOptions loss_scale;  // fp16 only
};

// The backend for options.device, starting from `state` (weights, moments, loss scale).
// REQUIRES: state's vectors hold ParameterLayout(config).total() values each. Errors: the CUDA
// backend's (no usable device, out of memory).
Result<std::unique_ptr<Backend>> CreateBackend(const ModelConfig& config,
                                               const BackendOptions& options,
                                               const TrainState& state);

}  // namespace sluice::trainer
