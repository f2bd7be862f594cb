#include "trainer/device.h"

namespace sluice::trainer {

const char* DeviceName(Device device) {
  switch (device) {
    case Device::kAuto:
      return "auto";
    case Device::kCpu:
      return "cpu";
    case Device::kCuda:
      return "cuda";
  }
  return "?";
}

Result<Device> ParseDevice(const std::string& name) {
  for (Device d : {Device::kAuto, Device::kCpu, Device::kCuda}) {
    if (name == DeviceName(d)) return d;
  }
  return InvalidArgument("--device " + name + ": expected auto, cpu or cuda");
}

Result<std::optional<Precision>> ParsePrecisionChoice(const std::string& name) {
  if (name == "auto") return std::optional<Precision>();
  Result<Precision> p = ParsePrecision(name);
  if (!p.ok()) {
    return InvalidArgument("--precision " + name + ": expected auto, fp32, bf16 or fp16");
  }
  return std::optional<Precision>(*p);
}

Precision ResolvePrecision(Device device, std::optional<Precision> precision, std::string* note) {
  std::string unused;
  if (note == nullptr) note = &unused;
  const bool cpu = device == Device::kCpu;
  if (!precision.has_value()) {
    *note = cpu ? "fp32 (auto on the CPU)" : "bf16 (auto on CUDA)";
    return cpu ? Precision::kFp32 : Precision::kBf16;
  }
  *note = PrecisionName(*precision);
  if (cpu && *precision != Precision::kFp32)
    *note += " emulated on the CPU (fp32 arithmetic, rounded storage)";
  if (*precision == Precision::kFp16) *note += " with dynamic loss scaling";
  return *precision;
}

}  // namespace sluice::trainer
