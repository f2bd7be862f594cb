// Turns one record into one training image in its batch slot: parse the Example, choose the crop
// (RandomResizedCrop + flip for TRAIN, centre crop for EVAL), then the fused ROI decode — or, with
// the DECODED cache, crop from the cached image. Randomness comes from (seed, epoch, position), so
// the result does not depend on which thread ran it. One per worker thread: the Transform (see
// pipeline/transform.h) every pipeline applies today.
#pragma once

#include <string>

#include "formats/crop_window.h"
#include "formats/example_scanner.h"
#include "formats/image_ops.h"
#include "formats/jpeg_codec.h"
#include "formats/jpeg_roi_decoder.h"
#include "pipeline/caches.h"
#include "pipeline/decode_budget.h"
#include "pipeline/options.h"
#include "pipeline/transform.h"
#include "pipeline/work_item.h"

namespace sluice {

class Augmenter final : public Transform {
 public:
  // cache: the DECODED cache, or null. Every decode reserves its estimated memory in
  // decode_budget first (shared by the pipeline's Augmenters; it outlives this).
  Augmenter(const ResolvedOptions& options, DecodedCache* cache, PipelineStats* stats,
            DecodeBudget* decode_budget);

  // Writes w's image into w->buffer slot w->slot and sets w->label; on failure sets w->status
  // (naming file and offset) and leaves the slot partly written.
  void Apply(WorkItem* w) override;

 private:
  Status Decode(WorkItem* w, uint8_t* out);
  // Crops (and maybe flips) from an already decoded image into out.
  void CropFrom(const ImageView& image, AugmentRng& rng, uint8_t* out) const;
  AugmentRng RngFor(const WorkItem& w) const;
  // Frees decoded_ when it holds more than an ordinary image: no budget counts it between decodes.
  void ReleaseLargeImage();

  const ResolvedOptions& options_;
  DecodedCache* cache_;
  PipelineStats* stats_;
  DecodeBudget* decode_budget_;
  ExampleScanner scanner_;
  RandomResizedCropParams crop_params_;
  JpegRoiDecoder roi_;
  JpegDecoder full_;
  Image decoded_;
};

}  // namespace sluice
