#include "pipeline/transform_spec.h"

#include <cmath>
#include <optional>

namespace sluice {
namespace {

// Larger than any image a pipeline makes (ClientLimits allow 1024 by default): a typo, not a size.
constexpr int kMaxOpSize = 16384;

class Checker {
 public:
  Checker(int index, std::string op) : prefix_("transforms[" + std::to_string(index) + "]." + op) {}

  Status Bad(const std::string& field, const std::string& what) const {
    return InvalidArgument(prefix_ + (field.empty() ? "" : "." + field) + ": " + what);
  }
  const std::string& prefix() const { return prefix_; }

  // A probability: unset is `otherwise`.
  Status Probability(const std::string& field, bool has, double value, double otherwise,
                     double* out) const {
    *out = has ? value : otherwise;
    if (!(*out >= 0 && *out <= 1)) {
      return Bad(field, std::to_string(*out) + " is not a probability in [0, 1]");
    }
    return Status::OK();
  }

  // [h, w], [s] or empty (the pipeline's size).
  Status Size(const google::protobuf::RepeatedField<int32_t>& size, int height, int width,
              int* out_h, int* out_w) const {
    if (size.size() > 2)
      return Bad("size",
                 "has " + std::to_string(size.size()) + " values; give [height, width] or [size]");
    *out_h = size.empty() ? height : size[0];
    *out_w = size.empty() ? width : size[size.size() - 1];
    for (int v : {*out_h, *out_w}) {
      if (v < 1 || v > kMaxOpSize) {
        return Bad("size",
                   std::to_string(v) + " is outside [1, " + std::to_string(kMaxOpSize) + "]");
      }
    }
    return Status::OK();
  }

  // A [min, max] range from 0, 1 or 2 values: none gives `otherwise`.
  Status Range(const std::string& field, const google::protobuf::RepeatedField<double>& v,
               double lo_default, double hi_default, double* out) const {
    if (v.size() > 2)
      return Bad(field, "has " + std::to_string(v.size()) + " values; give [min, max]");
    out[0] = v.empty() ? lo_default : v[0];
    out[1] = v.size() == 2 ? v[1] : (v.empty() ? hi_default : v[0]);
    if (!std::isfinite(out[0]) || !std::isfinite(out[1]) || out[0] > out[1]) {
      return Bad(field, "[" + std::to_string(out[0]) + ", " + std::to_string(out[1]) +
                            "] is not a range (min <= max, both finite)");
    }
    return Status::OK();
  }

 private:
  std::string prefix_;
};

ResizeFilter FilterOf(v1::Interpolation i) {
  switch (i) {
    case v1::INTERPOLATION_AREA:
      return ResizeFilter::kArea;
    case v1::INTERPOLATION_BICUBIC:
      return ResizeFilter::kBicubic;
    default:
      return ResizeFilter::kBilinear;
  }
}

Status CheckFilter(const Checker& c, v1::Interpolation i) {
  if (!v1::Interpolation_IsValid(i))
    return c.Bad("interpolation", "unknown value " + std::to_string(i));
  return Status::OK();
}

// ColorJitter's factor: one value v means [max(0, 1 - v), 1 + v]; two, the range (>= 0).
Status JitterFactor(const Checker& c, const std::string& field,
                    const google::protobuf::RepeatedField<double>& v, bool* has, double* range) {
  *has = !v.empty();
  if (v.empty()) return Status::OK();
  if (v.size() == 1) {
    if (!(v[0] >= 0) || !std::isfinite(v[0])) {
      return c.Bad(field, std::to_string(v[0]) + " is negative (one value v means [1 - v, 1 + v])");
    }
    range[0] = std::max(0.0, 1 - v[0]);
    range[1] = 1 + v[0];
  } else {
    RETURN_IF_ERROR(c.Range(field, v, 1, 1, range));
    if (range[0] < 0) return c.Bad(field, "a factor below 0 (" + std::to_string(range[0]) + ")");
  }
  // torchvision drops a jitter whose range is exactly [1, 1].
  if (range[0] == 1 && range[1] == 1) *has = false;
  return Status::OK();
}

Status HueRange(const Checker& c, const google::protobuf::RepeatedField<double>& v, bool* has,
                double* range) {
  *has = !v.empty();
  if (v.empty()) return Status::OK();
  if (v.size() == 1) {
    if (!(v[0] >= 0 && v[0] <= 0.5)) {
      return c.Bad("hue", std::to_string(v[0]) + " is outside [0, 0.5]");
    }
    range[0] = -v[0];
    range[1] = v[0];
  } else {
    RETURN_IF_ERROR(c.Range("hue", v, 0, 0, range));
    if (range[0] < -0.5 || range[1] > 0.5) {
      return c.Bad("hue", "range leaves [-0.5, 0.5]");
    }
  }
  if (range[0] == 0 && range[1] == 0) *has = false;
  return Status::OK();
}

Status Channels(const Checker& c, const std::string& field,
                const google::protobuf::RepeatedField<double>& v, double otherwise, double* out) {
  if (v.size() != 0 && v.size() != 1 && v.size() != 3) {
    return c.Bad(field, "has " + std::to_string(v.size()) + " values; give 3 (R, G, B) or 1");
  }
  for (int ch = 0; ch < 3; ++ch) {
    out[ch] = v.empty() ? otherwise : v[v.size() == 1 ? 0 : ch];
    if (!std::isfinite(out[ch])) return c.Bad(field, "is not finite");
  }
  return Status::OK();
}

}  // namespace

Result<TransformSpec> CompileTransforms(
    const google::protobuf::RepeatedPtrField<v1::TransformOp>& ops, bool eval, int height,
    int width, int num_classes) {
  TransformSpec spec;
  if (ops.empty()) {
    GeometryOp g;
    g.kind = eval ? GeometryOp::Kind::kPresetEval : GeometryOp::Kind::kPresetTrain;
    g.height = height;
    g.width = width;
    spec.geometry.push_back(g);
    return spec;
  }
  // The size the list has made so far; nullopt while it depends on the image.
  std::optional<std::pair<int, int>> size;
  std::string size_set_by;  // the op that last set it, for messages
  std::string first_pixel;  // the first per-pixel op, for messages
  std::string normalized_by;
  bool has_output = false;
  for (int i = 0; i < ops.size(); ++i) {
    const v1::TransformOp& op = ops[i];
    if (op.op_case() == v1::TransformOp::OP_NOT_SET) {
      return InvalidArgument("transforms[" + std::to_string(i) +
                             "]: names no op (unknown op, or an empty entry)");
    }
    const std::string name =
        std::string(v1::TransformOp::descriptor()->FindFieldByNumber(op.op_case())->name());
    Checker c(i, name);
    const bool batch_op = op.has_mixup() || op.has_cutmix();
    if (has_output && !batch_op) {
      return c.Bad("", "comes after output, which must be the last op (but for mixup and cutmix)");
    }
    const bool geometric = op.has_preset() || op.has_random_resized_crop() || op.has_resize() ||
                           op.has_center_crop() || op.has_random_crop() || op.has_flip();
    if (!normalized_by.empty() && !op.has_output() && !batch_op) {
      return c.Bad("", "comes after " + normalized_by + "; only output may follow normalize");
    }
    if (geometric && !first_pixel.empty()) {
      return c.Bad("", "a geometric op after the per-pixel op " + first_pixel +
                           " cannot be fused into the crop and resampling; put it before");
    }
    GeometryOp g;
    PixelOp px;
    switch (op.op_case()) {
      case v1::TransformOp::kPreset: {
        if (op.preset() != v1::PRESET_IMAGENET_TRAIN && op.preset() != v1::PRESET_IMAGENET_EVAL) {
          return c.Bad("", "unknown preset " + std::to_string(op.preset()));
        }
        g.kind = op.preset() == v1::PRESET_IMAGENET_EVAL ? GeometryOp::Kind::kPresetEval
                                                         : GeometryOp::Kind::kPresetTrain;
        g.height = height;
        g.width = width;
        break;
      }
      case v1::TransformOp::kRandomResizedCrop: {
        const auto& o = op.random_resized_crop();
        g.kind = GeometryOp::Kind::kRandomResizedCrop;
        RETURN_IF_ERROR(c.Size(o.size(), height, width, &g.height, &g.width));
        double scale[2], ratio[2];
        RETURN_IF_ERROR(c.Range("scale", o.scale(), 0.08, 1.0, scale));
        RETURN_IF_ERROR(c.Range("ratio", o.ratio(), 3.0 / 4.0, 4.0 / 3.0, ratio));
        if (!(scale[0] > 0 && scale[1] <= 1)) {
          return c.Bad("scale", "must lie in (0, 1] (a fraction of the image's area)");
        }
        if (!(ratio[0] > 0)) return c.Bad("ratio", "must be > 0 (width / height)");
        g.crop.min_area = scale[0];
        g.crop.max_area = scale[1];
        g.crop.min_aspect = ratio[0];
        g.crop.max_aspect = ratio[1];
        RETURN_IF_ERROR(CheckFilter(c, o.interpolation()));
        g.filter = FilterOf(o.interpolation());
        break;
      }
      case v1::TransformOp::kResize: {
        const auto& o = op.resize();
        g.kind = GeometryOp::Kind::kResize;
        if ((o.shorter_side() != 0) == !o.size().empty()) {
          return c.Bad("", "give exactly one of shorter_side and size");
        }
        // torchvision's Resize([s]) is the shorter side s, as Resize(s) is.
        const int shorter = o.size().size() == 1 ? o.size(0) : o.shorter_side();
        if (shorter != 0) {
          const std::string field = o.size().size() == 1 ? "size" : "shorter_side";
          if (shorter < 1 || shorter > kMaxOpSize) {
            return c.Bad(field, std::to_string(shorter) + " is outside [1, " +
                                    std::to_string(kMaxOpSize) + "]");
          }
          g.shorter_side = shorter;
        } else {
          RETURN_IF_ERROR(c.Size(o.size(), height, width, &g.height, &g.width));
        }
        RETURN_IF_ERROR(CheckFilter(c, o.interpolation()));
        g.filter = FilterOf(o.interpolation());
        break;
      }
      case v1::TransformOp::kCenterCrop:
        g.kind = GeometryOp::Kind::kCenterCrop;
        RETURN_IF_ERROR(c.Size(op.center_crop().size(), height, width, &g.height, &g.width));
        break;
      case v1::TransformOp::kRandomCrop:
        g.kind = GeometryOp::Kind::kRandomCrop;
        RETURN_IF_ERROR(c.Size(op.random_crop().size(), height, width, &g.height, &g.width));
        g.padding = op.random_crop().padding();
        if (g.padding < 0 || g.padding > kMaxOpSize) {
          return c.Bad("padding", std::to_string(g.padding) + " is outside [0, " +
                                      std::to_string(kMaxOpSize) + "]");
        }
        break;
      case v1::TransformOp::kFlip: {
        const auto& o = op.flip();
        g.kind = GeometryOp::Kind::kFlip;
        RETURN_IF_ERROR(c.Probability("horizontal_p", o.has_horizontal_p(), o.horizontal_p(), 0.5,
                                      &g.horizontal_p));
        RETURN_IF_ERROR(
            c.Probability("vertical_p", o.has_vertical_p(), o.vertical_p(), 0, &g.vertical_p));
        break;
      }
      case v1::TransformOp::kColorJitter: {
        const auto& o = op.color_jitter();
        px.kind = PixelOp::Kind::kColorJitter;
        RETURN_IF_ERROR(
            JitterFactor(c, "brightness", o.brightness(), &px.has_brightness, px.brightness));
        RETURN_IF_ERROR(JitterFactor(c, "contrast", o.contrast(), &px.has_contrast, px.contrast));
        RETURN_IF_ERROR(
            JitterFactor(c, "saturation", o.saturation(), &px.has_saturation, px.saturation));
        RETURN_IF_ERROR(HueRange(c, o.hue(), &px.has_hue, px.hue));
        if (!v1::JitterOrder_IsValid(o.order())) return c.Bad("order", "unknown value");
        px.random_order = o.order() == v1::JITTER_ORDER_RANDOM;
        RETURN_IF_ERROR(c.Probability("p", o.has_p(), o.p(), 1, &px.p));
        break;
      }
      case v1::TransformOp::kGrayscale:
        px.kind = PixelOp::Kind::kGrayscale;
        RETURN_IF_ERROR(c.Probability("p", op.grayscale().has_p(), op.grayscale().p(), 1, &px.p));
        break;
      case v1::TransformOp::kGaussianBlur: {
        const auto& o = op.gaussian_blur();
        px.kind = PixelOp::Kind::kGaussianBlur;
        px.kernel_size = o.kernel_size();
        if (px.kernel_size < 1 || px.kernel_size % 2 == 0 || px.kernel_size > 255) {
          return c.Bad("kernel_size",
                       std::to_string(px.kernel_size) + " is not an odd number in [1, 255]");
        }
        RETURN_IF_ERROR(c.Range("sigma", o.sigma(), 0.1, 2.0, px.sigma));
        if (!(px.sigma[0] > 0)) return c.Bad("sigma", "must be > 0");
        RETURN_IF_ERROR(c.Probability("p", o.has_p(), o.p(), 1, &px.p));
        break;
      }
      case v1::TransformOp::kSolarize:
        px.kind = PixelOp::Kind::kSolarize;
        px.threshold = op.solarize().threshold();
        if (!(px.threshold >= 0 && px.threshold <= 256)) {
          return c.Bad("threshold", std::to_string(px.threshold) + " is outside [0, 256]");
        }
        RETURN_IF_ERROR(c.Probability("p", op.solarize().has_p(), op.solarize().p(), 0.5, &px.p));
        break;
      case v1::TransformOp::kPosterize:
        px.kind = PixelOp::Kind::kPosterize;
        px.bits = op.posterize().bits();
        if (px.bits < 1 || px.bits > 8) {
          return c.Bad("bits", std::to_string(px.bits) + " is outside [1, 8]");
        }
        RETURN_IF_ERROR(c.Probability("p", op.posterize().has_p(), op.posterize().p(), 0.5, &px.p));
        break;
      case v1::TransformOp::kRotate: {
        const auto& o = op.rotate();
        px.kind = PixelOp::Kind::kRotate;
        if (o.degrees().empty())
          return c.Bad("degrees", "is empty; give d (for [-d, d]) or [min, max]");
        if (o.degrees().size() == 1) {
          if (!(o.degrees(0) >= 0)) {
            return c.Bad("degrees",
                         std::to_string(o.degrees(0)) + " is negative (one value d means [-d, d])");
          }
          px.degrees[0] = -o.degrees(0);
          px.degrees[1] = o.degrees(0);
        } else {
          RETURN_IF_ERROR(c.Range("degrees", o.degrees(), 0, 0, px.degrees));
        }
        if (px.degrees[0] < -360 || px.degrees[1] > 360) {
          return c.Bad("degrees", "range leaves [-360, 360]");
        }
        RETURN_IF_ERROR(c.Probability("p", o.has_p(), o.p(), 1, &px.p));
        break;
      }
      case v1::TransformOp::kTrivialAugmentWide:
        px.kind = PixelOp::Kind::kTrivialAugmentWide;
        px.num_magnitude_bins = op.trivial_augment_wide().num_magnitude_bins();
        if (px.num_magnitude_bins == 0) px.num_magnitude_bins = 31;
        if (px.num_magnitude_bins < 2 || px.num_magnitude_bins > 1000) {
          return c.Bad("num_magnitude_bins",
                       std::to_string(px.num_magnitude_bins) + " is outside [2, 1000]");
        }
        break;
      case v1::TransformOp::kRandAugment: {
        const auto& o = op.rand_augment();
        px.kind = PixelOp::Kind::kRandAugment;
        px.num_ops = o.has_num_ops() ? o.num_ops() : 2;
        px.magnitude = o.has_magnitude() ? o.magnitude() : 9;
        px.num_magnitude_bins = o.num_magnitude_bins() == 0 ? 31 : o.num_magnitude_bins();
        if (px.num_ops < 0 || px.num_ops > 16) {
          return c.Bad("num_ops", std::to_string(px.num_ops) + " is outside [0, 16]");
        }
        if (px.num_magnitude_bins < 2 || px.num_magnitude_bins > 1000) {
          return c.Bad("num_magnitude_bins",
                       std::to_string(px.num_magnitude_bins) + " is outside [2, 1000]");
        }
        if (px.magnitude < 0 || px.magnitude >= px.num_magnitude_bins) {
          return c.Bad("magnitude", std::to_string(px.magnitude) + " is outside [0, " +
                                        std::to_string(px.num_magnitude_bins - 1) + "]");
        }
        break;
      }
      case v1::TransformOp::kNormalize: {
        double mean[3], stddev[3];
        RETURN_IF_ERROR(Channels(c, "mean", op.normalize().mean(), 0, mean));
        RETURN_IF_ERROR(Channels(c, "std", op.normalize().std(), 1, stddev));
        for (int ch = 0; ch < 3; ++ch) {
          if (!(stddev[ch] > 0))
            return c.Bad("std", "must be > 0 (channel " + std::to_string(ch) + ")");
          spec.output.scale[ch] = static_cast<float>(1.0 / (255.0 * stddev[ch]));
          spec.output.bias[ch] = static_cast<float>(-mean[ch] / stddev[ch]);
        }
        if (spec.normalize) return c.Bad("", "a second normalize");
        spec.normalize = true;
        normalized_by = c.prefix();
        spec.output.dtype = DType::kFloat32;  // unless an output op follows
        break;
      }
      case v1::TransformOp::kOutput: {
        const auto& o = op.output();
        if (!v1::DType_IsValid(o.dtype()))
          return c.Bad("dtype", "unknown value " + std::to_string(o.dtype()));
        if (!v1::Layout_IsValid(o.layout()))
          return c.Bad("layout", "unknown value " + std::to_string(o.layout()));
        spec.output.dtype = static_cast<DType>(o.dtype());
        spec.output.layout = static_cast<Layout>(o.layout());
        if (spec.normalize && spec.output.dtype == DType::kUint8) {
          return c.Bad("dtype", "is DTYPE_UINT8 after " + normalized_by +
                                    ": normalized values need a float dtype");
        }
        has_output = true;
        break;
      }
      case v1::TransformOp::kMixup:
      case v1::TransformOp::kCutmix: {
        const double alpha = op.has_mixup() ? op.mixup().alpha() : op.cutmix().alpha();
        const double a = alpha == 0 ? 1.0 : alpha;
        if (!(a > 0) || !std::isfinite(a))
          return c.Bad("alpha", std::to_string(alpha) + " is not > 0");
        double& slot = op.has_mixup() ? spec.mixup_alpha : spec.cutmix_alpha;
        if (slot > 0) return c.Bad("", "appears twice");
        slot = a;
        if (num_classes <= 0) {
          return c.Bad("", "needs the dataset's num_classes (labels become soft over the classes)");
        }
        break;
      }
      default:
        return c.Bad("", "unknown op");
    }
    if (geometric) {
      spec.geometry.push_back(g);
      if (g.kind == GeometryOp::Kind::kResize && g.shorter_side > 0) {
        size.reset();
        size_set_by = c.prefix();
      } else if (g.kind != GeometryOp::Kind::kFlip) {
        size = {g.height, g.width};
        size_set_by = c.prefix();
      }
    } else if (!batch_op && op.op_case() != v1::TransformOp::kNormalize &&
               op.op_case() != v1::TransformOp::kOutput) {
      spec.pixel.push_back(px);
      if (first_pixel.empty()) first_pixel = c.prefix();
    }
  }
  const std::string want = std::to_string(height) + "x" + std::to_string(width);
  if (spec.geometry.empty()) {
    return InvalidArgument("transforms: no op sets the image size (" + want +
                           "); start the list with preset: PRESET_IMAGENET_TRAIN, a crop or "
                           "resize { size }");
  }
  if (!size && size_set_by.empty()) {
    return InvalidArgument("transforms: no op sets the image size (" + want +
                           "); a flip keeps the image's own size: put preset: "
                           "PRESET_IMAGENET_TRAIN, a crop or resize { size } before it");
  }
  if (!size) {
    return InvalidArgument(size_set_by +
                           ": the list ends at a size that depends on the image; "
                           "end its geometry with a crop or resize { size } of " +
                           want);
  }
  if (size->first != height || size->second != width) {
    return InvalidArgument(size_set_by + ": makes " + std::to_string(size->first) + "x" +
                           std::to_string(size->second) +
                           " images, but the pipeline's image size "
                           "is " +
                           want + " (image_height x image_width)");
  }
  return spec;
}

}  // namespace sluice
