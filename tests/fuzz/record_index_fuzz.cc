// Record index text (formats/record_index.h) over arbitrary bytes: a parse either fails naming the
// line (DataLoss) or yields entries that tile the stream, and formatting them parses back to the
// same entries.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "formats/record_index.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sluice;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const Result<std::vector<IndexEntry>> parsed = ParseRecordIndex(text, "fuzz.idx");
  if (!parsed.ok()) {
    FUZZ_CHECK(parsed.status().code() == StatusCode::kDataLoss, "%s",
               parsed.status().ToString().c_str());
    FUZZ_CHECK(parsed.status().message().find("fuzz.idx:") != std::string::npos,
               "error names no line: %s", parsed.status().ToString().c_str());
    return 0;
  }
  uint64_t next = 0;
  for (const IndexEntry& e : *parsed) {
    FUZZ_CHECK(e.offset == next && e.length >= 16, "entry %llu+%llu does not follow %llu",
               (unsigned long long)e.offset, (unsigned long long)e.length,
               (unsigned long long)next);
    next = e.offset + e.length;
  }
  const Result<std::vector<IndexEntry>> again =
      ParseRecordIndex(FormatRecordIndex(*parsed), "formatted.idx");
  FUZZ_CHECK(again.ok() && *again == *parsed, "formatted index does not parse back");
  return 0;
}
