// The CUDA backend's step (trainer/cuda_backend.h): the forward and backward kernels and GEMMs,
// the update, their capture into CUDA Graphs, Wait and the synchronous Forward for evaluation.
#include "trainer/cuda_backend.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <mutex>

namespace sluice::trainer {

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
  cuda::BiasGrad(dlogits_, p, G(layout_.head_bias), reduction_scratch_, n, c, s);
  RETURN_IF_ERROR(data_grad(dlogits_, Pn(layout_.head_weight), dfeatures_, true, n, d, c));
  cuda::LayerNormBackward(pooled_, dfeatures_, P(layout_.final_ln_gain), pooled_mean_, pooled_rstd_,
                          dpooled_, nullptr, p, G(layout_.final_ln_gain), G(layout_.final_ln_bias),
                          reduction_scratch_, n, d, false, s);
  cuda::MeanPoolBackward(dpooled_, dh_, dh_narrow_, p, n, t, d, s);
  for (int l = config_.depth - 1; l >= 0; --l) {
    const ParameterLayout::Block& b = layout_.blocks[l];
    RETURN_IF_ERROR(weight_grad(dh_narrow_, act_[l], G(b.fc2_weight), d, f, rows));
    cuda::BiasGrad(dh_narrow_, p, G(b.fc2_bias), reduction_scratch_, rows, d, s);
    RETURN_IF_ERROR(data_grad(dh_narrow_, Pn(b.fc2_weight), dact_, false, rows, f, d));
    cuda::GeluBackward(pre_[l], dact_, dact_, p, int64_t{rows} * f, s);
    RETURN_IF_ERROR(weight_grad(dact_, ln_[l], G(b.fc1_weight), f, d, rows));
    cuda::BiasGrad(dact_, p, G(b.fc1_bias), reduction_scratch_, rows, f, s);
    RETURN_IF_ERROR(data_grad(dact_, Pn(b.fc1_weight), dln_, true, rows, d, f));
    cuda::LayerNormBackward(h_[l], dln_, P(b.ln_gain), ln_mean_[l], ln_rstd_[l], dh_, dh_narrow_, p,
                            G(b.ln_gain), G(b.ln_bias), reduction_scratch_, rows, d, true, s);
  }
  RETURN_IF_ERROR(weight_grad(dh_narrow_, x0_, G(layout_.embed_weight), d, pd, rows));
  cuda::BiasGrad(dh_narrow_, p, G(layout_.embed_bias), reduction_scratch_, rows, d, s);
  return cuda::LastLaunchError("backward");
}

Status CudaBackend::EnqueueOps(int slot, int ticket, bool first, bool last, bool update, int n) {
  cudaStream_t s = compute_.get();
  if (first) {
    CUDA_CHECK(cudaMemsetAsync(grads_, 0, sizeof(float) * layout_.total(), s));
    // The step's own results: loss_sum, correct, grad_norm, skipped, and the scale it runs with
    // (the update kernel overwrites the last three; without an update they must not be the
    // previous step's). Adam's count and the loss scale's state live on across steps.
    CUDA_CHECK(cudaMemsetAsync(scalars_, 0, offsetof(cuda::StepScalars, grad_scale), s));
    CUDA_CHECK(cudaMemsetAsync(&scalars_->skipped, 0, sizeof(scalars_->skipped), s));
    CUDA_CHECK(cudaMemcpyAsync(&scalars_->step_loss_scale, &scalars_->loss_scale.scale,
                               sizeof(float), cudaMemcpyDeviceToDevice, s));
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
      // Client threads' page-locking calls wait for the capture (CaptureMutex()).
      std::unique_lock<std::mutex> capture_lock(CaptureMutex());
      CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
      const Status captured = EnqueueOps(slot, ticket, first, last, update, n);
      CudaGraph graph;
      const Status ended = graph.EndCapture(s);
      capture_lock.unlock();
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
