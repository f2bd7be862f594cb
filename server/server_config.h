// The configuration `sluice serve` runs with (proto/sluice/v1/server_config.proto; DESIGN.md
// "Configuration"): loaded from a text-format file or made from `--files`, then validated once at
// start-up. A validated config has every default written in and every dataset's file list expanded,
// so the server never expands a pattern at request time and a client can never make it open a file
// the configuration did not name.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "formats/feature_schema.h"
#include "formats/status.h"
#include "server/memory_limit.h"
#include "sluice/v1/server_config.pb.h"

namespace sluice {

inline constexpr char kDefaultListen[] = "127.0.0.1:50051";
// The server's memory budget when the machine's memory limit cannot be read (DefaultMemoryBudget).
inline constexpr int64_t kDefaultServerMemoryBudget = int64_t{8} << 30;
// A dataset's pipeline budget unless its config says otherwise (and at most the server's budget):
// less than the library's 4 GiB, so that a server runs several jobs at once.
inline constexpr int64_t kDefaultDatasetMemoryBudget = int64_t{1} << 30;
inline constexpr int kDefaultMaxStreams = 64;
inline constexpr int64_t kDefaultMaxBatchBytes = int64_t{256} << 20;
inline constexpr int kDefaultJobLingerSeconds = 30;
// All same-host streams' shared-memory segments together, at most (DefaultMaxSharedMemory).
inline constexpr int64_t kDefaultMaxSharedMemoryBytes = int64_t{2} << 30;
inline constexpr int kDefaultMaxBatchSize = 1024;
inline constexpr int kDefaultMinImageSize = 32;
inline constexpr int kDefaultMaxImageSize = 1024;

// The defaults derived from the memory this process may use. Segments (memfds) and the memory
// budget are both charged to the process's cgroup, so the shared-memory cap comes out of the limit
// first: min(2 GiB, a quarter of the limit), and the budget is half of what is left. Unknown
// limit: 2 GiB and 8 GiB.
int64_t DefaultMaxSharedMemory(const MemoryLimit& limit);
int64_t DefaultMemoryBudget(const MemoryLimit& limit, int64_t max_shared_memory_bytes);

// Reads and validates (ValidateServerConfig) a text-format ServerConfig. Syntax errors are
// InvalidArgument "PATH:LINE:COLUMN: message".
Result<v1::ServerConfig> LoadServerConfig(const std::string& path, const MemoryLimit& limit,
                                          std::vector<std::string>* warnings = nullptr);

// `sluice serve --files GLOB... | --file-list LIST [--name NAME] [--port PORT]`: one dataset with
// default options, listening on 127.0.0.1:PORT; `metrics_address` may be empty (no metrics
// endpoint). Validated.
Result<v1::ServerConfig> QuickServerConfig(const MemoryLimit& limit,
                                           const std::vector<std::string>& file_globs,
                                           const std::string& name = "train", int port = 50051,
                                           const std::string& metrics_address = "",
                                           const std::string& file_list = "");

// Applies the defaults the proto's comments give and checks the whole config against `limit`, the
// memory this process may use (DetectMemoryLimit, read once by the caller). On success:
//  - max_shared_memory_bytes is DefaultMaxSharedMemory(limit) unless configured, and
//    memory_budget_bytes DefaultMemoryBudget(limit, that) unless configured;
//  - listen, max_streams, max_batch_bytes, threads and job_linger_seconds
//    hold their effective values;
//  - every dataset's limits hold their effective values, and its pipeline has batch_size,
//    image_height, image_width and memory_budget_bytes set;
//  - every dataset's pipeline.files is the sorted list of regular files its patterns matched, each
//    escaped (\ * ? [ ] { } ~ get a backslash) so that glob() matches exactly that file (and
//    ExpandGlobs takes it as that path, so one deleted later is a bad record, not a refused
//    stream); every dataset's file_list is absolute and frozen as read now (FreezeFileList);
//  - a dataset of files labelled by folder without num_classes has as many as folders;
// Errors name the dataset and field, e.g. `datasets["train"].pipeline.batch_size: 5000 is over
// limits.max_batch_size 1024`: InvalidArgument; NotFound for a pattern or file that does not
// exist; FailedPrecondition for one that cannot be read; ResourceExhausted when a dataset's
// memory budget cannot hold its batch pool (ResolveOptions). When memory_budget_bytes plus
// max_shared_memory_bytes (unless shared memory is disabled) is over a cgroup limit, the kernel
// would kill the server before the budget refused anything: InvalidArgument naming the limit and
// its file. Over physical memory (MemTotal is under the installed memory, and swap may be there)
// it is a line in *warnings instead, when warnings is given.
Result<v1::ServerConfig> ValidateServerConfig(v1::ServerConfig config, const MemoryLimit& limit,
                                              std::vector<std::string>* warnings = nullptr);

// The bearer token clients must send: token_file's contents with surrounding whitespace trimmed;
// empty when token_file is. InvalidArgument when the file holds no token or a token with spaces or
// control characters (it travels in an HTTP header).
Result<std::string> ReadToken(const v1::ServerConfig& config);

// An upper bound on the serialized size of a Batch message of `batch` images of height x width:
// the pixels, 10 bytes per label (a negative int32 varint) and 128 for position, shape and tags.
// value_bytes: of one image value (DTypeSize of the output dtype). Per sample, 40 bytes more at
// most: a label, a valid flag, record ids, a mixed label and its weight.
int64_t BatchMessageBytes(int64_t batch, int64_t height, int64_t width, size_t value_bytes = 1);
// The most bytes a batch of `batch` samples adds to its message with Batch.features
// (EncodeFeatureArrays), each sample's features within the schema's slot_bytes(); 0 without
// features.
int64_t FeatureMessageBytes(const FeatureSchema& schema, int64_t batch);

// The name of a dataset's own transform list (pipeline.transforms) among its transform sets.
inline constexpr std::string_view kDefaultTransformSet = "default";

}  // namespace sluice
