// What `sluice serve` shows over plain HTTP on its metrics address: /metrics (Prometheus text
// format), /healthz, and / (a status page a person can read). Built from the same v1::Stats that
// GetStats returns. Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <string>

#include "server/http_server.h"
#include "server/job_registry.h"
#include "server/memory_limit.h"
#include "sluice/v1/server_config.pb.h"

namespace sluice {

class StatusPages {
 public:
  // registry outlives this. limit: the memory limit the server found at start (shown on / and
  // as sluice_memory_limit_bytes). starts_in_flight: GetStats' starts_in_flight (DataService's),
  // any thread.
  StatusPages(const JobRegistry* registry, MemoryLimit limit,
              std::function<int()> starts_in_flight);

  HttpResponse Handle(const HttpRequest& request);

  // /healthz answers 503 from now on (the server is draining).
  void SetDraining() { draining_ = true; }

  std::string Metrics();
  std::string StatusText();

 private:
  std::map<std::string, double> ScrapeRates(const v1::Stats& stats);

  const JobRegistry* registry_;
  const MemoryLimit limit_;
  const std::function<int()> starts_in_flight_;
  std::atomic<bool> draining_{false};

  // Images served per dataset at the previous scrape, for an images/s over the last interval.
  std::mutex mu_;
  std::chrono::steady_clock::time_point last_scrape_;        // guarded by mu_
  std::map<std::string, uint64_t> last_images_;               // guarded by mu_
  std::map<std::string, double> rate_;                        // guarded by mu_
};

}  // namespace sluice
