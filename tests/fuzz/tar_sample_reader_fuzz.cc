// TarSampleReader over arbitrary bytes, read three times in lockstep: once taking every sample
// (ReadRecordInto), once skipping every one (SkipRecord) through the buffer, and once skipping
// every one from a plain file (payloads seeked over, headers read one by one). All must report
// the same statuses, offsets, lengths and warnings; a sample taken must be an Example with its
// "__key__"; every result must move the reader at least one header further; a final error must
// repeat.
//
// Input: byte 0 selects the reader's buffer size (bits 0-1) and whether every header's checksum
// is made valid first (bit 2: walking the declared sizes, so names, sizes, extended headers and
// truncations are reached, not only checksum errors); byte 1 selects max_held_record_bytes; the
// rest is the file.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>

#include "formats/example_scanner.h"
#include "formats/file.h"
#include "formats/tar_sample_reader.h"
#include "tests/fuzz/fuzz_check.h"

namespace sluice {
namespace {

uint64_t HeaderSize(const char* h) {
  if (static_cast<unsigned char>(h[124]) == 0x80) {
    uint64_t v = 0;
    for (int i = 128; i < 136; ++i) v = (v << 8) | static_cast<unsigned char>(h[i]);
    return v;
  }
  uint64_t v = 0;
  for (int i = 124; i < 136 && h[i] >= '0' && h[i] <= '7'; ++i) v = (v << 3) | (h[i] - '0');
  return v;
}

void MakeChecksumsValid(std::string* file) {
  size_t at = 0;
  while (at + kTarBlockBytes <= file->size()) {
    char* h = file->data() + at;
    std::memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (size_t i = 0; i < kTarBlockBytes; ++i) sum += static_cast<unsigned char>(h[i]);
    std::snprintf(h + 148, 8, "%06o", sum & 0777777);
    h[155] = ' ';
    const char type = h[156];
    const uint64_t size = type >= '1' && type <= '6' ? 0 : HeaderSize(h);
    const uint64_t blocks = (size + kTarBlockBytes - 1) / kTarBlockBytes;
    if (blocks > (file->size() - at) / kTarBlockBytes) return;
    at += kTarBlockBytes * (1 + blocks);
  }
}

// A file removed when the process exits.
struct TempPath {
  std::string path;
  ~TempPath() { ::unlink(path.c_str()); }
};

}  // namespace
}  // namespace sluice

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sluice;
  if (size < 2) return 0;
  const uint8_t flags = data[0];
  std::string file(reinterpret_cast<const char*>(data) + 2, size - 2);
  if (flags & 4) MakeChecksumsValid(&file);
  static constexpr size_t kBufferBytes[] = {512, 1500, 4096, 1 << 17};
  static constexpr uint64_t kMaxHeld[] = {UINT64_MAX, 0, 700, 5000};
  RecordReaderOptions options;
  options.stream.buffer_bytes = kBufferBytes[flags & 3];
  options.stream.max_held_record_bytes = kMaxHeld[data[1] & 3];
  // The plain file's path names the in-memory ones too, so their errors read the same.
  static const TempPath temp{"/tmp/tar_sample_reader_fuzz." + std::to_string(::getpid())};
  const std::string& path = temp.path;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << file;
  TarSampleReader take(NewMemoryFile(path, file), options);
  TarSampleReader skip(NewMemoryFile(path, file), options);
  RecordReaderOptions plain = options;
  plain.stream.compression = Compression::kNone;  // the bytes as they are, gzip magic or not
  auto opened = TarSampleReader::Open(path, plain);
  FUZZ_CHECK(opened.ok(), "open: %s", opened.status().ToString().c_str());
  TarSampleReader& seek = **opened;
  std::string record;
  uint64_t last_offset = 0;
  for (size_t i = 0;; ++i) {
    FUZZ_CHECK(i <= file.size() / kTarBlockBytes + 1, "more results than headers");
    bool end = false, skip_end = false;
    const Status a = take.ReadRecordInto(&record, &end);
    const Status b = skip.SkipRecord(&skip_end);
    FUZZ_CHECK(a.ToString() == b.ToString(), "taken [%s], skipped [%s]", a.ToString().c_str(),
               b.ToString().c_str());
    FUZZ_CHECK(end == skip_end, "end of file differs");
    bool seek_end = false;
    const Status c = seek.SkipRecord(&seek_end);
    FUZZ_CHECK(c.ToString() == b.ToString(), "seeked [%s], skipped [%s]", c.ToString().c_str(),
               b.ToString().c_str());
    FUZZ_CHECK(seek_end == skip_end, "end of file differs from the plain file's");
    FUZZ_CHECK(seek.record_offset() == skip.record_offset(), "plain file's offset differs");
    FUZZ_CHECK(seek.record_length() == skip.record_length(), "plain file's length differs");
    FUZZ_CHECK(take.record_offset() == skip.record_offset(), "offsets differ");
    FUZZ_CHECK(take.record_length() == skip.record_length(), "lengths differ");
    FUZZ_CHECK(take.can_continue() == skip.can_continue(), "can_continue differs");
    if (a.ok() && end) {
      FUZZ_CHECK(take.warning() == skip.warning() && seek.warning() == skip.warning(),
                 "warnings differ");
      break;
    }
    if (!take.can_continue()) {
      FUZZ_CHECK(!a.ok(), "can_continue() false after an OK read");
      const Status again = take.ReadRecordInto(&record, &end);
      FUZZ_CHECK(again.ToString() == a.ToString(), "final error not repeated");
      break;
    }
    FUZZ_CHECK(i == 0 || take.record_offset() >= last_offset + kTarBlockBytes,
               "no progress: sample at %llu after %llu", (unsigned long long)take.record_offset(),
               (unsigned long long)last_offset);
    last_offset = take.record_offset();
    if (a.ok()) {
      bool has_key = false;
      const Status parsed = ForEachFeature(record, [&](std::string_view key, const FeatureView&) {
        has_key = has_key || key == kSampleKeyFeature;
      });
      FUZZ_CHECK(parsed.ok() && has_key, "a sample that is not an Example with its key: %s",
                 parsed.ToString().c_str());
    } else {
      FUZZ_CHECK(
          a.code() == StatusCode::kInvalidArgument || a.code() == StatusCode::kResourceExhausted,
          "a sample's error that lets the reader go on: %s", a.ToString().c_str());
    }
  }
  return 0;
}
