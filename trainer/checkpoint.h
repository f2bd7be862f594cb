// A training checkpoint: the model's shape, the weights, AdamW's moments, the step and the position
// of the last training batch consumed (so the stream resumes right after it).
//
// File DIR/checkpoint.bin, replaced atomically (write to a temporary, rename):
//   "SLCKPT01" | u32 header length | header (JSON) | params | first moment | second moment
//   (each `parameters` little-endian fp32) | u32 masked CRC-32C of everything before it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "formats/status.h"
#include "trainer/model.h"

namespace sluice::trainer {

struct Checkpoint {
  ModelConfig config;
  int64_t step = 0;           // training steps completed
  int64_t adam_updates = 0;   // steps whose update was applied (non-finite ones are skipped)
  bool has_position = false;  // false before the first batch
  int64_t epoch = 0, index = 0, end_record = 0;  // BatchMeta of the last batch consumed
  // Its position's shuffle_bytes (service.proto Position); 0 in checkpoints written before it was
  // recorded, which a server accepts unchecked.
  int64_t shuffle_bytes = 0;
  // fp16 training's dynamic loss scale (trainer/loss_scale.h); 0 in checkpoints of other
  // precisions and in those written before it was recorded.
  float loss_scale = 0;
  int loss_scale_good_steps = 0;
  // One value per parameter, tensor after tensor, without ParameterLayout's padding (Pack).
  std::vector<float> params, first_moment, second_moment;
};

std::string CheckpointPath(const std::string& dir);

// Creates `dir` when missing. IOError naming the path on failure.
Status SaveCheckpoint(const std::string& dir, const Checkpoint& checkpoint);
// NotFound when there is no checkpoint in `dir`; DataLoss naming the file when it is truncated,
// damaged (checksum) or inconsistent.
Result<Checkpoint> LoadCheckpoint(const std::string& dir);

}  // namespace sluice::trainer
