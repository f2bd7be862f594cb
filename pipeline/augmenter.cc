#include "pipeline/augmenter.h"

#include <algorithm>
#include <cstdio>
#include <limits>

#include "formats/jpeg_header.h"
#include "pipeline/box_transform.h"

namespace sluice {
namespace {

// What an image that is neither JPEG, PNG nor WebP is refused with: what it is, from its first
// bytes.
Status NotAnImage(std::string_view image) {
  const std::string_view format = SniffImageFormat(image);
  if (format == "empty") return InvalidArgument("empty image, not JPEG, PNG or WebP");
  if (format != "unknown") {
    return InvalidArgument(std::string(format) + " image, not JPEG, PNG or WebP");
  }
  std::string m = "not a JPEG, PNG or WebP image (starts with";
  for (size_t i = 0; i < image.size() && i < 4; ++i) {
    char hex[8];
    std::snprintf(hex, sizeof(hex), " 0x%02X", static_cast<uint8_t>(image[i]));
    m += hex;
  }
  return InvalidArgument(m + ")");
}

}  // namespace

Augmenter::Augmenter(const ResolvedOptions& options, DecodedCache* cache, PipelineStats* stats,
                     DecodeBudget* decode_budget)
    : options_(options),
      spec_(options.transforms),
      cache_(cache),
      stats_(stats),
      decode_budget_(decode_budget),
      scanner_(options.image_key, options.unlabeled ? std::string() : options.label_key),
      extractor_(options.features),
      roi_(options.fast_idct) {
  if (!spec_.writes_slot_directly()) frame_.Resize(options_.width, options_.height);
}

AugmentRng Augmenter::RngFor(const WorkItem& w) const {
  return AugmentRng(MixSeed(options_.seed, static_cast<uint64_t>(w.epoch)), w.epoch_index);
}

uint8_t* Augmenter::Target(uint8_t* slot) {
  return spec_.writes_slot_directly() ? slot : frame_.pixels.data();
}

void Augmenter::Finish(AugmentRng& rng, uint8_t* slot) {
  if (spec_.writes_slot_directly()) return;
  MutableImageView img{frame_.pixels.data(), frame_.width, frame_.height,
                       static_cast<size_t>(frame_.width) * 3};
  ApplyPixelOpsAndWrite(spec_.pixel, img, rng, &blur_scratch_, &op_scratch_, spec_.output, slot);
}

void Augmenter::PlaceBoxes(const GeometryPlan& plan, SampleFeatures* features) {
  if (features == nullptr || !options_.features.boxes.enabled) return;
  const int dropped = TransformBoxes(plan.box_map, options_.features.boxes, options_.width,
                                     options_.height, options_.features.boxes_index(), features);
  stats_->boxes_dropped.fetch_add(static_cast<uint64_t>(dropped), std::memory_order_relaxed);
}

Status Augmenter::SetLabel(WorkItem* w, int64_t stored) {
  w->label = 0;
  if (options_.unlabeled) return Status::OK();
  int64_t label = 0;
  // A label no loss function can take: negative (an offset applied twice, a -1 "unlabelled"
  // marker) or, where the dataset says how many classes it has, past the last class. The
  // first clause is the same for every such record (Batcher groups skips by it).
  if (__builtin_add_overflow(stored, options_.label_offset, &label)) {
    return InvalidArgument("label does not fit in int64; feature '" + options_.label_key + "' " +
                           std::to_string(stored) + " + label_offset " +
                           std::to_string(options_.label_offset) + " overflows");
  }
  w->label = static_cast<int32_t>(label);
  if (label < 0) {
    return InvalidArgument("label is negative; " + std::to_string(label) + " = feature '" +
                           options_.label_key + "' + label_offset " +
                           std::to_string(options_.label_offset));
  }
  if (options_.num_classes > 0 && label >= options_.num_classes) {
    // However few they are: labels 1..num_classes (TF-slim's ImageNet) lose one class silently.
    if (!stats_->label_range_warned.exchange(true)) {
      stats_->Warn(options_.name + ": " + options_.files[w->file] + ":" +
                   std::to_string(w->offset) + " has label " + std::to_string(label) +
                   " (feature '" + options_.label_key + "' " + std::to_string(stored) +
                   " + label_offset " + std::to_string(options_.label_offset) +
                   "), not below num_classes " + std::to_string(options_.num_classes) +
                   "; records with such labels are skipped (this is logged once). If the "
                   "labels run from 1 to num_classes, set label_offset: -1");
    }
    return InvalidArgument("label is not below num_classes " +
                           std::to_string(options_.num_classes) + "; it is " +
                           std::to_string(label));
  }
  if (label > std::numeric_limits<int32_t>::max()) {
    return InvalidArgument("label does not fit in int32; it is " + std::to_string(label));
  }
  return Status::OK();
}

Status Augmenter::Decode(WorkItem* w, uint8_t* slot, SampleFeatures* features) {
  AugmentRng rng = RngFor(*w);
  if (w->cached != nullptr) {
    const CachedImage& c = *w->cached;
    if (!c.error.empty()) return Status(c.code, c.error);
    w->label = c.label;
    const GeometryPlan plan =
        PlanGeometry(spec_.geometry, c.width, c.height, options_.width, options_.height, rng);
    RenderGeometry(ImageView{c.pixels.get(), c.width, c.height, static_cast<size_t>(c.width) * 3},
                   plan, options_.width, options_.height, Target(slot));
    if (features != nullptr) {
      *features = c.features;  // copy-assigned: the slot's buffers keep their capacity
      PlaceBoxes(plan, features);
    }
    Finish(rng, slot);
    return Status::OK();
  }
  std::string_view image;
  int64_t stored = 0;
  w->label = 0;
  Status parsed = scanner_.Scan(w->bytes, &image, &stored);
  if (parsed.ok()) parsed = SetLabel(w, stored);
  if (parsed.ok() && features != nullptr) parsed = extractor_.Extract(w->bytes, features);

  // Held until the decode is over: its estimate of the codec's buffers and the decoded pixels.
  DecodeReservation reservation(decode_budget_);
  const DecodeMemoryGate gate = [&reservation](int64_t bytes) {
    return reservation.Reserve(bytes);
  };

  if (cache_ != nullptr) {
    // Decode the whole image once, shrink it to the cache size, and crop from that — the same
    // path later epochs take from the cache, so every epoch sees the same source pixels.
    CachedImage entry;
    entry.label = w->label;
    entry.offset = w->offset;
    entry.length = w->length;
    Status s = parsed;
    if (s.ok()) s = DecodeWhole(image, &gate);
    if (!s.ok()) {
      ReleaseLargeImage();
      entry.error = s.message();
      entry.code = s.code();
      cache_->Insert(w->file, w->record, std::move(entry));
      return s;
    }
    if (features != nullptr) entry.features = *features;  // as extracted: boxes untransformed
    int short_side = std::min(decoded_.width, decoded_.height);
    double f = std::min(1.0, static_cast<double>(options_.decoded_short_side) / short_side);
    entry.width = std::max(1, static_cast<int>(decoded_.width * f + 0.5));
    entry.height = std::max(1, static_cast<int>(decoded_.height * f + 0.5));
    entry.pixels.reset(new uint8_t[static_cast<size_t>(entry.width) * entry.height * 3]);
    Resize(decoded_.view(), entry.pixels.get(), entry.width, entry.height,
           static_cast<size_t>(entry.width) * 3);
    ReleaseLargeImage();
    const GeometryPlan plan = PlanGeometry(spec_.geometry, entry.width, entry.height,
                                           options_.width, options_.height, rng);
    RenderGeometry(ImageView{entry.pixels.get(), entry.width, entry.height,
                             static_cast<size_t>(entry.width) * 3},
                   plan, options_.width, options_.height, Target(slot));
    PlaceBoxes(plan, features);
    cache_->Insert(w->file, w->record, std::move(entry));
    Finish(rng, slot);
    return Status::OK();
  }

  RETURN_IF_ERROR(parsed);
  if (IsPng(image) || IsWebp(image)) {
    // No ROI decode for PNG or WebP: the whole image, then the crop from it (as from the cache).
    Status s = DecodeWhole(image, &gate);
    if (!s.ok()) {
      ReleaseLargeImage();
      return s;
    }
    const GeometryPlan plan = PlanGeometry(spec_.geometry, decoded_.width, decoded_.height,
                                           options_.width, options_.height, rng);
    RenderGeometry(decoded_.view(), plan, options_.width, options_.height, Target(slot));
    PlaceBoxes(plan, features);
    ReleaseLargeImage();
    Finish(rng, slot);
    return Status::OK();
  }
  if (SniffImageFormat(image) != "JPEG") return NotAnImage(image);
  stats_->jpeg_decodes.fetch_add(1, std::memory_order_relaxed);
  ASSIGN_OR_RETURN(JpegHeader header, roi_.ReadHeader(image, options_.max_pixels));
  const GeometryPlan plan = PlanGeometry(spec_.geometry, header.width, header.height,
                                         options_.width, options_.height, rng);
  uint8_t* target = Target(slot);
  ClearPadding(plan, options_.width, options_.height, target);
  if (plan.dest.width > 0) {
    const size_t stride = static_cast<size_t>(options_.width) * 3;
    RETURN_IF_ERROR(roi_.DecodeCrop(image, plan.source, plan.dest.width, plan.dest.height,
                                    plan.resize, DestPixels(plan, options_.width, target), stride,
                                    options_.max_pixels, /*stats=*/nullptr, &gate));
  }
  // After the decode: a record that fails there drops no boxes.
  PlaceBoxes(plan, features);
  Finish(rng, slot);
  return Status::OK();
}

Status Augmenter::DecodeWhole(std::string_view image, const DecodeMemoryGate* gate) {
  if (IsPng(image)) {
    stats_->png_decodes.fetch_add(1, std::memory_order_relaxed);
    return png_.Decode(image, options_.alpha, &decoded_, options_.max_pixels, gate);
  }
  if (IsWebp(image)) {
    stats_->webp_decodes.fetch_add(1, std::memory_order_relaxed);
    return DecodeWebp(image, options_.alpha, &decoded_, options_.max_pixels, gate);
  }
  if (SniffImageFormat(image) != "JPEG") return NotAnImage(image);
  stats_->jpeg_decodes.fetch_add(1, std::memory_order_relaxed);
  return full_.Decode(image, &decoded_, options_.max_pixels, gate);
}

void Augmenter::ReleaseLargeImage() {
  if (decoded_.pixels.capacity() > JpegRoiDecoder::kKeptRowsBytes) {
    decoded_ = Image();
  }
}

void Augmenter::Apply(WorkItem* w) {
  SampleFeatures* features = w->buffer->features.empty() ? nullptr : &w->buffer->features[w->slot];
  Status s = Decode(w, w->buffer->image(w->slot), features);
  // The slot is reused record after record: what it keeps stays within what the pool accounts.
  if (features != nullptr) features->TrimTo(w->buffer->feature_slot_bytes);
  if (!s.ok()) {
    w->status = s.WithContext(options_.files[w->file] + ":" + std::to_string(w->offset));
  }
}

}  // namespace sluice
