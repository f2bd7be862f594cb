#include "formats/source_kind.h"

#include <algorithm>
#include <cctype>
#include <string>

namespace sluice {
namespace {

bool EndsWithNoCase(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         std::equal(suffix.begin(), suffix.end(), s.end() - static_cast<long>(suffix.size()),
                    [](char a, char b) {
                      return std::tolower(static_cast<unsigned char>(a)) ==
                             std::tolower(static_cast<unsigned char>(b));
                    });
}

}  // namespace

SourceKind DetectSourceKind(std::string_view path) {
  for (std::string_view ext : {".tar", ".tar.gz", ".tgz"}) {
    if (EndsWithNoCase(path, ext)) return SourceKind::kTar;
  }
  for (std::string_view ext : {".jpg", ".jpeg", ".png", ".webp"}) {
    if (EndsWithNoCase(path, ext)) return SourceKind::kImage;
  }
  return SourceKind::kTFRecord;
}

std::string_view SourceKindName(SourceKind kind) {
  switch (kind) {
    case SourceKind::kTFRecord:
      return "tfrecord";
    case SourceKind::kTar:
      return "tar";
    case SourceKind::kImage:
      return "image";
  }
  return "tfrecord";
}

}  // namespace sluice
