#include "server/request_policy.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include <fmt/format.h>

#include "pipeline/transform_spec.h"
#include "pipeline/tunables.h"
#include "server/format_bytes.h"
#include "server/server_config.h"

namespace sluice {
namespace {

// A request subdivides the dataset's own shards at most this finely; the product of both stays
// within the pipeline's shard.count bound (pipeline/tunables.h).
constexpr int64_t kMaxRequestShards = 100000;
constexpr size_t kMaxJobName = 128;
// Consumers of one job in lockstep at most: each holds a slot (and its held batches) in the job;
// far more than any data-parallel group of ranks and loader workers asks for.
constexpr int kMaxJobConsumers = 4096;
// Client-supplied names are echoed in errors at most this long.
constexpr size_t kMaxEcho = 80;

// `text` as an error message may quote it: control bytes as \xNN, cut at kMaxEcho.
std::string Echo(std::string_view text) {
  std::string out;
  for (char c : text.substr(0, kMaxEcho)) {
    if (c >= ' ' && c <= '~') {
      out += c;
    } else {
      out += fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
    }
  }
  if (text.size() > kMaxEcho) out += "...";
  return out;
}

// The StreamRequest fields a dataset's limits may fix, each with the flag that fixes it: what
// ListDatasets reports as fixed_fields.
struct Fixable {
  std::string_view field;
  bool (v1::ClientLimits::*fixed)() const;
};
constexpr Fixable kFixable[] = {
    {"batch_size", &v1::ClientLimits::fix_batch_size},
    {"image_height", &v1::ClientLimits::fix_image_size},
    {"image_width", &v1::ClientLimits::fix_image_size},
    {"mode", &v1::ClientLimits::fix_mode},
    {"seed", &v1::ClientLimits::fix_seed},
    {"epochs", &v1::ClientLimits::fix_epochs},
    {"drop_remainder", &v1::ClientLimits::fix_drop_remainder},
};

Status Fixed(std::string_view field, std::string_view value) {
  return InvalidArgument(fmt::format("{} is fixed by this dataset ({})", field, value));
}

Status Negative(std::string_view field, int64_t value) {
  return InvalidArgument(fmt::format("{} {} is negative", field, value));
}

Status CheckImageSize(std::string_view field, int value, const v1::ClientLimits& limits) {
  if (value < limits.min_image_size()) {
    return InvalidArgument(
        fmt::format("{} {} is under the minimum {}", field, value, limits.min_image_size()));
  }
  if (value > limits.max_image_size()) {
    return InvalidArgument(
        fmt::format("{} {} is over the maximum {}", field, value, limits.max_image_size()));
  }
  return Status::OK();
}

Status ApplyShard(const v1::ShardOptions& shard, v1::PipelineOptions* o) {
  if (shard.count() < 0) return Negative("shard.count", shard.count());
  if (shard.count() > kMaxRequestShards) {
    return InvalidArgument(
        fmt::format("shard.count {} is over {}", shard.count(), kMaxRequestShards));
  }
  const int64_t count = std::max(1, shard.count());
  if (shard.index() < 0 || shard.index() >= count) {
    return InvalidArgument(fmt::format("shard.index {} is outside [0, {})", shard.index(), count));
  }
  if (count == 1) return Status::OK();
  const int64_t server_count = std::max(1, o->shard().count());
  const int64_t total = server_count * count;
  const int64_t max_shards = Spec(Tunable::kShardCount).max;
  if (total > max_shards) {
    return InvalidArgument(
        fmt::format("shard.count {} within this server's own {} shards makes {}, over {}", count,
                    server_count, total, max_shards));
  }
  o->mutable_shard()->set_index(
      static_cast<int>(o->shard().index() + server_count * shard.index()));
  o->mutable_shard()->set_count(static_cast<int>(total));
  return Status::OK();
}

Status CheckStartPosition(const v1::StreamRequest& r, const v1::PipelineOptions& o) {
  if (!r.has_start_position()) return Status::OK();
  const v1::Position& p = r.start_position();
  if (p.epoch() < 0) return Negative("start_position.epoch", p.epoch());
  if (p.index() < 0) return Negative("start_position.index", p.index());
  if (p.end_record() < 0) return Negative("start_position.end_record", p.end_record());
  if ((p.index() != 0 || p.end_record() != 0) && !r.job_name().empty()) {
    return InvalidArgument(fmt::format(
        "start_position.index {} / end_record {}: a shared job takes only an epoch's start "
        "(epoch, 0, 0), naming its run from that epoch; index and end_record resume private "
        "streams",
        p.index(), p.end_record()));
  }
  if (o.epochs() > 0 && p.epoch() >= o.epochs()) {
    return InvalidArgument(fmt::format("start_position.epoch {} is past the stream's {} epochs",
                                       p.epoch(), o.epochs()));
  }
  return Status::OK();
}

// A shared job's consumers in lockstep (StreamRequest.num_consumers); o: the resolved pipeline.
Status CheckConsumers(const v1::StreamRequest& r, const v1::PipelineOptions& o) {
  const int n = r.num_consumers();
  if (n < 0) return Negative("num_consumers", n);
  if (n > kMaxJobConsumers) {
    return InvalidArgument(fmt::format("num_consumers {} is over {}", n, kMaxJobConsumers));
  }
  if (n == 0) {
    if (r.consumer_index() == 0) return Status::OK();
    return InvalidArgument(fmt::format(
        "consumer_index {} without num_consumers: it names one of a job's num_consumers "
        "consumers in lockstep",
        r.consumer_index()));
  }
  if (r.consumer_index() < 0 || r.consumer_index() >= n) {
    return InvalidArgument(
        fmt::format("consumer_index {} is outside [0, {}) (num_consumers)", r.consumer_index(), n));
  }
  if (r.job_name().empty()) {
    return InvalidArgument(fmt::format(
        "num_consumers {} needs a job_name: consumers in lockstep share one named job", n));
  }
  if (o.equal_shares() == v1::EQUAL_SHARES_OFF) {
    // OFF is the request's, or the dataset's when the request leaves it unset.
    return InvalidArgument(fmt::format(
        "num_consumers {} with equal_shares OFF{}: consumers in lockstep get equal shares; ask "
        "for DROP or PAD",
        n,
        r.has_equal_shares()
            ? ""
            : fmt::format(" (dataset '{}' sets it; the request left it unset)", r.dataset())));
  }
  return Status::OK();
}

}  // namespace

Result<const v1::DatasetConfig*> FindDataset(const v1::ServerConfig& config,
                                             std::string_view name) {
  if (name.empty()) {
    return InvalidArgument("dataset: no name given; ListDatasets shows this server's datasets");
  }
  if (name.front() == '.' || name.find_first_of("/\\*?[") != std::string_view::npos) {
    return InvalidArgument(fmt::format(
        "dataset names are names from the server's configuration, not paths or globs: '{}'; "
        "ListDatasets shows them",
        Echo(name)));
  }
  std::string names;
  for (const v1::DatasetConfig& d : config.datasets()) {
    if (d.name() == name) return &d;
    names += (names.empty() ? "" : ", ") + d.name();
  }
  return NotFound(fmt::format("no dataset '{}'; this server has: {}", Echo(name), names));
}

Result<v1::PipelineOptions> PipelineForRequest(const v1::ServerConfig& config,
                                               const v1::DatasetConfig& dataset,
                                               const v1::StreamRequest& r) {
  v1::PipelineOptions o = dataset.pipeline();
  const v1::ClientLimits& limits = dataset.limits();

  if (r.batch_size() < 0) return Negative("batch_size", r.batch_size());
  if (r.batch_size() > 0) {
    if (limits.fix_batch_size() && r.batch_size() != o.batch_size()) {
      return Fixed("batch_size", std::to_string(o.batch_size()));
    }
    if (r.batch_size() > limits.max_batch_size()) {
      return InvalidArgument(fmt::format("batch_size {} is over this dataset's limit {}",
                                         r.batch_size(), limits.max_batch_size()));
    }
    o.set_batch_size(r.batch_size());
  }

  if (r.image_height() < 0) return Negative("image_height", r.image_height());
  if (r.image_width() < 0) return Negative("image_width", r.image_width());
  const int height = r.image_height() > 0 ? r.image_height() : o.image_height();
  const int asked_width = WidthOrHeight(r.image_width(), r.image_height());
  const int width = asked_width > 0 ? asked_width : o.image_width();
  if (limits.fix_image_size()) {
    if (height != o.image_height()) return Fixed("image_height", std::to_string(o.image_height()));
    if (width != o.image_width()) return Fixed("image_width", std::to_string(o.image_width()));
  }
  RETURN_IF_ERROR(CheckImageSize("image_height", height, limits));
  RETURN_IF_ERROR(CheckImageSize("image_width", width, limits));
  o.set_image_height(height);
  o.set_image_width(width);

  if (r.has_mode()) {
    if (!v1::Mode_IsValid(r.mode())) {
      return InvalidArgument(fmt::format("mode {} is not a sluice.v1.Mode", r.mode()));
    }
    if (limits.fix_mode() && r.mode() != o.mode()) return Fixed("mode", v1::Mode_Name(o.mode()));
    o.set_mode(r.mode());
  }
  if (r.has_seed()) {
    if (limits.fix_seed() && r.seed() != o.seed()) return Fixed("seed", std::to_string(o.seed()));
    o.set_seed(r.seed());
  }
  if (r.has_epochs()) {
    if (r.epochs() < 0) return Negative("epochs", r.epochs());
    const int64_t max_epochs = Spec(Tunable::kEpochs).max;
    if (r.epochs() > max_epochs) {
      return InvalidArgument(fmt::format("epochs {} is over {}", r.epochs(), max_epochs));
    }
    if (limits.fix_epochs() && r.epochs() != o.epochs()) {
      return Fixed("epochs", std::to_string(o.epochs()));
    }
    o.set_epochs(r.epochs());
  }
  if (r.has_drop_remainder()) {
    if (limits.fix_drop_remainder() && r.drop_remainder() != o.drop_remainder()) {
      return Fixed("drop_remainder", o.drop_remainder() ? "true" : "false");
    }
    o.set_drop_remainder(r.drop_remainder());
  }
  if (r.has_shard()) RETURN_IF_ERROR(ApplyShard(r.shard(), &o));
  // Equal shares balance the request's consumers only: the server's own part is read whole by
  // whoever fans in from the fleet (config.proto ShardOptions.consumers).
  if (o.shard().count() > 1) o.mutable_shard()->set_consumers(std::max(1, r.shard().count()));
  if (r.has_equal_shares()) {
    if (!v1::EqualShares_IsValid(r.equal_shares())) {
      return InvalidArgument(
          fmt::format("equal_shares {} is not a sluice.v1.EqualShares", r.equal_shares()));
    }
    o.set_equal_shares(r.equal_shares());
  }

  if (r.job_name().size() > kMaxJobName ||
      std::any_of(r.job_name().begin(), r.job_name().end(),
                  [](char c) { return c <= ' ' || c > '~'; })) {
    return InvalidArgument(
        fmt::format("job_name '{}' is not at most {} printable ASCII characters without spaces",
                    Echo(r.job_name()), kMaxJobName));
  }
  RETURN_IF_ERROR(CheckStartPosition(r, o));
  RETURN_IF_ERROR(CheckConsumers(r, o));
  // Labels past the dataset's classes are bad records, as negative ones are.
  if (o.num_classes() == 0) o.set_num_classes(dataset.num_classes());

  if (!r.transform_set().empty() && r.transform_set() != kDefaultTransformSet) {
    const v1::TransformSet* chosen = nullptr;
    std::string offered(kDefaultTransformSet);
    for (const v1::TransformSet& set : dataset.transform_sets()) {
      if (set.name() == r.transform_set()) chosen = &set;
      offered += ", " + set.name();
    }
    if (chosen == nullptr) {
      return InvalidArgument(fmt::format(
          "transform_set '{}' is not offered by dataset '{}'; it offers: {}",
          Echo(r.transform_set()), dataset.name(), offered));
    }
    *o.mutable_transforms() = chosen->transforms();
  }
  // What the chosen list makes (an empty list: mode's preset, uint8).
  DType dtype = DType::kUint8;
  if (!o.transforms().empty()) {
    // mode picks the recipe of an empty list only: asking another of a list would be ignored.
    if (r.has_mode() && r.mode() != dataset.pipeline().mode()) {
      return InvalidArgument(fmt::format(
          "mode {}: transform set '{}' of dataset '{}' is a transform list, which mode does not "
          "change; choose another transform_set (ListDatasets lists them)",
          v1::Mode_Name(r.mode()),
          r.transform_set().empty() ? kDefaultTransformSet : r.transform_set(), dataset.name()));
    }
    // Checked at this request's image size (the configuration checked the dataset's).
    Result<TransformSpec> spec = CompileTransforms(o.transforms(), o.mode() == v1::MODE_EVAL,
                                                   height, width, o.num_classes());
    if (!spec.ok()) {
      return spec.status().WithContext(fmt::format(
          "transform_set '{}' at {}x{}",
          r.transform_set().empty() ? kDefaultTransformSet : r.transform_set(), height, width));
    }
    dtype = spec->output.dtype;
  }

  ASSIGN_OR_RETURN(const FeatureSchema features, CompileFeatureSchema(o));
  const int64_t bytes = BatchMessageBytes(o.batch_size(), height, width, DTypeSize(dtype)) +
                        FeatureMessageBytes(features, o.batch_size());
  if (bytes > config.max_batch_bytes()) {
    return InvalidArgument(fmt::format(
        "a batch of {} at {}x{}{} is {}, over the server's max_batch_bytes {}; ask for a smaller "
        "batch or image",
        o.batch_size(), height, width,
        features.empty() ? ""
                         : fmt::format(" with features of up to {} a sample",
                                       FormatBytes(features.slot_bytes())),
        FormatBytes(bytes), FormatBytes(config.max_batch_bytes())));
  }
  return o;
}

v1::DatasetInfo DescribeDataset(const v1::DatasetConfig& dataset, const v1::FleetShard& fleet) {
  const v1::PipelineOptions& o = dataset.pipeline();
  const v1::ClientLimits& limits = dataset.limits();
  v1::DatasetInfo info;
  info.set_name(dataset.name());
  info.set_files(o.files_size());
  info.set_num_classes(dataset.num_classes());
  // What a request that leaves a field unset gets: loading the config (CheckDataset) filled in
  // the defaults.
  info.set_batch_size(o.batch_size());
  info.set_image_height(o.image_height());
  info.set_image_width(o.image_width());
  info.set_mode(o.mode());
  info.set_max_batch_size(limits.max_batch_size());
  info.set_min_image_size(limits.min_image_size());
  info.set_max_image_size(limits.max_image_size());
  for (const Fixable& f : kFixable) {
    if ((limits.*f.fixed)()) info.add_fixed_fields(std::string(f.field));
  }
  // The server's part of a fleet only: a dataset's own pipeline.shard is how this server reads
  // its files, and a client fanning in from it alone has the whole of what it serves.
  if (fleet.count() > 1) {
    info.set_shard_index(fleet.index());
    info.set_shard_count(fleet.count());
  }
  v1::TransformSet* own = info.add_transform_sets();
  own->set_name(std::string(kDefaultTransformSet));
  *own->mutable_transforms() = o.transforms();
  if (o.transforms().empty()) {
    own->add_transforms()->set_preset(o.mode() == v1::MODE_EVAL ? v1::PRESET_IMAGENET_EVAL
                                                                : v1::PRESET_IMAGENET_TRAIN);
  }
  for (const v1::TransformSet& set : dataset.transform_sets()) *info.add_transform_sets() = set;
  // Loading the config compiled the schema: it does not fail here.
  if (Result<FeatureSchema> features = CompileFeatureSchema(o); features.ok()) {
    DescribeFeatures(*features, info.mutable_features());
  }
  info.set_unlabeled(o.unlabeled());
  return info;
}

void DescribeFeatures(const FeatureSchema& schema,
                      google::protobuf::RepeatedPtrField<v1::FeatureInfo>* out) {
  for (const ArrayInfo& a : schema.arrays()) {
    v1::FeatureInfo* info = out->Add();
    info->set_name(a.name);
    info->set_type(static_cast<v1::FeatureType>(a.type));
    info->set_ragged(a.ragged);
    info->mutable_row_shape()->Add(a.row_shape.begin(), a.row_shape.end());
  }
}

}  // namespace sluice
