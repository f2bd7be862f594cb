// What a client may ask of a dataset: the server's policy on StreamRequest, apart from gRPC so that
// it is tested without a transport. Every function takes a config from ValidateServerConfig
// (server/server_config.h) and is pure: thread-safe, no I/O.
#pragma once

#include <string_view>

#include "formats/feature_schema.h"
#include "formats/status.h"
#include "sluice/v1/server_config.pb.h"
#include "sluice/v1/service.pb.h"

namespace sluice {

// The configured dataset called `name`, owned by `config`. A name that looks like a path or glob
// ('/', '\', '*', '?', '[' anywhere, or a leading '.') or is empty is InvalidArgument; a name the
// configuration lacks is NotFound listing the names it has.
Result<const v1::DatasetConfig*> FindDataset(const v1::ServerConfig& config, std::string_view name);

// The pipeline a request gets: the dataset's pipeline with the request's batch_size, image_height,
// image_width (0: image_height when that is given, else the dataset's), mode, seed (the pipeline
// seed; a dataset's explicit shuffle.seed stays), epochs, drop_remainder, shard and equal_shares
// applied. A
// request shard {i, n} subdivides the dataset's own shard {w, m}: {w + m·i, m·n}.
// InvalidArgument naming the field and the bound for: negative values; values outside the
// dataset's limits; a value other than the dataset's for a field its limits fix; a shard index
// outside [0, count) or a count over 100000; a Batch message (BatchMessageBytes) over the server's
// max_batch_bytes; a start_position with negative fields, past the last epoch, or with a nonzero
// index or end_record and a job_name (a shared job takes only an epoch's start, naming its run);
// a job_name over 128 characters or with spaces or control characters; num_consumers negative or
// over 4096, or given without a job_name or with equal_shares OFF; consumer_index outside
// [0, num_consumers) (nonzero without num_consumers).
// The pipeline is not resolved here: creating it may still refuse the request with
// ResourceExhausted when the dataset's memory budget cannot hold the batches it asks for.
// REQUIRES: dataset belongs to config; both come from ValidateServerConfig.
Result<v1::PipelineOptions> PipelineForRequest(const v1::ServerConfig& config,
                                               const v1::DatasetConfig& dataset,
                                               const v1::StreamRequest& request);

// The dataset as ListDatasets shows it. fixed_fields holds the StreamRequest field names the
// limits fix ("batch_size", "image_height", "image_width", "mode", "seed", "epochs",
// "drop_remainder"). shard_index/shard_count are the server's part of a fleet (`--shard I/N`,
// ServerConfig.fleet_shard), not the dataset's own pipeline.shard.
// REQUIRES: dataset comes from ValidateServerConfig.
// features and unlabeled as the pipeline's FeatureSchema and options say.
v1::DatasetInfo DescribeDataset(const v1::DatasetConfig& dataset, const v1::FleetShard& fleet);

// One FeatureInfo per array of the schema's batches (FeatureSchema::arrays(), in order), appended
// to *out: DatasetInfo.features and StreamPlan.features.
void DescribeFeatures(const FeatureSchema& schema,
                      google::protobuf::RepeatedPtrField<v1::FeatureInfo>* out);

}  // namespace sluice
