#include "trainer/checkpoint.h"

#include <cstring>
#include <filesystem>
#include <limits>
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

// The header's integer `key`, which must lie in [0, max]: a float, a string or an out-of-range
// value is DataLoss naming the key (never a conversion that overflows).
Status ReadCount(const nlohmann::json& header, const char* key, int64_t max,
                 const std::string& path, int64_t* out) {
  const auto it = header.find(key);
  if (it == header.end()) return DataLoss(path + ": header: no " + key);
  const bool in_range =
      (it->is_number_unsigned() && it->get<uint64_t>() <= static_cast<uint64_t>(max)) ||
      (it->is_number_integer() && !it->is_number_unsigned() && it->get<int64_t>() >= 0 &&
       it->get<int64_t>() <= max);
  if (!in_range) {
    return DataLoss(path + ": header: " + key + " is " + it->dump() + ", not an integer in [0, " +
                    std::to_string(max) + "]");
  }
  *out = it->get<int64_t>();
  return Status::OK();
}

Status ReadCount(const nlohmann::json& header, const char* key, const std::string& path,
                 int* out) {
  int64_t v = 0;
  RETURN_IF_ERROR(ReadCount(header, key, std::numeric_limits<int>::max(), path, &v));
  *out = static_cast<int>(v);
  return Status::OK();
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
      {"shuffle_bytes", ck.shuffle_bytes},
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
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  RETURN_IF_ERROR(ReadCount(header, "image_size", path, &ck.config.image_size));
  RETURN_IF_ERROR(ReadCount(header, "patch", path, &ck.config.patch));
  RETURN_IF_ERROR(ReadCount(header, "width", path, &ck.config.width));
  RETURN_IF_ERROR(ReadCount(header, "depth", path, &ck.config.depth));
  RETURN_IF_ERROR(ReadCount(header, "classes", path, &ck.config.classes));
  RETURN_IF_ERROR(ReadCount(header, "step", kMax, path, &ck.step));
  RETURN_IF_ERROR(ReadCount(header, "adam_updates", kMax, path, &ck.adam_updates));
  RETURN_IF_ERROR(ReadCount(header, "epoch", kMax, path, &ck.epoch));
  RETURN_IF_ERROR(ReadCount(header, "index", kMax, path, &ck.index));
  RETURN_IF_ERROR(ReadCount(header, "end_record", kMax, path, &ck.end_record));
  // Written by later versions only: absent means 0 (not checked on resume).
  if (header.contains("shuffle_bytes")) {
    RETURN_IF_ERROR(ReadCount(header, "shuffle_bytes", kMax, path, &ck.shuffle_bytes));
  }
  const auto has_position = header.find("has_position");
  if (has_position == header.end() || !has_position->is_boolean())
    return DataLoss(path + ": header: has_position is missing or not a boolean");
  ck.has_position = has_position->get<bool>();
  // Written by later versions only: absent means 0.
  if (header.contains("loss_scale")) {
    const nlohmann::json& scale = header["loss_scale"];
    if (!scale.is_number() || !(scale.get<double>() >= 0) ||
        !(scale.get<double>() <= std::numeric_limits<float>::max())) {
      return DataLoss(path + ": header: loss_scale is " + scale.dump() +
                      ", not a number in [0, FLT_MAX]");
    }
    ck.loss_scale = scale.get<float>();
  }
  if (header.contains("loss_scale_good_steps")) {
    RETURN_IF_ERROR(ReadCount(header, "loss_scale_good_steps", path, &ck.loss_scale_good_steps));
  }
  // Three fp32 tensors of `parameters` values fill the rest of the file: a count they cannot
  // fit is refused before anything is allocated for it.
  const size_t body_at = header_at + header_size;
  const size_t body_bytes = data.size() - 4 - body_at;
  int64_t count = 0;
  RETURN_IF_ERROR(ReadCount(header, "parameters",
                            static_cast<int64_t>(body_bytes / (3 * sizeof(float))), path, &count));
  const size_t bytes = static_cast<size_t>(count) * sizeof(float);
  if (3 * bytes != body_bytes) {
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
  return ck;
}

}  // namespace sluice::trainer
