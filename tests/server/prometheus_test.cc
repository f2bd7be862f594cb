// PrometheusWriter: escaping, value formatting, and output that a line-by-line reader of the text
// format 0.0.4 accepts and reads back to the same families, labels and values.
#include "server/prometheus.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace sluice {
namespace {

struct ParsedSample {
  std::string name;
  PrometheusWriter::Labels labels;
  std::string value;
};

struct Parsed {
  std::map<std::string, std::string> help;  // unescaped
  std::map<std::string, std::string> type;
  std::vector<ParsedSample> samples;
};

// Reads `text` as the format requires; FAILs on the first line it does not accept, including a
// sample whose family has no HELP and TYPE before it.
Parsed ParseExposition(const std::string& text) {
  Parsed parsed;
  REQUIRE((text.empty() || text.back() == '\n'));
  std::istringstream in(text);
  std::string line, family;
  while (std::getline(in, line)) {
    INFO("line: " << line);
    if (line.rfind("# HELP ", 0) == 0) {
      std::string rest = line.substr(7);
      size_t space = rest.find(' ');
      family = rest.substr(0, space);
      REQUIRE(IsValidMetricName(family));
      REQUIRE(parsed.help.count(family) == 0);
      std::string help;
      for (size_t i = space == std::string::npos ? rest.size() : space + 1; i < rest.size(); ++i) {
        if (rest[i] == '\\') {
          REQUIRE(i + 1 < rest.size());
          char next = rest[++i];
          REQUIRE((next == '\\' || next == 'n'));
          help += next == 'n' ? '\n' : '\\';
        } else {
          help += rest[i];
        }
      }
      parsed.help[family] = help;
    } else if (line.rfind("# TYPE ", 0) == 0) {
      std::istringstream fields(line.substr(7));
      std::string name, type, extra;
      fields >> name >> type;
      REQUIRE_FALSE(fields >> extra);
      REQUIRE(name == family);
      REQUIRE((type == "counter" || type == "gauge"));
      parsed.type[name] = type;
    } else {
      REQUIRE_FALSE(line.empty());
      REQUIRE(line[0] != '#');
      ParsedSample sample;
      size_t i = 0;
      while (i < line.size() && line[i] != '{' && line[i] != ' ') sample.name += line[i++];
      REQUIRE(sample.name == family);
      REQUIRE(parsed.type.count(family) == 1);
      if (i < line.size() && line[i] == '{') {
        ++i;
        while (line.at(i) != '}') {
          std::string label, value;
          while (line.at(i) != '=') label += line[i++];
          REQUIRE(IsValidLabelName(label));
          REQUIRE(line.at(++i) == '"');
          for (++i; line.at(i) != '"'; ++i) {
            if (line[i] == '\\') {
              char next = line.at(++i);
              REQUIRE((next == '\\' || next == 'n' || next == '"'));
              value += next == 'n' ? '\n' : next;
            } else {
              value += line[i];
            }
          }
          ++i;
          if (line.at(i) == ',') ++i;
          sample.labels.emplace_back(label, value);
        }
        ++i;
      }
      REQUIRE(line.at(i) == ' ');
      sample.value = line.substr(i + 1);
      REQUIRE_FALSE(sample.value.empty());
      REQUIRE(sample.value.find(' ') == std::string::npos);
      parsed.samples.push_back(std::move(sample));
    }
  }
  return parsed;
}

TEST_CASE("EscapingTable") {
  struct Case {
    std::string in, help, label_value;
  };
  auto c = GENERATE(values<Case>({
      {"plain text", "plain text", "plain text"},
      {"a\\b", "a\\\\b", "a\\\\b"},
      {"two\nlines", "two\\nlines", "two\\nlines"},
      {"say \"hi\"", "say \"hi\"", "say \\\"hi\\\""},
      {"\\n is not a newline", "\\\\n is not a newline", "\\\\n is not a newline"},
      {"tab\tand {braces}, commas", "tab\tand {braces}, commas", "tab\tand {braces}, commas"},
      {"", "", ""},
  }));
  INFO(c.in);
  CHECK(EscapeHelp(c.in) == c.help);
  CHECK(EscapeLabelValue(c.in) == c.label_value);
}

TEST_CASE("ValueFormattingTable") {
  struct Case {
    double value;
    std::string text;
  };
  auto c = GENERATE(values<Case>({
      {0, "0"},
      {-0.0, "0"},
      {1024, "1024"},
      {-3, "-3"},
      {1e15, "1000000000000000"},
      {9007199254740993.0, "9007199254740992"},
      {1e18, "1000000000000000000"},
      {0.5, "0.5"},
      {0.1, "0.1"},
      {-2.25, "-2.25"},
      {1e20, "1e+20"},
      {2.5e-7, "2.5e-07"},
      {std::numeric_limits<double>::quiet_NaN(), "NaN"},
      {std::numeric_limits<double>::infinity(), "+Inf"},
      {-std::numeric_limits<double>::infinity(), "-Inf"},
  }));
  INFO(c.text);
  CHECK(FormatMetricValue(c.value) == c.text);
}

TEST_CASE("NameValidationTable") {
  CHECK(IsValidMetricName("sluice_batches_total"));
  CHECK(IsValidMetricName("_x"));
  CHECK(IsValidMetricName("ns:rate5m"));
  CHECK_FALSE(IsValidMetricName(""));
  CHECK_FALSE(IsValidMetricName("1abc"));
  CHECK_FALSE(IsValidMetricName("a-b"));
  CHECK_FALSE(IsValidMetricName("a b"));
  CHECK(IsValidLabelName("stream"));
  CHECK(IsValidLabelName("_a1"));
  CHECK_FALSE(IsValidLabelName("__name__"));
  CHECK_FALSE(IsValidLabelName("a:b"));
  CHECK_FALSE(IsValidLabelName("9"));
  CHECK_FALSE(IsValidLabelName(""));
}

TEST_CASE("WritesHelpAndTypeBeforeSamples") {
  PrometheusWriter w;
  w.Family("sluice_batches_total", "Batches served.\nPer stream.", MetricType::kCounter);
  w.Sample("sluice_batches_total", {{"stream", "train"}}, 1027);
  w.Sample("sluice_batches_total", {{"stream", "va\"l"}, {"host", "a\\b"}}, 3);
  w.Family("sluice_queue_fill", "", MetricType::kGauge);
  w.Sample("sluice_queue_fill", {}, 0.75);
  CHECK(w.Take() ==
        "# HELP sluice_batches_total Batches served.\\nPer stream.\n"
        "# TYPE sluice_batches_total counter\n"
        "sluice_batches_total{stream=\"train\"} 1027\n"
        "sluice_batches_total{stream=\"va\\\"l\",host=\"a\\\\b\"} 3\n"
        "# HELP sluice_queue_fill\n"
        "# TYPE sluice_queue_fill gauge\n"
        "sluice_queue_fill 0.75\n");
}

TEST_CASE("OutputParsesLineByLineAndReadsBack") {
  const std::vector<std::string> tricky = {"",          "x",      "a\\b", "q\"uote",
                                           "new\nline", "\\\"\n", "{}=,"};
  PrometheusWriter w;
  w.Family("sluice_bytes_read_total", "Bytes read from shards (\\ included).",
           MetricType::kCounter);
  for (size_t i = 0; i < tricky.size(); ++i) {
    w.Sample("sluice_bytes_read_total", {{"file", tricky[i]}, {"i", std::to_string(i)}},
             static_cast<double>(i) * 1e9);
  }
  w.Family("sluice_decode_seconds", "Last decode time.", MetricType::kGauge);
  w.Sample("sluice_decode_seconds", {}, std::nan(""));
  w.Sample("sluice_decode_seconds", {{"k", "v"}}, 0.001);
  std::string text = w.Take();

  Parsed p = ParseExposition(text);
  CHECK(p.help["sluice_bytes_read_total"] == "Bytes read from shards (\\ included).");
  CHECK(p.type["sluice_bytes_read_total"] == "counter");
  CHECK(p.type["sluice_decode_seconds"] == "gauge");
  REQUIRE(p.samples.size() == tricky.size() + 2);
  for (size_t i = 0; i < tricky.size(); ++i) {
    INFO(i);
    CHECK(p.samples[i].labels ==
          PrometheusWriter::Labels{{"file", tricky[i]}, {"i", std::to_string(i)}});
    CHECK(p.samples[i].value == FormatMetricValue(static_cast<double>(i) * 1e9));
  }
  CHECK(p.samples[tricky.size()].value == "NaN");
  CHECK(p.samples[tricky.size() + 1].value == "0.001");
}

TEST_CASE("TakeStartsOver") {
  PrometheusWriter w;
  w.Family("up", "Whether the server is up.", MetricType::kGauge);
  w.Sample("up", {}, 1);
  std::string first = w.Take();
  CHECK(w.Take().empty());
  w.Family("up", "Whether the server is up.", MetricType::kGauge);
  w.Sample("up", {}, 1);
  CHECK(w.Take() == first);
}

TEST_CASE("ContentTypeIsTextFormat004") {
  CHECK(kPrometheusContentType == "text/plain; version=0.0.4; charset=utf-8");
}

}  // namespace
}  // namespace sluice
