#include "trainer/backend_factory.h"

#include <fmt/format.h>

#include "trainer/cpu_training_backend.h"
#if SLUICE_HAVE_CUDA
#include "trainer/cuda_training_backend.h"
#include "trainer/cuda_util.h"
#endif

namespace sluice::trainer {

Result<Device> ResolveDevice(Device device, std::string* note) {
  if (device == Device::kCpu) {
    *note = "as asked";
    return Device::kCpu;
  }
#if SLUICE_HAVE_CUDA
  std::string reason;
  const int devices = CudaDeviceCount(&reason);
  if (devices > 0) {
    *note = fmt::format("{}: {} CUDA device{}, using device 0", DeviceName(device), devices,
                        devices == 1 ? "" : "s");
    return Device::kCuda;
  }
  if (device == Device::kCuda) {
    return FailedPrecondition("--device cuda: no usable CUDA device (" + reason +
                              "); use --device cpu or auto");
  }
  *note = "auto: no usable CUDA device: " + reason;
  return Device::kCpu;
#else
  if (device == Device::kCuda) {
    return Unimplemented(
        "--device cuda: this build has no CUDA backend (built without nvcc); use --device cpu or "
        "auto");
  }
  *note = "auto: this build has no CUDA backend (built without nvcc)";
  return Device::kCpu;
#endif
}

std::shared_ptr<BufferAllocator> BatchAllocatorFor([[maybe_unused]] Device device) {
#if SLUICE_HAVE_CUDA
  if (device == Device::kCuda) return std::make_shared<PinnedAllocator>();
#endif
  return nullptr;
}

Result<std::unique_ptr<Backend>> CreateBackend(const ModelConfig& config,
                                               const BackendOptions& options,
                                               const TrainState& state) {
#if SLUICE_HAVE_CUDA
  if (options.device == Device::kCuda) {
    CudaBackendOptions gpu;
    gpu.max_batch = options.max_batch;
    gpu.adamw = options.adamw;
    gpu.precision = options.precision;
    gpu.loss_scale = options.loss_scale;
    const size_t batch_bytes =
        size_t(options.max_batch) * config.image_size * config.image_size * 3;
    ASSIGN_OR_RETURN(std::unique_ptr<CudaTrainingBackend> backend,
                     CudaTrainingBackend::Create(config, gpu, state, batch_bytes));
    return std::unique_ptr<Backend>(std::move(backend));
  }
#endif
  return std::unique_ptr<Backend>(std::make_unique<CpuTrainingBackend>(
      config, options.precision, options.adamw, options.loss_scale, state));
}

}  // namespace sluice::trainer
