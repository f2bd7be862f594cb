// A list of image files with their labels (PipelineOptions.file_list): CSV "path,label" lines (an
// optional header line "path,label"; a field may be double-quoted, "" inside it standing for one
// quote) or JSON lines {"path": ..., "label": ...} (other keys ignored), chosen by the list's
// extension: .csv, or .jsonl / .json. A leading UTF-8 byte order mark (Excel's "CSV UTF-8") is
// ignored, blank lines are skipped; relative paths are taken from the list's folder.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "formats/status.h"

namespace sluice {

struct ListedFile {
  std::string path;  // relative ones joined to the list's folder
  int64_t label = 0;
  int64_t line = 0;  // 1-based line of the list it came from
};

// The list's entries in its order. Errors name "<list>:<line>: <field>": a line that does not
// parse, a missing or empty path, a label that is not an integer or is negative. Whether the
// listed files exist is not checked here.
Result<std::vector<ListedFile>> ReadFileList(const std::string& list_path);

}  // namespace sluice
