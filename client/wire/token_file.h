// Bearer tokens kept in files: the server's token_file and a client's --token-file read alike.
#pragma once

#include <string>

#include "formats/status.h"

namespace sluice {

// The bearer token in a file (the server's token_file, a client's --token-file): its contents
// with surrounding whitespace trimmed. The file's read error as is; InvalidArgument naming the
// path when it holds no token or one with a space or control character (it travels in a header).
Result<std::string> ReadTokenFile(const std::string& path);

}  // namespace sluice
