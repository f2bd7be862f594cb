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
  if (options.max_batch < 1) return InvalidArgument("CUDA backend: max_batch must be at least 1");
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
  RETURN_IF_ERROR(cuda::LayerNormBackwardSetup(config_.width, options_.precision));

  const int nb = options_.max_batch, t = config_.tokens(), d = config_.width;
  const int f = config_.hidden(), c = config_.classes, pd = config_.patch_dim();
  const int64_t rows = int64_t{nb} * t, total = layout_.total();
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

Status CudaBackend::EnqueueForward(int slot, int n, cuda::StepScalars* scalars) {
  cudaStream_t s = compute_.get();
  const int t = config_.tokens(), rows = n * t, d = config_.width, f = config_.hidden();
  const int c = config_.classes, pd = config_.patch_dim();
  const Precision p = options_.precision;
  cuda::NormalizePatchify(images_[slot], x0_, p, n, config_.image_size, config_.patch, s);
  GemmArgs embed;
  embed.trans_b = Trans::kYes;
  embed.m = rows, embed.n = d, embed.k = pd;
  embed.a = x0_, embed.b = Pn(layout_.embed_weight);
  embed.d = h_[0], embed.d_fp32 = true;
  embed.epilogue = Epilogue::kBias, embed.bias = P(layout_.embed_bias);
  RETURN_IF_ERROR(Gemm(embed));
  for (int l = 0; l < config_.depth; ++l) {
    const ParameterLayout::Block& b = layout_.blocks[l];
    cuda::LayerNormForward(h_[l], P(b.ln_gain), P(b.ln_bias), ln_[l], p, ln_mean_[l],
                           ln_rstd_[l], rows, d, s);
    GemmArgs fc1;
    fc1.trans_b = Trans::kYes;
    fc1.m = rows, fc1.n = f, fc1.k = d;
    fc1.a = ln_[l], fc1.b = Pn(b.fc1_weight);
    if (options_.fused_epilogues && f % 8 == 0) {
      fc1.d = act_[l];
      fc1.epilogue = Epilogue::kGeluAuxBias, fc1.bias = Pn(b.fc1_bias), fc1.aux = pre_[l];
      RETURN_IF_ERROR(Gemm(fc1));
    } else {
      fc1.d = pre_[l];
      RETURN_IF_ERROR(Gemm(fc1));
      cuda::GeluBiasForward(pre_[l], Pn(b.fc1_bias), pre_[l], act_[l], p, rows, f, s);
    }
    GemmArgs fc2;
    fc2.trans_b = Trans::kYes;
    fc2.m = rows, fc2.n = d, fc2.k = f;
    fc2.a = act_[l], fc2.b = Pn(b.fc2_weight);
    fc2.d = h_[l + 1], fc2.d_fp32 = true, fc2.c = h_[l], fc2.beta = 1.0f;
    fc2.epilogue = Epilogue::kBias, fc2.bias = P(b.fc2_bias);
    RETURN_IF_ERROR(Gemm(fc2));
  }
  cuda::MeanPoolForward(h_[config_.depth], pooled_, n, t, d, s);
  cuda::LayerNormForward(pooled_, P(layout_.final_ln_gain), P(layout_.final_ln_bias), features_,
                         p, pooled_mean_, pooled_rstd_, n, d, s);
  GemmArgs head;
  head.trans_b = Trans::kYes;
  head.m = n, head.n = c, head.k = d;
  head.a = features_, head.b = Pn(layout_.head_weight);
  head.d = logits_, head.d_fp32 = true;
  head.epilogue = Epilogue::kBias, head.bias = P(layout_.head_bias);
  RETURN_IF_ERROR(Gemm(head));
  // Training steps scale the loss's gradient; evaluation (other scalars) needs none.
  const float* loss_scale = scalars == scalars_ ? &scalars_->loss_scale.scale : nullptr;
  cuda::SoftmaxCrossEntropy(logits_, labels_[slot], n, c, loss_scale, dlogits_, p, row_loss_,
                            row_correct_, scalars, s);
  return cuda::LastLaunchError("forward");
}

Status CudaBackend::EnqueueBackward(int n) {
  cudaStream_t s = compute_.get();
  const int t = config_.tokens(), rows = n * t, d = config_.width, f = config_.hidden();
  const int c = config_.classes, pd = config_.patch_dim();
  const Precision p = options_.precision;
  // Weight gradient: G[m×k'] += dYᵀ·X with dY rows×m and X rows×k'.
  auto weight_grad = [&](const void* dy, const void* x, float* g, int m, int k_cols, int r) {
    GemmArgs a;
    a.trans_a = Trans::kYes;
    a.m = m, a.n = k_cols, a.k = r;
    a.a = dy, a.b = x;
    a.d = g, a.d_fp32 = true, a.c = g, a.beta = 1.0f;
    return Gemm(a);
  };
  // Data gradient: dX[r×n'] = dY[r×k] · W[k×n'] (W stored [out, in]).
  auto data_grad = [&](const void* dy, const void* w, void* dx, bool fp32, int r, int n_cols,
                       int k) {
    GemmArgs a;
    a.m = r, a.n = n_cols, a.k = k;
    a.a = dy, a.b = w;
    a.d = dx, a.d_fp32 = fp32;
    return Gemm(a);
  };

  RETURN_IF_ERROR(weight_grad(dlogits_, features_, G(layout_.head_weight), c, d, n));
  cuda::BiasGrad(dlogits_, p, G(layout_.head_bias), n, c, s);
  RETURN_IF_ERROR(data_grad(dlogits_, Pn(layout_.head_weight), dfeatures_, true, n, d, c));
  cuda::LayerNormBackward(pooled_, dfeatures_, P(layout_.final_ln_gain), pooled_mean_, pooled_rstd_,
                          dpooled_, nullptr, p, G(layout_.final_ln_gain), G(layout_.final_ln_bias),
                          n, d, false, s);
  cuda::MeanPoolBackward(dpooled_, dh_, dh_narrow_, p, n, t, d, s);
  for (int l = config_.depth - 1; l >= 0; --l) {
    const ParameterLayout::Block& b = layout_.blocks[l];
    RETURN_IF_ERROR(weight_grad(dh_narrow_, act_[l], G(b.fc2_weight), d, f, rows));
    cuda::BiasGrad(dh_narrow_, p, G(b.fc2_bias), rows, d, s);
    RETURN_IF_ERROR(data_grad(dh_narrow_, Pn(b.fc2_weight), dact_, false, rows, f, d));
    cuda::GeluBackward(pre_[l], dact_, dact_, p, int64_t{rows} * f, s);
    RETURN_IF_ERROR(weight_grad(dact_, ln_[l], G(b.fc1_weight), f, d, rows));
    cuda::BiasGrad(dact_, p, G(b.fc1_bias), rows, f, s);
    RETURN_IF_ERROR(data_grad(dact_, Pn(b.fc1_weight), dln_, true, rows, d, f));
    cuda::LayerNormBackward(h_[l], dln_, P(b.ln_gain), ln_mean_[l], ln_rstd_[l], dh_, dh_narrow_,
                            p, G(b.ln_gain), G(b.ln_bias), rows, d, true, s);
  }
  RETURN_IF_ERROR(weight_grad(dh_narrow_, x0_, G(layout_.embed_weight), d, pd, rows));
  cuda::BiasGrad(dh_narrow_, p, G(layout_.embed_bias), rows, d, s);
  return cuda::LastLaunchError("backward");
}

Status CudaBackend::EnqueueOps(int slot, int ticket, bool first, bool last, bool update, int n) {
  cudaStream_t s = compute_.get();
  if (first) {
    CUDA_CHECK(cudaMemsetAsync(grads_, 0, sizeof(float) * layout_.total(), s));
    // loss_sum and correct only: Adam's count lives on across steps.
    CUDA_CHECK(cudaMemsetAsync(scalars_, 0, offsetof(cuda::StepScalars, grad_norm), s));
  }
  if (last) {
    CUDA_CHECK(cudaMemcpyAsync(inputs_, pinned_inputs_[ticket].data(), sizeof(cuda::StepInputs),
                               cudaMemcpyHostToDevice, s));
  }
  RETURN_IF_ERROR(EnqueueForward(slot, n, scalars_));
  RETURN_IF_ERROR(EnqueueBackward(n));
  if (last) {
    if (update) {
      cuda::GradNormAndPrepare(grads_, layout_.total(), norm_partials_, inputs_, hyper_,
                               options_.precision == Precision::kFp16, options_.loss_scale,
                               scalars_, s);
      cuda::AdamWUpdate(chunks_, num_chunks_, params_, params_narrow_, options_.precision, grads_,
                        m_, v_, inputs_, hyper_, scalars_, s);
      RETURN_IF_ERROR(cuda::LastLaunchError("AdamW"));
    }
    CUDA_CHECK(cudaMemcpyAsync(pinned_results_[ticket].data(), scalars_, sizeof(cuda::StepScalars),
                               cudaMemcpyDeviceToHost, s));
  }
  return Status::OK();
}

Result<int> CudaBackend::Enqueue(int slot, bool first, bool last, bool update, float lr,
                                 int step_samples) {
  if (slot < 0 || slot >= kSlots || batch_[slot] == 0)
    return FailedPrecondition("CUDA backend: Enqueue of a slot that was not staged");
  if (first == in_step_)
    return FailedPrecondition("CUDA backend: a step's first micro-batch must follow the last");
  const int n = batch_[slot];
  const int ticket = static_cast<int>(steps_enqueued_ % kSlots);
  cudaStream_t s = compute_.get();
  CUDA_CHECK(cudaStreamWaitEvent(s, copied_[slot].get(), 0));
  if (first) {
    CUDA_CHECK(cudaEventRecord(begin_[ticket].get(), s));
    measure_idle_[ticket] = steps_enqueued_ > 0 && !exclude_gap_;
    exclude_gap_ = false;
    in_step_ = true;
  }
  if (last && steps_enqueued_ >= kSlots) {
    // The ticket's inputs were last read by the step before the previous one.
    CUDA_CHECK(cudaEventSynchronize(ends_[(steps_enqueued_ - kSlots) % kEnds].get()));
  }
  if (last) {
    auto* inputs = pinned_inputs_[ticket].as<cuda::StepInputs>();
    inputs->lr = lr;
    inputs->inv_samples = 1.0f / static_cast<float>(std::max(1, step_samples));
  }
  const GraphKey key = std::make_tuple(slot, ticket, first, last, update, n);
  auto it = graphs_.find(key);
  if (!options_.use_graph || graphs_given_up() || seen_.insert(key).second) {
    ++eager_launches_;
    RETURN_IF_ERROR(EnqueueOps(slot, ticket, first, last, update, n));
  } else {
    if (it == graphs_.end()) {
      CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
      const Status captured = EnqueueOps(slot, ticket, first, last, update, n);
      CudaGraph graph;
      const Status ended = graph.EndCapture(s);
      if (captured.ok() && ended.ok()) {
        it = graphs_.emplace(key, std::move(graph)).first;
      } else {
        // Nothing captured ran. Clear the capture's error and launch this step eagerly: a
        // genuine fault fails the eager launch too; a capture-only problem (another thread's
        // call during the capture, say) is left in graph_error() for the caller to report, and
        // the shape is captured again next time, kMaxCaptureFailures times at most.
        (void)cudaGetLastError();
        graph_error_ = (captured.ok() ? ended : captured).ToString();
        if (graph_error_.empty()) graph_error_ = "capture failed";
        ++capture_failures_;
        ++eager_launches_;
        RETURN_IF_ERROR(EnqueueOps(slot, ticket, first, last, update, n));
      }
    }
    if (it != graphs_.end()) {
      ++graph_launches_;
      RETURN_IF_ERROR(it->second.Launch(s));
    }
  }
  CUDA_CHECK(cudaEventRecord(consumed_[slot].get(), s));
  if (!last) return -1;
  CUDA_CHECK(cudaEventRecord(ends_[steps_enqueued_ % kEnds].get(), s));
  ticket_step_[ticket] = steps_enqueued_;
  in_step_ = false;
  ++steps_enqueued_;
  return ticket;
}

Result<CudaStepOutcome> CudaBackend::Wait(int ticket) {
  if (ticket < 0 || ticket >= kSlots) return InvalidArgument("CUDA backend: no such ticket");
  const int64_t step = ticket_step_[ticket];
  const CudaEvent& end = ends_[step % kEnds];
  CUDA_CHECK(cudaEventSynchronize(end.get()));
  const auto* r = pinned_results_[ticket].as<cuda::StepScalars>();
  CudaStepOutcome out;
  out.result.loss_sum = r->loss_sum;
  out.result.correct = r->correct;
  out.grad_norm = r->grad_norm;
  out.skipped = r->skipped != 0;
  out.loss_scale = r->step_loss_scale;
  out.next_loss_scale = r->loss_scale;
  // From the previous step's end (recorded before this step's start, and not recorded again
  // until this Wait has returned).
  if (measure_idle_[ticket]) {
    float ms = 0;
    if (cudaEventElapsedTime(&ms, ends_[(step - 1) % kEnds].get(), begin_[ticket].get()) ==
        cudaSuccess)
      out.idle_seconds = std::max(0.0f, ms) / 1000.0;
    else
      (void)cudaGetLastError();
  }
  return out;
}

Result<CudaStepOutcome> CudaBackend::Step(std::span<const uint8_t> images,
                                          std::span<const int32_t> labels, float lr, bool update) {
  ASSIGN_OR_RETURN(const int slot, Stage(images, labels));
  ASSIGN_OR_RETURN(const int ticket, Enqueue(slot, /*first=*/true, /*last=*/true, update, lr,
                                             static_cast<int>(labels.size())));
  return Wait(ticket);
}

Result<StepResult> CudaBackend::Forward(std::span<const uint8_t> images,
                                        std::span<const int32_t> labels) {
  if (in_step_) return FailedPrecondition("CUDA backend: Forward inside a step");
  ASSIGN_OR_RETURN(const int slot, Stage(images, labels));
  cudaStream_t s = compute_.get();
  CUDA_CHECK(cudaStreamWaitEvent(s, copied_[slot].get(), 0));
  CUDA_CHECK(cudaMemsetAsync(eval_scalars_, 0, sizeof(cuda::StepScalars), s));
  RETURN_IF_ERROR(EnqueueForward(slot, batch_[slot], eval_scalars_));
  CUDA_CHECK(cudaMemcpyAsync(pinned_eval_.data(), eval_scalars_, sizeof(cuda::StepScalars),
                             cudaMemcpyDeviceToHost, s));
  CUDA_CHECK(cudaEventRecord(consumed_[slot].get(), s));
  CUDA_CHECK(cudaStreamSynchronize(s));
  const auto* r = pinned_eval_.as<cuda::StepScalars>();
  StepResult out;
  out.loss_sum = r->loss_sum;
  out.correct = r->correct;
  return out;
}

}  // namespace sluice::trainer
