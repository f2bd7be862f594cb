#include "formats/image_folder.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <system_error>
#include <utility>

namespace sluice {
namespace {

namespace fs = std::filesystem;

bool IsHidden(const fs::path& p) {
  const std::string name = p.filename().string();
  return !name.empty() && name[0] == '.';
}

Status FsError(const std::error_code& ec, std::string_view op, const fs::path& p) {
  return ErrnoStatus(ec.value(), op, p.string());
}

// Identity of a folder, to notice when a symlink leads back into one of its own ancestors.
struct FolderId {
  dev_t dev;
  ino_t ino;
  bool operator==(const FolderId&) const = default;
};

bool StatFolder(const fs::path& p, FolderId* id) {
  struct stat st;
  if (::stat(p.c_str(), &st) != 0) return false;
  *id = FolderId{st.st_dev, st.st_ino};
  return true;
}

// Appends every regular file under class_dir (recursively, as torchvision's os.walk does),
// following symlinks to files and folders and skipping hidden entries at any depth. A symlink that
// leads back to a folder enclosing it is InvalidArgument: following it would list the same files
// again until the path grows too long.
Status ListClass(const fs::path& class_dir, const std::string& class_name, int label,
                 std::vector<ImageFolderEntry>* entries) {
  // ancestors[d] is the folder holding the entries at depth d.
  std::vector<FolderId> ancestors(1);
  if (!StatFolder(class_dir, &ancestors[0])) return ErrnoStatus(errno, "stat", class_dir.string());
  std::error_code ec;
  fs::recursive_directory_iterator it(class_dir, fs::directory_options::follow_directory_symlink,
                                      ec);
  if (ec) return FsError(ec, "scan", class_dir);
  const size_t first = entries->size();
  for (const fs::recursive_directory_iterator end; it != end; it.increment(ec)) {
    if (ec) return FsError(ec, "scan", class_dir);
    const fs::path& p = it->path();
    std::error_code type_ec;
    if (it->is_directory(type_ec)) {
      FolderId id;
      if (IsHidden(p) || !StatFolder(p, &id)) {
        it.disable_recursion_pending();
        continue;
      }
      ancestors.resize(it.depth() + 1);
      if (std::find(ancestors.begin(), ancestors.end(), id) != ancestors.end()) {
        return InvalidArgument("symlink loop: " + p.string() +
                               " leads back to a folder holding it");
      }
      ancestors.push_back(id);
      continue;
    }
    if (IsHidden(p) || !it->is_regular_file(type_ec)) continue;  // sockets, broken links, ...
    std::string relative = class_name + "/" + p.lexically_relative(class_dir).generic_string();
    entries->push_back(ImageFolderEntry{p.string(), std::move(relative), label});
  }
  if (ec) return FsError(ec, "scan", class_dir);
  std::sort(
      entries->begin() + static_cast<std::ptrdiff_t>(first), entries->end(),
      [](const ImageFolderEntry& a, const ImageFolderEntry& b) { return a.relative < b.relative; });
  return Status::OK();
}

}  // namespace

Result<ImageFolder> ScanImageFolder(const std::string& root) {
  std::error_code ec;
  const fs::path root_path(root);
  const fs::file_status st = fs::status(root_path, ec);
  if (st.type() == fs::file_type::not_found) {
    return NotFound("image folder " + root + " does not exist");
  }
  if (ec) return FsError(ec, "stat", root_path);
  if (!fs::is_directory(st)) return InvalidArgument("image folder " + root + " is not a folder");

  ImageFolder folder;
  fs::directory_iterator it(root_path, ec);
  if (ec) return FsError(ec, "scan", root_path);
  for (const fs::directory_iterator end; it != end; it.increment(ec)) {
    if (ec) return FsError(ec, "scan", root_path);
    if (IsHidden(it->path())) continue;
    std::error_code dir_ec;
    if (it->is_directory(dir_ec)) folder.classes.push_back(it->path().filename().string());
  }
  if (ec) return FsError(ec, "scan", root_path);
  if (folder.classes.empty()) {
    return InvalidArgument("image folder " + root + " has no class folders");
  }
  // std::string compares as unsigned bytes, the order torchvision's sorted() gives for UTF-8 names.
  std::sort(folder.classes.begin(), folder.classes.end());
  for (size_t label = 0; label < folder.classes.size(); ++label) {
    RETURN_IF_ERROR(ListClass(root_path / folder.classes[label], folder.classes[label],
                              static_cast<int>(label), &folder.entries));
  }
  return folder;
}

}  // namespace sluice
