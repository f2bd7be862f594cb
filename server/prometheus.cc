#include "server/prometheus.h"

#include <cassert>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <set>

namespace sluice {
namespace {

bool IsAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

std::string Escape(std::string_view in, bool quote) {
  std::string out;
  out.reserve(in.size());
  for (char c : in) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '"':
        out += quote ? "\\\"" : "\"";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace

bool IsValidMetricName(std::string_view name) {
  if (name.empty() || IsDigit(name[0])) return false;
  for (char c : name) {
    if (!IsAlpha(c) && !IsDigit(c) && c != '_' && c != ':') return false;
  }
  return true;
}

bool IsValidLabelName(std::string_view name) {
  if (name.empty() || IsDigit(name[0]) || name.substr(0, 2) == "__") return false;
  for (char c : name) {
    if (!IsAlpha(c) && !IsDigit(c) && c != '_') return false;
  }
  return true;
}

std::string EscapeHelp(std::string_view help) { return Escape(help, /*quote=*/false); }

std::string EscapeLabelValue(std::string_view value) { return Escape(value, /*quote=*/true); }

std::string FormatMetricValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  // 2^63 is exactly representable; every integral double below it in magnitude fits in int64.
  constexpr double kTwo63 = 9223372036854775808.0;
  if (value == std::trunc(value) && value > -kTwo63 && value < kTwo63) {
    return std::to_string(static_cast<int64_t>(value));
  }
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), value);
  assert(ec == std::errc());
  return std::string(buf, end);
}

void PrometheusWriter::Family(std::string_view name, std::string_view help, MetricType type) {
  assert(IsValidMetricName(name));
  [[maybe_unused]] bool inserted = families_.emplace(name).second;
  assert(inserted && "metric family written twice");
  family_ = name;
  out_ += "# HELP ";
  out_ += name;
  if (!help.empty()) {
    out_ += ' ';
    out_ += EscapeHelp(help);
  }
  out_ += "\n# TYPE ";
  out_ += name;
  out_ += type == MetricType::kCounter ? " counter\n" : " gauge\n";
}

void PrometheusWriter::Sample(std::string_view name, const Labels& labels, double value) {
  assert(!family_.empty() && name == family_);
  out_ += name;
  if (!labels.empty()) {
#ifndef NDEBUG
    std::set<std::string_view> seen;
#endif
    char sep = '{';
    for (const auto& [label, label_value] : labels) {
      assert(IsValidLabelName(label));
      assert(seen.insert(label).second && "label given twice");
      out_ += sep;
      out_ += label;
      out_ += "=\"";
      out_ += EscapeLabelValue(label_value);
      out_ += '"';
      sep = ',';
    }
    out_ += '}';
  }
  out_ += ' ';
  out_ += FormatMetricValue(value);
  out_ += '\n';
}

std::string PrometheusWriter::Take() {
  std::string out = std::move(out_);
  out_.clear();
  family_.clear();
  families_.clear();
  return out;
}

}  // namespace sluice
