// The device a run trains on and the precision it trains in, as the command line and the JSON
// summary name them ("auto", "cpu", "cuda"; "auto", "fp32", "bf16", "fp16"). Which devices this
// build and machine can use is trainer/backend_factory.h's business.
#pragma once

#include <optional>
#include <string>

#include "formats/status.h"
#include "trainer/precision.h"

namespace sluice::trainer {

// kAuto is a request only: a resolved device is kCpu or kCuda.
enum class Device { kAuto, kCpu, kCuda };

// "auto", "cpu", "cuda".
const char* DeviceName(Device device);
// InvalidArgument ("--device NAME: expected auto, cpu or cuda") for any other name.
Result<Device> ParseDevice(const std::string& name);

// "auto" → nullopt; "fp32", "bf16", "fp16" → that precision. InvalidArgument ("--precision
// NAME: expected auto, fp32, bf16 or fp16") for any other name.
Result<std::optional<Precision>> ParsePrecisionChoice(const std::string& name);

// The precision a resolved device trains in: nullopt (auto) → fp32 on the CPU, bf16 on CUDA; a
// named one as named (on the CPU the narrow ones are emulated, trainer/cpu_backend.h).
// *note (optional) says what the choice means.
Precision ResolvePrecision(Device device, std::optional<Precision> precision,
                           std::string* note = nullptr);

}  // namespace sluice::trainer
