// Writes metrics in the Prometheus text exposition format, version 0.0.4:
//   # HELP sluice_batches_total Batches served.
//   # TYPE sluice_batches_total counter
//   sluice_batches_total{stream="train"} 1027
// Metric and label names are ours, not user input: invalid ones are programming errors, caught by
// assert() in debug builds. Label values and help text may be anything; they are escaped.
#pragma once

#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

namespace sluice {

// The Content-Type to serve PrometheusWriter's output with.
inline constexpr std::string_view kPrometheusContentType =
    "text/plain; version=0.0.4; charset=utf-8";

enum class MetricType { kCounter, kGauge };

// [a-zA-Z_:][a-zA-Z0-9_:]*
bool IsValidMetricName(std::string_view name);
// [a-zA-Z_][a-zA-Z0-9_]*, not starting with "__" (reserved for Prometheus itself).
bool IsValidLabelName(std::string_view name);

// Escaping as the format requires: help text escapes '\' and newline; label values also '"'.
std::string EscapeHelp(std::string_view help);
std::string EscapeLabelValue(std::string_view value);
// "NaN", "+Inf", "-Inf"; integral values in int64 range as plain integers ("1024", never
// "1.024e+03"); anything else as the shortest decimal that reads back as the same double.
std::string FormatMetricValue(double value);

// Builds one scrape's text. Not thread-safe; one writer per scrape.
class PrometheusWriter {
 public:
  using Labels = std::vector<std::pair<std::string, std::string>>;

  // Starts a metric family: its HELP and TYPE lines. Samples that follow belong to it.
  // REQUIRES: IsValidMetricName(name); no earlier Family() with the same name since Take().
  void Family(std::string_view name, std::string_view help, MetricType type);

  // One sample line of the current family; labels are written in the order given.
  // REQUIRES: name is the current family's name; every label name IsValidLabelName and appears
  // once.
  void Sample(std::string_view name, const Labels& labels, double value);

  // Returns the text written so far and starts over.
  std::string Take();

 private:
  std::string out_;
  std::string family_;                        // the current family's name
  std::unordered_set<std::string> families_;  // every family since Take()
};

}  // namespace sluice
