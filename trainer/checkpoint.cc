#include "trainer/checkpoint.h"

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <system_error>

#include "formats/crc32c.h"
#include "formats/file.h"

namespace sluice::trainer {
namespace {

constexpr char kMagic[8] = {'S', 'L', 'C', 'K', 'P', 'T', '0', '1'};

void AppendU32(std::string* out, uint32_t v) {
  char b[4];
  std::memcpy(b, &v, 4);
  out->append(b, 4);
}

void AppendFloats(std::string* out, const std::vector<float>& v) {
  out->append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

}  // namespace

std::string CheckpointPath(const std::string& dir) {
  return (std::filesystem::path(dir) / "checkpoint.bin").string();
}

Status SaveCheckpoint(const std::string& dir, const Checkpoint& ck) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return IOError("create checkpoint directory " + dir + ": " + ec.message());
  nlohmann::json header = {
      {"image_size", ck.config.image_size},
      {"patch", ck.config.patch},
      {"width", ck.config.width},
      {"depth", ck.config.depth},
      {"classes", ck.config.classes},
      {"step", ck.step},
      {"adam_updates", ck.adam_updates},
      {"has_position", ck.has_position},
      {"epoch", ck.epoch},
      {"index", ck.index},
      {"end_record", ck.end_record},
      {"parameters", ck.params.size()},
      {"loss_scale", ck.loss_scale},
      {"loss_scale_good_steps", ck.loss_scale_good_steps},
  };
  const std::string header_text = header.dump();
  std::string out(kMagic, sizeof(kMagic));
  AppendU32(&out, static_cast<uint32_t>(header_text.size()));
  out += header_text;
  AppendFloats(&out, ck.params);
  AppendFloats(&out, ck.first_moment);
  AppendFloats(&out, ck.second_moment);
  AppendU32(&out, crc32c::Mask(crc32c::Value(out)));
  return WriteFileAtomically(CheckpointPath(dir), out);
}

Result<Checkpoint> LoadCheckpoint(const std::string& dir) {
  const std::string path = CheckpointPath(dir);
  ASSIGN_OR_RETURN(std::string data, ReadFileToString(path));
  if (data.size() < sizeof(kMagic) + 8 || std::memcmp(data.data(), kMagic, sizeof(kMagic)) != 0) {
    return DataLoss(path + ": not a sluice-trainer checkpoint (bad magic or too short)");
  }
  uint32_t stored_crc = 0, header_size = 0;
  std::memcpy(&stored_crc, data.data() + data.size() - 4, 4);
  if (crc32c::Unmask(stored_crc) !=
      crc32c::Value(std::string_view(data).substr(0, data.size() - 4))) {
    return DataLoss(path + ": checksum mismatch (" + std::to_string(data.size()) + " bytes)");
  }
  std::memcpy(&header_size, data.data() + sizeof(kMagic), 4);
  const size_t header_at = sizeof(kMagic) + 4;
  if (header_at + header_size + 4 > data.size())
    return DataLoss(path + ": header runs past the end");
  nlohmann::json header = nlohmann::json::parse(data.substr(header_at, header_size), nullptr,
                                                /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) return DataLoss(path + ": malformed header");
  Checkpoint ck;
  try {
    ck.config.image_size = header.at("image_size");
    ck.config.patch = header.at("patch");
    ck.config.width = header.at("width");
    ck.config.depth = header.at("depth");
    ck.config.classes = header.at("classes");
    ck.step = header.at("step");
    ck.adam_updates = header.at("adam_updates");
    ck.has_position = header.at("has_position");
    ck.epoch = header.at("epoch");
    ck.index = header.at("index");
    ck.end_record = header.at("end_record");
    ck.loss_scale = header.value("loss_scale", 0.0f);
    ck.loss_scale_good_steps = header.value("loss_scale_good_steps", 0);
    if (!(ck.loss_scale >= 0) || ck.loss_scale_good_steps < 0)
      return DataLoss(path + ": header: negative or NaN loss_scale / loss_scale_good_steps");
    const size_t count = header.at("parameters");
    const size_t bytes = count * sizeof(float);
    const size_t body_at = header_at + header_size;
    if (body_at + 3 * bytes + 4 != data.size()) {
      return DataLoss(path + ": " + std::to_string(data.size()) + " bytes, expected " +
                      std::to_string(body_at + 3 * bytes + 4) + " for " + std::to_string(count) +
                      " parameters");
    }
    size_t at = body_at;
    for (std::vector<float>* v : {&ck.params, &ck.first_moment, &ck.second_moment}) {
      v->resize(count);
      std::memcpy(v->data(), data.data() + at, bytes);
      at += bytes;
    }
  } catch (const nlohmann::json::exception& e) {
    return DataLoss(path + ": header: " + e.what());
  }
  return ck;
}

}  // namespace sluice::trainer
