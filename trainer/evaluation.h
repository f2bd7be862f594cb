// Evaluation during and after training: one epoch of the eval dataset, in eval mode, through
// the backend's forward pass.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "client/client.h"
#include "formats/status.h"
#include "trainer/backend.h"
#include "trainer/model.h"

namespace sluice::trainer {

// InvalidArgument naming the dataset and batch when `batch` is not config.image_size square RGB
// or holds a label outside [0, config.classes).
Status CheckBatch(const ReceivedBatch& batch, const ModelConfig& config,
                  const std::string& dataset);

struct EvalResult {
  int64_t images = 0;
  int64_t correct = 0;
  double loss_sum = 0;  // Σ per-sample cross-entropy (nats)
};

// Streams one epoch of `request` (a MODE_EVAL request for `request.dataset()`) through
// backend.Evaluate. Errors: the stream's ("eval stream: …"), CheckBatch's, the backend's.
Result<EvalResult> Evaluate(Client& client, const v1::StreamRequest& request,
                            const ModelConfig& config, Backend& backend);

}  // namespace sluice::trainer
