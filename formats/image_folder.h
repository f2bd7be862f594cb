// Walks an ImageFolder tree (torchvision's layout): one subfolder per class, images inside. Classes
// are the subfolder names in byte order, labelled 0..K-1; hidden entries (".name") are ignored.
#pragma once

#include <string>
#include <vector>

#include "formats/status.h"

namespace sluice {

struct ImageFolderEntry {
  std::string path;      // full path
  std::string relative;  // "class/file.jpg"
  int label = 0;
};

struct ImageFolder {
  std::vector<std::string> classes;
  std::vector<ImageFolderEntry> entries;  // sorted by class, then file name
};

// Files are listed whatever their extension; deciding what is an image is the reader's job, so a
// misnamed file is reported with its reason rather than silently dropped. NotFound when root does
// not exist, InvalidArgument when it has no class folders.
Result<ImageFolder> ScanImageFolder(const std::string& root);

}  // namespace sluice
