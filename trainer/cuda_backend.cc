#include "trainer/cuda_backend.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>

namespace sluice::trainer {

CudaBackend::CudaBackend(const ModelConfig& config, const CudaBackendOptions& options)
    : config_(config),
      layout_(config),
      options_(options),
      hyper_{options.adamw.beta1, options.adamw.beta2, options.adamw.epsilon,
             options.adamw.weight_decay, options.adamw.clip_norm} {}

CudaBackend::~CudaBackend() {
  // Nothing may still read or write the buffers the members' destructors free.
  Synchronize();
}

void CudaBackend::Synchronize() {
  if (compute_.get() != nullptr) cudaStreamSynchronize(compute_.get());
  if (copy_.get() != nullptr) cudaStreamSynchronize(copy_.get());
}

Result<std::unique_ptr<CudaBackend>> CudaBackend::Create(const ModelConfig& config,
                                                         const CudaBackendOptions& options) {
  RETURN_IF_ERROR(config.Validate());
  RETURN_IF_ERROR(config.ValidateBatch(options.max_batch));
  std::string reason;
  const int devices = CudaDeviceCount(&reason);
  if (options.device < 0 || options.device >= devices) {
    return FailedPrecondition(fmt::format("CUDA device {} is not usable ({} devices{}{})",
                                          options.device, devices, reason.empty() ? "" : ": ",
                                          reason));
  }
  std::unique_ptr<CudaBackend> backend(new CudaBackend(config, options));
  RETURN_IF_ERROR(backend->Initialize());
  return backend;
}

Result<void*> CudaBackend::AllocBytes(size_t element_size, int64_t count) {
  ASSIGN_OR_RETURN(DeviceBuffer buffer,
                   DeviceBuffer::Allocate(element_size * std::max<int64_t>(1, count)));
  void* p = buffer.data();
  buffers_.push_back(std::move(buffer));
  return p;
}

template <typename T>
Result<T*> CudaBackend::Alloc(int64_t count) {
  ASSIGN_OR_RETURN(void* p, AllocBytes(sizeof(T), count));
  return static_cast<T*>(p);
}

Result<void*> CudaBackend::AllocNarrow(int64_t count) {
  return AllocBytes(ElementSize(options_.precision), count);
}

Status CudaBackend::Initialize() {
  CUDA_CHECK(cudaSetDevice(options_.device));
  ASSIGN_OR_RETURN(compute_, CudaStream::Create());
  ASSIGN_OR_RETURN(copy_, CudaStream::Create());
  ASSIGN_OR_RETURN(gemm_, CublasLtGemm::Create());

  const int nb = options_.max_batch;
  const int64_t total = layout_.total();
  const int64_t image_bytes = int64_t{nb} * config_.image_size * config_.image_size * 3;
  for (int s = 0; s < kSlots; ++s) {
    ASSIGN_OR_RETURN(pinned_images_[s], PinnedBuffer::Allocate(image_bytes));
    ASSIGN_OR_RETURN(pinned_labels_[s], PinnedBuffer::Allocate(sizeof(int32_t) * nb));
    ASSIGN_OR_RETURN(images_[s], Alloc<uint8_t>(image_bytes));
    ASSIGN_OR_RETURN(labels_[s], Alloc<int32_t>(nb));
    ASSIGN_OR_RETURN(copy_begin_[s], CudaEvent::Create(/*timing=*/true));
    ASSIGN_OR_RETURN(copied_[s], CudaEvent::Create(/*timing=*/true));
    ASSIGN_OR_RETURN(consumed_[s], CudaEvent::Create());
    ASSIGN_OR_RETURN(pinned_inputs_[s], PinnedBuffer::Allocate(sizeof(cuda::StepInputs)));
    ASSIGN_OR_RETURN(pinned_results_[s], PinnedBuffer::Allocate(sizeof(cuda::StepScalars)));
    ASSIGN_OR_RETURN(begin_[s], CudaEvent::Create(/*timing=*/true));
  }
  for (CudaEvent& end : ends_) {
    ASSIGN_OR_RETURN(end, CudaEvent::Create(/*timing=*/true));
  }
  ASSIGN_OR_RETURN(pinned_eval_, PinnedBuffer::Allocate(sizeof(cuda::StepScalars)));

  ASSIGN_OR_RETURN(params_, Alloc<float>(total));
  ASSIGN_OR_RETURN(params_narrow_, AllocNarrow(total));
  ASSIGN_OR_RETURN(grads_, Alloc<float>(total));
  ASSIGN_OR_RETURN(m_, Alloc<float>(total));
  ASSIGN_OR_RETURN(v_, Alloc<float>(total));
  ASSIGN_OR_RETURN(norm_partials_, Alloc<double>(cuda::GradNormBlocks()));
  // The largest reductions: the hidden layer's bias over n·T rows, the head's bias over n rows.
  ASSIGN_OR_RETURN(reduction_scratch_,
                   Alloc<float>(std::max(cuda::ColumnReductionScratch(
                                             int64_t{nb} * config_.tokens(), config_.hidden()),
                                         cuda::ColumnReductionScratch(nb, config_.classes))));
  ASSIGN_OR_RETURN(scalars_, Alloc<cuda::StepScalars>(1));
  ASSIGN_OR_RETURN(eval_scalars_, Alloc<cuda::StepScalars>(1));
  ASSIGN_OR_RETURN(inputs_, Alloc<cuda::StepInputs>(1));
  CUDA_CHECK(cudaMemsetAsync(scalars_, 0, sizeof(cuda::StepScalars), compute_.get()));
  RETURN_IF_ERROR(SetLossScale(InitialLossScale()));

  const std::vector<cuda::AdamChunk> chunks = cuda::AdamChunks(layout_);
  num_chunks_ = static_cast<int>(chunks.size());
  ASSIGN_OR_RETURN(chunks_, Alloc<cuda::AdamChunk>(num_chunks_));
  CUDA_CHECK(cudaMemcpyAsync(chunks_, chunks.data(), sizeof(cuda::AdamChunk) * chunks.size(),
                             cudaMemcpyHostToDevice, compute_.get()));
  CUDA_CHECK(cudaStreamSynchronize(compute_.get()));
  return AllocateActivations();
}

Status CudaBackend::AllocateActivations() {
  const int nb = options_.max_batch, t = config_.tokens(), d = config_.width;
  const int f = config_.hidden(), c = config_.classes, pd = config_.patch_dim();
  const int64_t rows = int64_t{nb} * t;
  ASSIGN_OR_RETURN(x0_, AllocNarrow(rows * pd));
  for (int l = 0; l <= config_.depth; ++l) {
    ASSIGN_OR_RETURN(float* h, Alloc<float>(rows * d));
    h_.push_back(h);
  }
  for (int l = 0; l < config_.depth; ++l) {
    ASSIGN_OR_RETURN(void* ln, AllocNarrow(rows * d));
    ASSIGN_OR_RETURN(float* mean, Alloc<float>(rows));
    ASSIGN_OR_RETURN(float* rstd, Alloc<float>(rows));
    ASSIGN_OR_RETURN(void* pre, AllocNarrow(rows * f));
    ASSIGN_OR_RETURN(void* act, AllocNarrow(rows * f));
    ln_.push_back(ln);
    ln_mean_.push_back(mean);
    ln_rstd_.push_back(rstd);
    pre_.push_back(pre);
    act_.push_back(act);
  }
  ASSIGN_OR_RETURN(pooled_, Alloc<float>(int64_t{nb} * d));
  ASSIGN_OR_RETURN(pooled_mean_, Alloc<float>(nb));
  ASSIGN_OR_RETURN(pooled_rstd_, Alloc<float>(nb));
  ASSIGN_OR_RETURN(features_, AllocNarrow(int64_t{nb} * d));
  ASSIGN_OR_RETURN(logits_, Alloc<float>(int64_t{nb} * c));
  ASSIGN_OR_RETURN(dlogits_, AllocNarrow(int64_t{nb} * c));
  ASSIGN_OR_RETURN(row_loss_, Alloc<float>(nb));
  ASSIGN_OR_RETURN(row_correct_, Alloc<int>(nb));
  ASSIGN_OR_RETURN(dfeatures_, Alloc<float>(int64_t{nb} * d));
  ASSIGN_OR_RETURN(dpooled_, Alloc<float>(int64_t{nb} * d));
  ASSIGN_OR_RETURN(dh_, Alloc<float>(rows * d));
  ASSIGN_OR_RETURN(dh_narrow_, AllocNarrow(rows * d));
  ASSIGN_OR_RETURN(dln_, Alloc<float>(rows * d));
  ASSIGN_OR_RETURN(dact_, AllocNarrow(rows * f));
  return Status::OK();
}

// Every transfer below is ordered on the compute stream and waited for: a plain cudaMemcpy or
// cudaMemset runs on the legacy stream, which a non-blocking stream does not wait for.
Status CudaBackend::SetParameters(std::span<const float> params) {
  const int64_t total = layout_.total();
  if (static_cast<int64_t>(params.size()) != total) {
    return InvalidArgument(
        fmt::format("{} parameters given, the model has {}", params.size(), total));
  }
  cudaStream_t s = compute_.get();
  CUDA_CHECK(
      cudaMemcpyAsync(params_, params.data(), sizeof(float) * total, cudaMemcpyHostToDevice, s));
  cuda::CastToNarrow(params_, params_narrow_, options_.precision, total, s);
  RETURN_IF_ERROR(cuda::LastLaunchError("cast parameters"));
  CUDA_CHECK(cudaMemsetAsync(m_, 0, sizeof(float) * total, s));
  CUDA_CHECK(cudaMemsetAsync(v_, 0, sizeof(float) * total, s));
  CUDA_CHECK(cudaMemsetAsync(scalars_, 0, sizeof(cuda::StepScalars), s));
  CUDA_CHECK(cudaStreamSynchronize(s));
  return SetLossScale(InitialLossScale());
}

Status CudaBackend::SetLossScale(const LossScaleState& state) {
  if (!(state.scale > 0) || !std::isfinite(state.scale) || state.good_steps < 0 ||
      (options_.precision != Precision::kFp16 && state.scale != 1.0f)) {
    return InvalidArgument(fmt::format(
        "CUDA backend: loss scale {} ({} good steps) in {}: must be positive and finite, and 1 "
        "outside fp16",
        state.scale, state.good_steps, PrecisionName(options_.precision)));
  }
  cudaStream_t s = compute_.get();
  CUDA_CHECK(cudaMemcpyAsync(&scalars_->loss_scale, &state, sizeof(state), cudaMemcpyHostToDevice,
                             s));
  CUDA_CHECK(cudaStreamSynchronize(s));
  return Status::OK();
}

Result<LossScaleState> CudaBackend::GetLossScale() {
  LossScaleState state;
  cudaStream_t s = compute_.get();
  CUDA_CHECK(cudaMemcpyAsync(&state, &scalars_->loss_scale, sizeof(state), cudaMemcpyDeviceToHost,
                             s));
  CUDA_CHECK(cudaStreamSynchronize(s));
  return state;
}

Status CudaBackend::SetOptimizerState(std::span<const float> m, std::span<const float> v,
                                      int64_t updates) {
  const int64_t total = layout_.total();
  if (static_cast<int64_t>(m.size()) != total || static_cast<int64_t>(v.size()) != total)
    return InvalidArgument("optimizer state does not match the model's parameter count");
  cudaStream_t s = compute_.get();
  const long long count = updates;
  CUDA_CHECK(cudaMemcpyAsync(m_, m.data(), sizeof(float) * total, cudaMemcpyHostToDevice, s));
  CUDA_CHECK(cudaMemcpyAsync(v_, v.data(), sizeof(float) * total, cudaMemcpyHostToDevice, s));
  CUDA_CHECK(cudaMemcpyAsync(&scalars_->updates, &count, sizeof(count), cudaMemcpyHostToDevice, s));
  CUDA_CHECK(cudaStreamSynchronize(s));
  return Status::OK();
}

Status CudaBackend::EnqueueCopyToHost(const float* from, std::vector<float>* to) {
  to->resize(layout_.total());
  CUDA_CHECK(cudaMemcpyAsync(to->data(), from, sizeof(float) * to->size(), cudaMemcpyDeviceToHost,
                             compute_.get()));
  return Status::OK();
}

Status CudaBackend::GetParameters(std::vector<float>* params) {
  RETURN_IF_ERROR(EnqueueCopyToHost(params_, params));
  CUDA_CHECK(cudaStreamSynchronize(compute_.get()));
  return Status::OK();
}

Status CudaBackend::GetOptimizerState(std::vector<float>* m, std::vector<float>* v,
                                      int64_t* updates) {
  RETURN_IF_ERROR(EnqueueCopyToHost(m_, m));
  RETURN_IF_ERROR(EnqueueCopyToHost(v_, v));
  cudaStream_t s = compute_.get();
  long long count = 0;
  CUDA_CHECK(cudaMemcpyAsync(&count, &scalars_->updates, sizeof(count), cudaMemcpyDeviceToHost, s));
  CUDA_CHECK(cudaStreamSynchronize(s));
  *updates = count;
  return Status::OK();
}

Status CudaBackend::GetGradients(std::vector<float>* grads) {
  RETURN_IF_ERROR(EnqueueCopyToHost(grads_, grads));
  CUDA_CHECK(cudaStreamSynchronize(compute_.get()));
  return Status::OK();
}

Result<int> CudaBackend::Stage(std::span<const uint8_t> images, std::span<const int32_t> labels) {
  const int n = static_cast<int>(labels.size());
  const size_t image_bytes = size_t{labels.size()} * config_.image_size * config_.image_size * 3;
  if (n < 1 || n > options_.max_batch || images.size() != image_bytes) {
    return InvalidArgument(fmt::format(
        "CUDA backend: a batch of {} labels and {} image bytes (at most {} images of {}×{}×3)", n,
        images.size(), options_.max_batch, config_.image_size, config_.image_size));
  }
  const int slot = next_slot_;
  next_slot_ = (next_slot_ + 1) % kSlots;
  // The pinned slot is free once its last H2D has finished.
  CUDA_CHECK(cudaEventSynchronize(copied_[slot].get()));
  RETURN_IF_ERROR(CountCopy(slot));
  cudaPointerAttributes attributes{};
  const bool in_place = cudaPointerGetAttributes(&attributes, images.data()) == cudaSuccess &&
                        attributes.type == cudaMemoryTypeHost;
  (void)cudaGetLastError();  // older drivers fail the query for pageable memory
  const void* source = images.data();
  if (in_place) {
    ++staged_in_place_;
  } else {
    ++staged_via_copy_;
    std::memcpy(pinned_images_[slot].data(), images.data(), image_bytes);
    source = pinned_images_[slot].data();
  }
  std::memcpy(pinned_labels_[slot].data(), labels.data(), sizeof(int32_t) * n);
  // The device slot is free once the compute stream has consumed its last batch.
  CUDA_CHECK(cudaStreamWaitEvent(copy_.get(), consumed_[slot].get(), 0));
  CUDA_CHECK(cudaEventRecord(copy_begin_[slot].get(), copy_.get()));
  CUDA_CHECK(cudaMemcpyAsync(images_[slot], source, image_bytes, cudaMemcpyHostToDevice,
                             copy_.get()));
  CUDA_CHECK(cudaMemcpyAsync(labels_[slot], pinned_labels_[slot].data(), sizeof(int32_t) * n,
                             cudaMemcpyHostToDevice, copy_.get()));
  CUDA_CHECK(cudaEventRecord(copied_[slot].get(), copy_.get()));
  copy_bytes_[slot] = static_cast<int64_t>(image_bytes + sizeof(int32_t) * n);
  batch_[slot] = n;
  return slot;
}

Status CudaBackend::CountCopy(int slot) {
  if (copy_bytes_[slot] == 0) return Status::OK();
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, copy_begin_[slot].get(), copied_[slot].get()));
  h2d_seconds_ += ms / 1000.0;
  h2d_bytes_ += static_cast<double>(copy_bytes_[slot]);
  copy_bytes_[slot] = 0;
  return Status::OK();
}

double CudaBackend::h2d_bytes_per_sec() const {
  return h2d_seconds_ > 0 ? h2d_bytes_ / h2d_seconds_ : 0.0;
}

}  // namespace sluice::trainer
