// Tar index text (formats/tar_index.h, DALI wds2idx's v1.2) over arbitrary bytes: a parse either
// fails naming the line (DataLoss) or yields samples of block-aligned members, each after the one
// before it and its header, and formatting them parses back to the same samples.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "formats/tar_index.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sluice;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const Result<std::vector<TarIndexSample>> parsed = ParseTarIndex(text, "fuzz.idx");
  if (!parsed.ok()) {
    FUZZ_CHECK(parsed.status().code() == StatusCode::kDataLoss, "%s",
               parsed.status().ToString().c_str());
    FUZZ_CHECK(parsed.status().message().find("fuzz.idx:") != std::string::npos,
               "error names no line: %s", parsed.status().ToString().c_str());
    return 0;
  }
  uint64_t end = 0;
  for (size_t i = 0; i < parsed->size(); ++i) {
    const TarIndexSample& sample = (*parsed)[i];
    FUZZ_CHECK(!sample.members.empty(), "sample %zu has no members", i);
    FUZZ_CHECK(TarSampleStart(*parsed, i) == end, "sample %zu does not start where %zu ended", i,
               i - 1);
    for (const TarIndexMember& m : sample.members) {
      FUZZ_CHECK(
          m.offset % kTarBlockBytes == 0 && m.offset >= end && m.offset - end >= kTarBlockBytes,
          "member at %llu after %llu", (unsigned long long)m.offset, (unsigned long long)end);
      FUZZ_CHECK(m.offset <= UINT64_MAX - kTarBlockBytes &&
                     m.size <= UINT64_MAX - kTarBlockBytes - m.offset,
                 "member at %llu wraps", (unsigned long long)m.offset);
      end = m.offset + (m.size + kTarBlockBytes - 1) / kTarBlockBytes * kTarBlockBytes;
    }
    FUZZ_CHECK(sample.padded_end() == end, "sample %zu ends elsewhere", i);
  }
  const Result<std::vector<TarIndexSample>> again =
      ParseTarIndex(FormatTarIndex(*parsed), "formatted.idx");
  FUZZ_CHECK(again.ok() && *again == *parsed, "formatted index does not parse back");
  return 0;
}
