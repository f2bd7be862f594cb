#include "trainer/train_summary.h"

#include <cmath>
#include <nlohmann/json.hpp>

namespace sluice::trainer {
namespace {

nlohmann::json Number(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
}

}  // namespace

std::string TrainSummary::ToJson() const {
  nlohmann::json j = {
      {"steps", steps},
      {"initial_loss", Number(initial_loss)},
      {"final_loss", Number(final_loss)},
      {"train_accuracy", Number(train_accuracy)},
      {"eval_accuracy", eval_accuracy >= 0 ? Number(eval_accuracy) : nlohmann::json(nullptr)},
      {"images_per_sec", Number(images_per_sec)},
      {"data_wait_fraction", Number(data_wait_fraction)},
      {"device", DeviceName(device)},
      {"skipped_updates", skipped_updates},
      {"precision", PrecisionName(precision)},
  };
  if (loss_scale > 0) j["loss_scale"] = loss_scale;
  if (h2d_bytes_per_sec > 0) j["h2d_gb_per_sec"] = Number(h2d_bytes_per_sec / 1e9);
  if (h2d_plain_bytes_per_sec > 0)
    j["h2d_plain_gb_per_sec"] = Number(h2d_plain_bytes_per_sec / 1e9);
  if (device == Device::kCuda) {
    j["cuda"] = {
        {"graph_launches", cuda_graph_launches},
        {"eager_launches", cuda_eager_launches},
        {"graphs_given_up", graphs_given_up},
        {"staged_in_place", staged_in_place},
        {"staged_via_copy", staged_via_copy},
        {"shared_memory_batches", shared_memory_batches},
    };
  }
  return j.dump();
}

}  // namespace sluice::trainer
