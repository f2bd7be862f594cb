// The Transform seam (DESIGN.md "Seams"): what becomes of one record once it is read. Its one
// implementation is the Augmenter: parse, then the transform list compiled from PipelineOptions
// (pipeline/transform_spec.h): geometry fused into the crop/decode/resize, per-pixel ops and the
// output conversion into the batch slot. Apply is called once per record, so the virtual
// call costs nothing per pixel. Not thread-safe: one instance per worker thread, holding that
// thread's scratch, made by a TransformFactory.
#pragma once

#include <functional>
#include <memory>

#include "pipeline/work_item.h"

namespace sluice {

class Transform {
 public:
  virtual ~Transform() = default;
  // Writes w's image into w->buffer slot w->slot and sets w->label; on failure sets w->status
  // (naming file and offset) and may leave the slot partly written. Randomness must come from
  // (seed, epoch, position), never from the thread, so the result is the same on any worker.
  virtual void Apply(WorkItem* w) = 0;
};

// Makes one worker's Transform. Called once per worker thread, on that thread; thread-safe.
using TransformFactory = std::function<std::unique_ptr<Transform>()>;

}  // namespace sluice
