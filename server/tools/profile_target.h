// `sluice profile --target HOST:PORT --dataset NAME`: measures a running `sluice serve` from the
// client side (img/s, MB/s, per-batch wait percentiles) and reads the server's own view of the
// job it got (stage load via GetStats); printed as a table, or as JSON with --json.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace sluice {

struct RemoteProfileFlags {
  std::vector<std::string> targets;  // several: fan-in, one stream per server
  std::string dataset;
  std::string token_file;
  std::string tls_ca_file;
  std::string job_name;
  std::string transform_set;  // "": the dataset's default set
  // With job_name: this consumer's index among the job's num_consumers in lockstep (0: none).
  int consumer_index = 0;
  int num_consumers = 0;
  int batch_size = 0;  // 0: the dataset's
  int height = 0;
  int width = 0;
  std::string mode;    // "": the dataset's
  std::optional<uint64_t> seed;
  int prefetch = 0;    // client read-ahead per server; 0: the client's default
  int64_t batches = 0;
  double seconds = 0;
  int64_t warmup_batches = 2;
  bool json = false;
  bool shared_memory = true;  // ClientOptions::shared_memory
  bool allow_partial_fleet = false;  // ClientOptions::allow_partial_fleet
};

// Exit status: 0, or 1 with the server's status on stderr.
int RunRemoteProfile(const RemoteProfileFlags& flags);

}  // namespace sluice
