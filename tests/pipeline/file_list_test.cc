#include "pipeline/file_list.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "tests/test_support.h"

namespace sluice {
namespace {

using testing::TempDir;
using testing::WriteAll;

Result<std::vector<ListedFile>> Read(const TempDir& dir, const std::string& name,
                                     const std::string& text) {
  WriteAll(dir.file(name), text);
  return ReadFileList(dir.file(name));
}

TEST_CASE("CsvListWithHeaderQuotesAndCrlfGivesPathsFromTheListsFolder") {
  TempDir dir;
  auto r = Read(dir, "train.csv",
                "path,label\r\n"
                "cat/a.jpg,0\r\n"
                "\r\n"
                "\"dog/b, c \"\"d\"\".JPG\", 1\r\n"
                "/abs/e.png,7\n");
  REQUIRE(r.ok());
  REQUIRE(r->size() == 3);
  CHECK((*r)[0].path == dir.file("cat/a.jpg"));
  CHECK((*r)[0].label == 0);
  CHECK((*r)[0].line == 2);
  CHECK((*r)[1].path == dir.file("dog/b, c \"d\".JPG"));
  CHECK((*r)[1].label == 1);
  CHECK((*r)[1].line == 4);
  CHECK((*r)[2].path == "/abs/e.png");
  CHECK((*r)[2].label == 7);
}

TEST_CASE("JsonLinesListIgnoresOtherKeysAndReadsDotJsonToo") {
  TempDir dir;
  const std::string text =
      "{\"path\": \"x/\\u00e9t\\u00e9.jpg\", \"label\": 2, \"split\": \"train\"}\n"
      "\n"
      "{\"label\": 0, \"path\": \"y.jpg\"}\n";
  for (const char* name : {"l.jsonl", "l.json"}) {
    auto r = Read(dir, name, text);
    REQUIRE(r.ok());
    REQUIRE(r->size() == 2);
    CHECK((*r)[0].path == dir.file("x/\xc3\xa9t\xc3\xa9.jpg"));
    CHECK((*r)[0].label == 2);
    CHECK((*r)[1].path == dir.file("y.jpg"));
    CHECK((*r)[1].line == 3);
  }
}

// Each bad line is refused naming the list, its line and the field.
TEST_CASE("BadListLineIsRefusedNamingListLineAndField") {
  struct Case {
    const char* name;
    const char* text;
    const char* where;  // after the list's path
  };
  const Case cases[] = {
      {"l.csv", "a.jpg,0\nb.jpg\n", ":2: label: expected 2 fields"},
      {"l.csv", "a.jpg,0,extra\n", ":1: path: expected 2 fields"},
      {"l.csv", "a.jpg,cat\n", ":1: label: 'cat' is not an integer"},
      {"l.csv", "a.jpg,1.5\n", ":1: label: '1.5' is not an integer"},
      {"l.csv", "a.jpg,-1\n", ":1: label: -1 is negative"},
      {"l.csv", ",3\n", ":1: path: empty"},
      {"l.csv", "\"a.jpg,3\n", ":1: path: unterminated quoted field"},
      {"l.csv", "a\"b.jpg,3\n", ":1: path: a quote inside an unquoted field"},
      {"l.csv", "x.jpg,1\npath,label\n", ":2: label: 'label' is not an integer"},
      {"l.jsonl", "{\"path\": \"a.jpg\", \"label\": 1}\n[1, 2]\n", ":2: line: not a JSON object"},
      {"l.jsonl", "{\"path\": \"a.jpg\", \"label\": 1\n", ":1: line: not a JSON object"},
      {"l.jsonl", "{\"label\": 1}\n", ":1: path: missing"},
      {"l.jsonl", "{\"path\": 3, \"label\": 1}\n", ":1: path: not a string"},
      {"l.jsonl", "{\"path\": \"a.jpg\"}\n", ":1: label: missing"},
      {"l.jsonl", "{\"path\": \"a.jpg\", \"label\": \"1\"}\n",
       ":1: label: \"1\" is not an integer"},
      {"l.jsonl", "{\"path\": \"a.jpg\", \"label\": 1.0}\n", ":1: label: 1.0 is not an integer"},
      {"l.jsonl", "{\"path\": \"a.jpg\", \"label\": -2}\n", ":1: label: -2 is negative"},
  };
  for (const Case& c : cases) {
    TempDir dir;
    auto r = Read(dir, c.name, c.text);
    INFO(c.text);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == StatusCode::kInvalidArgument);
    CHECK_THAT(r.status().message(), Catch::Contains(dir.file(c.name) + c.where));
  }
}

TEST_CASE("ListWithUnknownExtensionOrNoEntriesOrMissingIsRefusedNamingIt") {
  TempDir dir;
  auto txt = Read(dir, "l.txt", "a.jpg,0\n");
  REQUIRE_FALSE(txt.ok());
  CHECK_THAT(txt.status().message(), Catch::Contains(dir.file("l.txt") + ": not a .csv"));
  auto empty = Read(dir, "e.csv", "path,label\n\n");
  REQUIRE_FALSE(empty.ok());
  CHECK_THAT(empty.status().message(), Catch::Contains(dir.file("e.csv") + " lists no file"));
  auto missing = ReadFileList(dir.file("gone.csv"));
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().code() == StatusCode::kNotFound);
  CHECK_THAT(missing.status().message(), Catch::Contains(dir.file("gone.csv")));
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

// Excel saves "CSV UTF-8" with a byte order mark before the header; a JSON-lines writer may too.
TEST_CASE("LeadingUtf8ByteOrderMarkIsNotPartOfTheFirstLine") {
  TempDir dir;
  auto csv = Read(dir, "bom.csv", "\xEF\xBB\xBFpath,label\r\ncat/a.jpg,3\r\n");
  INFO(csv.status().ToString());
  REQUIRE(csv.ok());
  REQUIRE(csv->size() == 1);
  CHECK((*csv)[0].path == dir.file("cat/a.jpg"));
  CHECK((*csv)[0].label == 3);
  auto headless = Read(dir, "headless.csv",
                       "\xEF\xBB\xBF"
                       "a.jpg,1\n");
  REQUIRE(headless.ok());
  CHECK((*headless)[0].path == dir.file("a.jpg"));
  auto jsonl = Read(dir, "bom.jsonl", "\xEF\xBB\xBF{\"path\": \"a.jpg\", \"label\": 2}\n");
  REQUIRE(jsonl.ok());
  CHECK((*jsonl)[0].label == 2);
  // Only at the start of the file: elsewhere it is part of a path.
  auto inner = Read(dir, "inner.csv",
                    "a.jpg,1\n\xEF\xBB\xBF"
                    "b.jpg,2\n");
  REQUIRE(inner.ok());
  CHECK((*inner)[1].path == dir.file("\xEF\xBB\xBF"
                                     "b.jpg"));
}

TEST_CASE("UnlabeledListTakesBarePathsOrIgnoresAGivenLabel") {
  TempDir dir;
  WriteAll(dir.file("bare.csv"), "path\na.jpg\n\"b,c.jpg\"\nd.jpg,dog\n");
  auto labelled = ReadFileList(dir.file("bare.csv"));
  REQUIRE_FALSE(labelled.ok());
  CHECK(labelled.status().message() ==
        dir.file("bare.csv") + ":1: label: expected 2 fields \"path,label\", found 1");
  auto csv = ReadFileList(dir.file("bare.csv"), ListLabels::kIgnore);
  REQUIRE(csv.ok());
  REQUIRE(csv->size() == 3);
  CHECK((*csv)[0].path == dir.file("a.jpg"));
  CHECK((*csv)[0].line == 2);
  CHECK((*csv)[1].path == dir.file("b,c.jpg"));
  CHECK((*csv)[2].path == dir.file("d.jpg"));
  CHECK((*csv)[2].label == 0);
  WriteAll(dir.file("three.csv"), "a.jpg,1,2\n");
  CHECK(ReadFileList(dir.file("three.csv"), ListLabels::kIgnore).status().message() ==
        dir.file("three.csv") +
            ":1: path: expected 1 or 2 fields \"path\" or \"path,label\", found 3");

  WriteAll(dir.file("bare.jsonl"),
           "{\"path\": \"a.jpg\"}\n{\"path\": \"b.jpg\", \"label\": \"x\"}\n");
  CHECK(ReadFileList(dir.file("bare.jsonl")).status().message() ==
        dir.file("bare.jsonl") + ":1: label: missing");
  auto jsonl = ReadFileList(dir.file("bare.jsonl"), ListLabels::kIgnore);
  REQUIRE(jsonl.ok());
  REQUIRE(jsonl->size() == 2);
  CHECK((*jsonl)[0].path == dir.file("a.jpg"));
  CHECK((*jsonl)[1].path == dir.file("b.jpg"));
  CHECK((*jsonl)[1].label == 0);
  WriteAll(dir.file("nopath.jsonl"), "{\"label\": 1}\n");
  CHECK(ReadFileList(dir.file("nopath.jsonl"), ListLabels::kIgnore).status().message() ==
        dir.file("nopath.jsonl") + ":1: path: missing");
}

}  // namespace
}  // namespace sluice
