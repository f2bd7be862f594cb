#include "pipeline/file_list.h"

#include <charconv>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string_view>
#include <utility>

namespace sluice {
namespace {

enum class ListFormat { kCsv, kJsonLines };

constexpr std::string_view kUtf8Bom = "\xEF\xBB\xBF";

std::string_view TrimSpaces(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// "<list>:<line>: <field>: <what>".
Status Bad(const std::string& list, int64_t line, std::string_view field, std::string_view what) {
  return InvalidArgument(list + ":" + std::to_string(line) + ": " + std::string(field) + ": " +
                         std::string(what));
}

Status ParseLabel(const std::string& list, int64_t line, std::string_view text, int64_t* label) {
  text = TrimSpaces(text);
  int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    return Bad(list, line, "label", "'" + std::string(text) + "' is not an integer");
  }
  if (value < 0) return Bad(list, line, "label", std::to_string(value) + " is negative");
  *label = value;
  return Status::OK();
}

// Splits one CSV line into its fields: RFC 4180 quoting within the line (a quoted field cannot
// hold a line break).
Status SplitCsv(const std::string& list, int64_t line, std::string_view text,
                std::vector<std::string>* fields) {
  fields->clear();
  size_t i = 0;
  for (;;) {
    std::string field;
    if (i < text.size() && text[i] == '"') {
      for (++i;; ++i) {
        if (i >= text.size()) return Bad(list, line, "path", "unterminated quoted field");
        if (text[i] != '"') {
          field.push_back(text[i]);
        } else if (i + 1 < text.size() && text[i + 1] == '"') {
          field.push_back('"');
          ++i;
        } else {
          ++i;
          break;
        }
      }
      if (i < text.size() && text[i] != ',') {
        return Bad(list, line, "path", "text after a quoted field's closing quote");
      }
    } else {
      const size_t comma = text.find(',', i);
      const size_t end = comma == std::string_view::npos ? text.size() : comma;
      field.assign(text.substr(i, end - i));
      if (field.find('"') != std::string::npos) {
        return Bad(list, line, fields->empty() ? "path" : "label",
                   "a quote inside an unquoted field (quote the whole field)");
      }
      i = end;
    }
    fields->push_back(std::move(field));
    if (i >= text.size()) return Status::OK();
    ++i;  // the comma
  }
}

Status ParseCsvLine(const std::string& list, int64_t line, std::string_view text, ListLabels labels,
                    std::vector<std::string>* fields, ListedFile* out) {
  RETURN_IF_ERROR(SplitCsv(list, line, text, fields));
  if (labels == ListLabels::kIgnore) {
    if (fields->size() > 2) {
      return Bad(list, line, "path",
                 "expected 1 or 2 fields \"path\" or \"path,label\", found " +
                     std::to_string(fields->size()));
    }
    out->path = std::move((*fields)[0]);
    return Status::OK();
  }
  if (fields->size() != 2) {
    return Bad(list, line, fields->size() < 2 ? "label" : "path",
               "expected 2 fields \"path,label\", found " + std::to_string(fields->size()));
  }
  out->path = std::move((*fields)[0]);
  return ParseLabel(list, line, (*fields)[1], &out->label);
}

Status ParseJsonLine(const std::string& list, int64_t line, std::string_view text,
                     ListLabels labels, ListedFile* out) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return Bad(list, line, "line",
               "not a JSON object {\"path\": ..., \"label\": ...} (a list is one object per line)");
  }
  const auto path = j.find("path");
  if (path == j.end()) return Bad(list, line, "path", "missing");
  if (!path->is_string()) return Bad(list, line, "path", "not a string");
  out->path = path->get<std::string>();
  if (labels == ListLabels::kIgnore) return Status::OK();
  const auto label = j.find("label");
  if (label == j.end()) return Bad(list, line, "label", "missing");
  if (label->is_number_unsigned()) {
    if (label->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      return Bad(list, line, "label", label->dump() + " is too large");
    }
    out->label = label->get<int64_t>();
    return Status::OK();
  }
  if (label->is_number_integer()) {
    return Bad(list, line, "label", label->dump() + " is negative");
  }
  return Bad(list, line, "label", label->dump() + " is not an integer");
}

}  // namespace

Result<std::vector<ListedFile>> ReadFileList(const std::string& list_path, ListLabels labels) {
  const std::filesystem::path list(list_path);
  std::string ext = list.extension().string();
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  ListFormat format;
  if (ext == ".csv") {
    format = ListFormat::kCsv;
  } else if (ext == ".jsonl" || ext == ".json") {
    format = ListFormat::kJsonLines;
  } else {
    return InvalidArgument("file_list: " + list_path +
                           ": not a .csv, .jsonl or .json list (its extension says which)");
  }
  std::ifstream in(list_path, std::ios::binary);
  if (!in) return ErrnoStatus(errno, "open", list_path);
  const std::filesystem::path folder = list.parent_path();
  std::vector<ListedFile> out;
  std::vector<std::string> fields;
  std::string text;
  int64_t line = 0;
  while (std::getline(in, text)) {
    ++line;
    if (!text.empty() && text.back() == '\r') text.pop_back();
    // Excel's "CSV UTF-8" (and some JSON writers) start the file with a UTF-8 byte order mark.
    if (line == 1 && text.rfind(kUtf8Bom, 0) == 0) text.erase(0, kUtf8Bom.size());
    if (TrimSpaces(text).empty()) continue;
    if (format == ListFormat::kCsv && out.empty() &&
        (TrimSpaces(text) == "path,label" ||
         (labels == ListLabels::kIgnore && TrimSpaces(text) == "path"))) {
      continue;
    }
    ListedFile f;
    f.line = line;
    if (format == ListFormat::kCsv) {
      RETURN_IF_ERROR(ParseCsvLine(list_path, line, text, labels, &fields, &f));
    } else {
      RETURN_IF_ERROR(ParseJsonLine(list_path, line, text, labels, &f));
    }
    if (f.path.empty()) return Bad(list_path, line, "path", "empty");
    std::filesystem::path path(f.path);
    if (path.is_relative()) path = folder / path;
    f.path = path.lexically_normal().string();
    out.push_back(std::move(f));
  }
  if (in.bad()) return ErrnoStatus(errno, "read", list_path);
  if (out.empty()) return InvalidArgument("file_list: " + list_path + " lists no file");
  return out;
}

}  // namespace sluice
