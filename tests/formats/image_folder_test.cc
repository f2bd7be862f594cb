#include "formats/image_folder.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/test_support.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;
using testing::WriteAll;

void Touch(const TempDir& dir, const std::string& relative) {
  const fs::path p = dir.path() / relative;
  fs::create_directories(p.parent_path());
  WriteAll(p.string(), "x");
}

std::vector<std::string> Relatives(const ImageFolder& f) {
  std::vector<std::string> out;
  for (const auto& e : f.entries) out.push_back(e.relative);
  return out;
}

TEST_CASE("ClassesAreSortedByBytesAndLabelledInOrder") {
  TempDir dir;
  Touch(dir, "dog/b.jpg");
  Touch(dir, "dog/a.jpg");
  Touch(dir, "cat/z.png");
  Touch(dir, "Zebra/1.jpg");
  Touch(dir, "cat/10.jpg");
  Touch(dir, "cat/9.jpg");
  auto r = ScanImageFolder(dir.path().string());
  REQUIRE(r.ok());
  REQUIRE(r->classes == std::vector<std::string>{"Zebra", "cat", "dog"});
  REQUIRE(Relatives(*r) == std::vector<std::string>{"Zebra/1.jpg", "cat/10.jpg", "cat/9.jpg",
                                                    "cat/z.png", "dog/a.jpg", "dog/b.jpg"});
  const std::vector<int> labels = {0, 1, 1, 1, 2, 2};
  for (size_t i = 0; i < labels.size(); ++i) {
    CHECK(r->entries[i].label == labels[i]);
    CHECK(r->entries[i].path == (dir.path() / r->entries[i].relative).string());
  }
}

TEST_CASE("HiddenEntriesAreIgnored") {
  TempDir dir;
  Touch(dir, ".git/objects/x");
  Touch(dir, "cls/.DS_Store");
  Touch(dir, "cls/.thumbs/t.jpg");
  Touch(dir, "cls/img.jpg");
  auto r = ScanImageFolder(dir.path().string());
  REQUIRE(r.ok());
  REQUIRE(r->classes == std::vector<std::string>{"cls"});
  REQUIRE(Relatives(*r) == std::vector<std::string>{"cls/img.jpg"});
}

TEST_CASE("FilesInRootAreNotClasses") {
  TempDir dir;
  Touch(dir, "README.txt");
  Touch(dir, "a/1.jpg");
  auto r = ScanImageFolder(dir.path().string());
  REQUIRE(r.ok());
  REQUIRE(r->classes == std::vector<std::string>{"a"});
  REQUIRE(r->entries.size() == 1);
}

TEST_CASE("EmptyRootIsInvalidArgument") {
  TempDir dir;
  auto r = ScanImageFolder(dir.path().string());
  REQUIRE(r.status().code() == StatusCode::kInvalidArgument);
  REQUIRE(r.status().message().find("no class folders") != std::string::npos);
  Touch(dir, "only-a-file.jpg");
  Touch(dir, ".hidden/x.jpg");
  REQUIRE(ScanImageFolder(dir.path().string()).status().code() == StatusCode::kInvalidArgument);
}

TEST_CASE("MissingRootIsNotFound") {
  TempDir dir;
  const std::string missing = dir.file("nope");
  auto r = ScanImageFolder(missing);
  REQUIRE(r.status().code() == StatusCode::kNotFound);
  REQUIRE(r.status().message().find(missing) != std::string::npos);
  Touch(dir, "file");
  REQUIRE(ScanImageFolder(dir.file("file/below")).status().code() == StatusCode::kNotFound);
}

TEST_CASE("RootThatIsAFileIsInvalidArgument") {
  TempDir dir;
  Touch(dir, "file");
  REQUIRE(ScanImageFolder(dir.file("file")).status().code() == StatusCode::kInvalidArgument);
}

TEST_CASE("SymlinkedClassFoldersAndFilesAreFollowed") {
  TempDir dir;
  TempDir elsewhere;
  Touch(elsewhere, "birds/owl.jpg");
  Touch(elsewhere, "lone.jpg");
  Touch(dir, "root/cats/tabby.jpg");
  fs::create_directory_symlink(elsewhere.path() / "birds", dir.path() / "root" / "birds");
  fs::create_symlink(elsewhere.path() / "lone.jpg", dir.path() / "root" / "cats" / "linked.jpg");
  fs::create_symlink(dir.path() / "missing.jpg", dir.path() / "root" / "cats" / "broken.jpg");
  auto r = ScanImageFolder(dir.file("root"));
  REQUIRE(r.ok());
  REQUIRE(r->classes == std::vector<std::string>{"birds", "cats"});
  REQUIRE(Relatives(*r) ==
          std::vector<std::string>{"birds/owl.jpg", "cats/linked.jpg", "cats/tabby.jpg"});
}

TEST_CASE("NestedFoldersInsideAClassAreWalked") {
  TempDir dir;
  Touch(dir, "cls/2019/b.jpg");
  Touch(dir, "cls/a.jpg");
  auto r = ScanImageFolder(dir.path().string());
  REQUIRE(r.ok());
  REQUIRE(Relatives(*r) == std::vector<std::string>{"cls/2019/b.jpg", "cls/a.jpg"});
}

TEST_CASE("EmptyClassKeepsItsLabel") {
  TempDir dir;
  Touch(dir, "a/1.jpg");
  fs::create_directories(dir.path() / "b");
  Touch(dir, "c/1.jpg");
  auto r = ScanImageFolder(dir.path().string());
  REQUIRE(r.ok());
  REQUIRE(r->classes == std::vector<std::string>{"a", "b", "c"});
  REQUIRE(r->entries.size() == 2);
  REQUIRE(r->entries[1].label == 2);
}

TEST_CASE("SymlinkLoopIsReportedNotFollowedForever") {
  TempDir dir;
  Touch(dir, "cls/a.jpg");
  fs::create_directory_symlink(dir.path() / "cls", dir.path() / "cls" / "loop");
  auto r = ScanImageFolder(dir.path().string());
  REQUIRE(r.status().code() == StatusCode::kInvalidArgument);
  REQUIRE(r.status().message().find("symlink loop") != std::string::npos);
}

TEST_CASE("TwoLinksToOneFolderAreNotALoop") {
  TempDir dir;
  TempDir shared;
  Touch(shared, "pics/p.jpg");
  Touch(dir, "cls/a.jpg");
  fs::create_directory_symlink(shared.path() / "pics", dir.path() / "cls" / "one");
  fs::create_directory_symlink(shared.path() / "pics", dir.path() / "cls" / "two");
  auto r = ScanImageFolder(dir.path().string());
  REQUIRE(r.ok());
  REQUIRE(Relatives(*r) == std::vector<std::string>{"cls/a.jpg", "cls/one/p.jpg", "cls/two/p.jpg"});
}

}  // namespace
}  // namespace sluice
