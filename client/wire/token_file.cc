#include "client/wire/token_file.h"

#include <algorithm>
#include <string_view>

#include "formats/file.h"

namespace sluice {

Result<std::string> ReadTokenFile(const std::string& path) {
  ASSIGN_OR_RETURN(std::string token, ReadFileToString(path));
  constexpr std::string_view kSpace = " \t\r\n\f\v";
  token.erase(0, token.find_first_not_of(kSpace));
  token.erase(token.find_last_not_of(kSpace) + 1);
  if (token.empty()) return InvalidArgument(path + " holds no token");
  if (std::any_of(token.begin(), token.end(), [](char c) { return c <= ' ' || c > '~'; })) {
    return InvalidArgument("the token in " + path +
                           " has a space or control character; it is sent in a header");
  }
  return token;
}

}  // namespace sluice
