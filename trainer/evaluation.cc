#include "trainer/evaluation.h"

#include <fmt/format.h>

#include <memory>

namespace sluice::trainer {

Status CheckBatch(const ReceivedBatch& batch, const ModelConfig& config,
                  const std::string& dataset) {
  const BatchMeta& m = batch.meta;
  // The model normalizes uint8 NHWC pixels on the device and trains on hard labels.
  if (m.dtype != DType::kUint8 || m.layout != Layout::kNhwc) {
    return FailedPrecondition(fmt::format(
        "dataset {}: batch {}:{} holds {} {} images; sluice-trainer takes uint8 NHWC (it "
        "normalizes on the device): serve it a transform set whose output is uint8 NHWC",
        dataset, m.epoch, m.index, DTypeName(m.dtype), LayoutName(m.layout)));
  }
  if (!batch.mixed_labels.empty()) {
    return FailedPrecondition(fmt::format(
        "dataset {}: batch {}:{} has mixed labels (mixup or cutmix); sluice-trainer trains on "
        "hard labels: serve it a transform set without mixup and cutmix",
        dataset, m.epoch, m.index));
  }
  if (batch.labels.size() != static_cast<size_t>(m.n)) {
    return FailedPrecondition(fmt::format(
        "dataset {}: batch {}:{} has no labels (the dataset is unlabeled); sluice-trainer "
        "trains a classifier on labels",
        dataset, m.epoch, m.index));
  }
  if (m.height != config.image_size || m.width != config.image_size || m.channels != 3) {
    return InvalidArgument(fmt::format(
        "dataset {}: batch {}:{} is {}×{}×{}, the model takes {}×{}×3", dataset, m.epoch, m.index,
        m.height, m.width, m.channels, config.image_size, config.image_size));
  }
  for (int32_t label : batch.labels) {
    if (label < 0 || label >= config.classes) {
      return InvalidArgument(fmt::format(
          "dataset {}: batch {}:{} has label {}, outside [0, {}) (set --num-classes, or the "
          "dataset's label_offset)",
          dataset, m.epoch, m.index, label, config.classes));
    }
  }
  return Status::OK();
}

Result<EvalResult> Evaluate(Client& client, const v1::StreamRequest& request,
                            const ModelConfig& config, Backend& backend) {
  ASSIGN_OR_RETURN(std::unique_ptr<BatchStream> stream, client.Stream(request));
  EvalResult total;
  for (;;) {
    ReceivedBatch batch;
    bool end = false;
    RETURN_IF_ERROR(stream->Next(&batch, &end).WithContext("eval stream"));
    if (end) break;
    RETURN_IF_ERROR(CheckBatch(batch, config, request.dataset()));
    ASSIGN_OR_RETURN(const StepResult r, backend.Evaluate({batch.images, batch.labels}));
    total.loss_sum += r.loss_sum;
    total.correct += r.correct;
    total.images += batch.meta.n;
  }
  return total;
}

}  // namespace sluice::trainer
