// TFRecordReader over arbitrary bytes (plain, or GZIP/ZLIB as detected from the head), read once
// from a plain in-memory file and once from a lending stream that hands out its bytes in uneven
// pieces: both must give the same records, offsets and errors, every record or data-checksum
// error must move the reader forward, and a final error must repeat.
//
// Input: byte 0 selects the reader's buffer size (bits 0-1) and whether every frame's two CRCs
// are made valid first (bit 2: walking the declared lengths, so lengths, truncations and
// straddled loans are reached, not only checksum errors); byte 1 seeds the loan sizes; the rest
// is the file.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "formats/compression.h"
#include "formats/crc32c.h"
#include "formats/file.h"
#include "formats/tfrecord_reader.h"
#include "tests/fuzz/fuzz_check.h"

namespace sluice {
namespace {

// Lends the underlying stream's bytes in pieces whose sizes a seeded generator picks (1 byte up
// to 64 KiB), as pipeline/read_ahead_file.h lends its chunks.
class PieceLender final : public LendingSequentialFile {
 public:
  PieceLender(std::unique_ptr<SequentialFile> base, uint32_t seed)
      : base_(std::move(base)), state_(seed | 1) {}

  // An error of the stream comes after every byte before it, as the contract says.
  Status Lend(std::string_view* data) override {
    *data = {};
    RETURN_IF_ERROR(error_);
    const size_t want = NextSize();
    piece_.resize(want);
    size_t filled = 0;
    while (filled < want) {
      size_t got = 0;
      error_ = base_->Read(want - filled, piece_.data() + filled, &got);
      if (!error_.ok() && filled == 0) return error_;
      if (!error_.ok() || got == 0) break;
      filled += got;
    }
    *data = std::string_view(piece_.data(), filled);
    return Status::OK();
  }
  Status Read(size_t n, char* scratch, size_t* bytes_read) override {
    return base_->Read(n, scratch, bytes_read);
  }
  const std::string& name() const override { return base_->name(); }

 private:
  size_t NextSize() {
    state_ ^= state_ << 13;
    state_ ^= state_ >> 17;
    state_ ^= state_ << 5;
    const uint32_t r = state_ % 100;
    if (r < 40) return 1 + state_ % 16;  // tiny: headers straddle
    if (r < 80) return 1 + state_ % 4096;
    return 1 + state_ % 65536;
  }

  std::unique_ptr<SequentialFile> base_;
  Status error_;  // the stream's error, reported after the bytes before it
  uint32_t state_;
  std::vector<char> piece_;
};

void MakeCrcsValid(std::string* file) {
  size_t at = 0;
  while (at + kTFRecordHeaderBytes <= file->size()) {
    char* h = file->data() + at;
    uint64_t length = 0;
    for (int i = 7; i >= 0; --i) length = (length << 8) | static_cast<uint8_t>(h[i]);
    const uint32_t length_crc = crc32c::Mask(crc32c::Value(h, 8));
    std::memcpy(h + 8, &length_crc, 4);
    const size_t room = file->size() - at - kTFRecordHeaderBytes;
    if (length > room || room - length < kTFRecordFooterBytes) return;
    const uint32_t data_crc = crc32c::Mask(crc32c::Value(h + 12, length));
    std::memcpy(h + 12 + length, &data_crc, 4);
    at += kTFRecordHeaderBytes + length + kTFRecordFooterBytes;
  }
}

struct Event {
  bool ok = false, end = false;
  std::string status;  // the error's text
  std::string record;
  uint64_t record_offset = 0, offset = 0;
  bool operator==(const Event&) const = default;
};

std::vector<Event> ReadAll(const std::string& file, Compression compression, size_t buffer_bytes,
                           bool lend, uint32_t seed) {
  std::unique_ptr<SequentialFile> stream = NewMemoryFile("fuzz.tfrecord", file);
  if (compression != Compression::kNone) stream = NewInflatingFile(std::move(stream));
  if (lend) stream = std::make_unique<PieceLender>(std::move(stream), seed);
  TFRecordReaderOptions options;
  options.compression = compression;
  options.buffer_bytes = buffer_bytes;
  TFRecordReader reader(std::move(stream), options);
  std::vector<Event> events;
  uint64_t last_offset = 0;
  for (;;) {
    Event e;
    std::string_view record;
    const Status s = reader.ReadRecord(&record, &e.end);
    e.ok = s.ok();
    e.status = s.ToString();
    if (s.ok() && !e.end) e.record = std::string(record);
    e.record_offset = reader.record_offset();
    e.offset = reader.offset();
    events.push_back(e);
    if (e.ok && e.end) break;
    if (!reader.can_continue()) {
      FUZZ_CHECK(!s.ok(), "can_continue() false after an OK read");
      std::string_view again;
      bool end = false;
      const Status repeat = reader.ReadRecord(&again, &end);
      FUZZ_CHECK(repeat.ToString() == s.ToString(), "final error not repeated: %s then %s",
                 s.ToString().c_str(), repeat.ToString().c_str());
      break;
    }
    // A record, or a data-checksum error stepped past: at least one frame further.
    FUZZ_CHECK(e.offset >= last_offset + kTFRecordHeaderBytes + kTFRecordFooterBytes,
               "no progress: offset %llu after %llu (%s)", (unsigned long long)e.offset,
               (unsigned long long)last_offset, e.status.c_str());
    FUZZ_CHECK(e.record_offset == last_offset, "record at %llu, expected %llu",
               (unsigned long long)e.record_offset, (unsigned long long)last_offset);
    if (s.ok()) {
      FUZZ_CHECK(e.offset == last_offset + e.record.size() + 16,
                 "offset does not follow the frame");
    } else {
      FUZZ_CHECK(s.code() == StatusCode::kDataLoss, "unexpected error %s", e.status.c_str());
    }
    last_offset = e.offset;
  }
  return events;
}

}  // namespace
}  // namespace sluice

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sluice;
  if (size < 2) return 0;
  const uint8_t flags = data[0];
  const uint32_t seed = data[1] * 2654435761u;
  std::string file(reinterpret_cast<const char*>(data) + 2, size - 2);
  if (flags & 4) MakeCrcsValid(&file);
  // The largest is over -max_len (run.sh): the whole file in one read, as with the default 4 MiB.
  static constexpr size_t kBufferBytes[] = {16, 100, 4096, 1 << 17};
  const size_t buffer_bytes = kBufferBytes[flags & 3];
  const Compression compression = DetectCompression(std::string_view(file).substr(0, 12));
  const std::vector<Event> plain = ReadAll(file, compression, buffer_bytes, false, seed);
  const std::vector<Event> lent = ReadAll(file, compression, buffer_bytes, true, seed);
  if (plain.size() != lent.size()) {
    for (const auto* events : {&plain, &lent}) {
      for (const Event& e : *events) {
        std::fprintf(stderr, "%s: [%s] at %llu, %zu bytes\n", events == &plain ? "plain" : "lent",
                     e.status.c_str(), (unsigned long long)e.record_offset, e.record.size());
      }
    }
  }
  FUZZ_CHECK(plain.size() == lent.size(), "%zu events read plainly, %zu lent", plain.size(),
             lent.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    FUZZ_CHECK(plain[i] == lent[i], "event %zu differs: plain [%s] at %llu, lent [%s] at %llu", i,
               plain[i].status.c_str(), (unsigned long long)plain[i].record_offset,
               lent[i].status.c_str(), (unsigned long long)lent[i].record_offset);
  }
  return 0;
}
