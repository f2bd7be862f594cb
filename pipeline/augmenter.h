// Turns one record into one training image in its batch slot: parse the Example, plan the
// transform list's geometry (pipeline/geometry_plan.h: one crop window and one resampling), then
// the fused ROI decode of a JPEG — or, for a PNG or WebP (told by its signature), a whole decode
// and the crop from it; with the DECODED cache, the crop from the cached image — then the per-pixel
// ops and the output conversion (dtype, layout, normalize) into the slot. A list with neither (the
// presets, uint8 NHWC) decodes straight into the slot. Randomness comes from (seed, epoch,
// position), so the result does not depend on which thread ran it. With a feature schema the
// record's features go into the slot's SampleFeatures, its boxes moved with the plan the image
// was rendered with (pipeline/box_transform.h); the DECODED cache keeps them as extracted. One per
// worker thread: the Transform (see pipeline/transform.h) every pipeline applies.
#pragma once

#include <string>
#include <vector>

#include "formats/crop_window.h"
#include "formats/example_scanner.h"
#include "formats/image_ops.h"
#include "formats/jpeg_codec.h"
#include "formats/jpeg_roi_decoder.h"
#include "formats/png_codec.h"
#include "formats/sample_features.h"
#include "formats/webp_codec.h"
#include "pipeline/caches.h"
#include "pipeline/decode_budget.h"
#include "pipeline/geometry_plan.h"
#include "pipeline/options.h"
#include "pipeline/pixel_chain.h"
#include "pipeline/transform.h"
#include "pipeline/transform_spec.h"
#include "pipeline/work_item.h"

namespace sluice {

class Augmenter final : public Transform {
 public:
  // cache: the DECODED cache, or null. Every decode reserves its estimated memory in
  // decode_budget first (shared by the pipeline's Augmenters; it outlives this).
  Augmenter(const ResolvedOptions& options, DecodedCache* cache, PipelineStats* stats,
            DecodeBudget* decode_budget);

  // Writes w's image into w->buffer slot w->slot, sets w->label (0 when options.unlabeled) and,
  // with a feature schema, the slot's features; on failure sets w->status (naming file and
  // offset) and leaves the slot partly written.
  void Apply(WorkItem* w) override;

 private:
  // features: the slot's, null without a feature schema.
  Status Decode(WorkItem* w, uint8_t* slot, SampleFeatures* features);
  // Checks and sets w->label from the label the record stores.
  Status SetLabel(WorkItem* w, int64_t stored);
  // With boxes: moves features' boxes with plan into the output, counting the ones dropped.
  void PlaceBoxes(const GeometryPlan& plan, SampleFeatures* features);
  // Decodes a whole JPEG, PNG or WebP into decoded_, counting it in stats.
  Status DecodeWhole(std::string_view image, const DecodeMemoryGate* gate);
  // Where the geometry renders: the slot itself, or frame_ when per-pixel ops or an output
  // conversion follow.
  uint8_t* Target(uint8_t* slot);
  // The per-pixel ops on frame_, then the output conversion into slot (unless written directly).
  void Finish(AugmentRng& rng, uint8_t* slot);
  AugmentRng RngFor(const WorkItem& w) const;
  // Frees decoded_ when it holds more than an ordinary image: no budget counts it between decodes.
  void ReleaseLargeImage();

  const ResolvedOptions& options_;
  const TransformSpec& spec_;
  DecodedCache* cache_;
  PipelineStats* stats_;
  DecodeBudget* decode_budget_;
  ExampleScanner scanner_;  // with options.unlabeled, its label key is empty: no label read
  FeatureExtractor extractor_;
  JpegRoiDecoder roi_;
  JpegDecoder full_;
  PngDecoder png_;
  Image decoded_;
  Image frame_;  // the resampled image, when per-pixel ops or a conversion follow
  std::vector<float> blur_scratch_;
  std::vector<uint8_t> op_scratch_;
};

}  // namespace sluice
