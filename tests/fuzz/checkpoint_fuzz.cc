// LoadCheckpoint over arbitrary files: a damaged, truncated or inconsistent checkpoint is
// DataLoss naming the file, never a crash or an allocation its size does not justify; one that
// loads saves and loads back unchanged.
//
// Input: byte 0 bit 0 — the rest is a whole file whose last 4 bytes are replaced by the right
// checksum (so the parser behind the CRC is reached); bit 1 — the rest is a header (JSON text)
// up to the first NUL byte and the body after it, framed with the magic, the length and a right
// checksum; neither — the rest is the file as it is.
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "formats/crc32c.h"
#include "tests/fuzz/fuzz_check.h"
#include "trainer/checkpoint.h"

namespace {

const std::string& Dir() {
  static const std::string dir = [] {
    std::string tmpl =
        (std::filesystem::temp_directory_path() / "sluice-checkpoint-fuzz-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) std::abort();
    return tmpl;
  }();
  return dir;
}

void AppendU32(std::string* out, uint32_t v) { out->append(reinterpret_cast<char*>(&v), 4); }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sluice;
  using namespace sluice::trainer;
  if (size < 1) return 0;
  const uint8_t mode = data[0];
  std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::string file;
  if (mode & 2) {
    const size_t nul = rest.find('\0');
    const std::string header = rest.substr(0, nul);
    file = "SLCKPT01";
    AppendU32(&file, static_cast<uint32_t>(header.size()));
    file += header;
    if (nul != std::string::npos) file += rest.substr(nul + 1);
    AppendU32(&file, crc32c::Mask(crc32c::Value(file)));
  } else {
    file = std::move(rest);
    if ((mode & 1) && file.size() >= 4) {
      const uint32_t crc =
          crc32c::Mask(crc32c::Value(std::string_view(file).substr(0, file.size() - 4)));
      std::memcpy(file.data() + file.size() - 4, &crc, 4);
    }
  }
  const std::string path = CheckpointPath(Dir());
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(file.data(), static_cast<std::streamsize>(file.size()));
  }
  const Result<Checkpoint> loaded = LoadCheckpoint(Dir());
  if (!loaded.ok()) {
    FUZZ_CHECK(loaded.status().code() == StatusCode::kDataLoss, "%s",
               loaded.status().ToString().c_str());
    FUZZ_CHECK(loaded.status().message().find(path) != std::string::npos, "error names no file: %s",
               loaded.status().ToString().c_str());
    return 0;
  }
  const Checkpoint& ck = *loaded;
  FUZZ_CHECK(
      ck.first_moment.size() == ck.params.size() && ck.second_moment.size() == ck.params.size(),
      "moments and parameters differ in size");
  FUZZ_CHECK(3 * ck.params.size() * sizeof(float) < file.size(), "%zu parameters in %zu bytes",
             ck.params.size(), file.size());
  FUZZ_CHECK(SaveCheckpoint(Dir(), ck).ok(), "a loaded checkpoint does not save");
  const Result<Checkpoint> again = LoadCheckpoint(Dir());
  FUZZ_CHECK(again.ok(), "a saved checkpoint does not load: %s", again.status().ToString().c_str());
  FUZZ_CHECK(again->config == ck.config && again->step == ck.step &&
                 again->adam_updates == ck.adam_updates && again->has_position == ck.has_position &&
                 again->epoch == ck.epoch && again->index == ck.index &&
                 again->end_record == ck.end_record &&
                 again->loss_scale_good_steps == ck.loss_scale_good_steps &&
                 std::memcmp(&again->loss_scale, &ck.loss_scale, 4) == 0,
             "header fields change in a save and load");
  FUZZ_CHECK(again->params.size() == ck.params.size() &&
                 std::memcmp(again->params.data(), ck.params.data(),
                             ck.params.size() * sizeof(float)) == 0 &&
                 std::memcmp(again->first_moment.data(), ck.first_moment.data(),
                             ck.params.size() * sizeof(float)) == 0 &&
                 std::memcmp(again->second_moment.data(), ck.second_moment.data(),
                             ck.params.size() * sizeof(float)) == 0,
             "tensors change in a save and load");
  return 0;
}
