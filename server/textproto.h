// Protobuf text format files (`sluice serve --config`, `sluice profile --options`), with errors
// that point at the offending line and column.
#pragma once

#include <string>

#include <google/protobuf/message.h>

#include "formats/status.h"

namespace sluice {

// Replaces *out with the text-format message in the file at `path`. Unknown fields and syntax
// errors are InvalidArgument "PATH:LINE:COLUMN: message" (1-based, the first error only); a file
// that cannot be read keeps ReadFileToString's status (NotFound when it does not exist).
Status ParseTextProtoFile(const std::string& path, google::protobuf::Message* out);

}  // namespace sluice
