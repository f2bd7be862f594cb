// A list of image files with their labels (PipelineOptions.file_list): CSV "path,label" lines (an
// optional header line "path,label"; a field may be double-quoted, "" inside it standing for one
// quote) or JSON lines {"path": ..., "label": ...} (other keys ignored); for an unlabeled dataset
// bare paths (ListLabels::kIgnore). The format is chosen by the list's
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

// Whether a list's lines carry labels (PipelineOptions.unlabeled: kIgnore).
enum class ListLabels {
  kRead,    // every line "path,label" / {"path", "label"}
  kIgnore,  // a CSV line is "path" (header "path") or "path,label", a JSON line may lack
            // "label": a label given is not read, each entry's label is 0
};

// The list's entries in its order. Errors name "<list>:<line>: <field>": a line that does not
// parse, a missing or empty path, a label (when read) that is not an integer or is negative.
// Whether the listed files exist is not checked here.
Result<std::vector<ListedFile>> ReadFileList(const std::string& list_path,
                                             ListLabels labels = ListLabels::kRead);

}  // namespace sluice
