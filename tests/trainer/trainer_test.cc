// The training loop end to end on the CPU backend: a real `sluice serve` on loopback, the real C++
// client, a small learnable synth set.
#include "trainer/trainer.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <sstream>
#include <thread>

#include "tests/trainer/trainer_test_support.h"

namespace sluice::trainer {
namespace {

using testing::SynthServer;

TEST_CASE("LossFallsByHalfAndEvalBeatsChance") {
  SynthServer server;
  TrainerOptions o = server.Options();
  o.eval_every = 100;
  std::ostringstream log;
  Result<TrainSummary> s = Train(o, log);
  INFO(log.str());
  REQUIRE(s.ok());
  CHECK(s->steps == 300);
  CHECK(s->device == Device::kCpu);
  CHECK(s->initial_loss == Approx(std::log(4.0)).margin(0.2));
  CHECK(s->final_loss <= 0.5 * s->initial_loss);
  CHECK(s->eval_accuracy >= 2 * 0.25);
  CHECK(s->skipped_updates == 0);
  CHECK(s->images_per_sec > 0);
  CHECK(s->data_wait_fraction >= 0);
  CHECK(s->data_wait_fraction < 1);
  CHECK(log.str().rfind("sluice-trainer: device cpu (as asked), fp32", 0) == 0);
  CHECK(log.str().find("eval at step 100") != std::string::npos);
  CHECK(log.str().find("eval final, at step 300") != std::string::npos);
}

// `o` trained for o.steps straight, and again stopped one step early with a checkpoint and
// resumed for the last step.
struct ResumedRuns {
  TrainSummary straight, first, resumed;
  std::string log;
};
ResumedRuns TrainStraightAndResumed(const SynthServer& server, TrainerOptions o) {
  ResumedRuns runs;
  std::ostringstream log;
  Result<TrainSummary> straight = Train(o, log);
  REQUIRE(straight.ok());
  REQUIRE(straight->losses.size() == static_cast<size_t>(o.steps));
  o.checkpoint_dir = server.dir.file("ck");
  o.stop_after = o.steps - 1;
  Result<TrainSummary> first = Train(o, log);
  REQUIRE(first.ok());
  REQUIRE(first->steps == o.steps - 1);
  o.stop_after = 0;
  o.resume = true;
  Result<TrainSummary> resumed = Train(o, log);
  INFO(log.str());
  REQUIRE(resumed.ok());
  CHECK(resumed->steps == o.steps);
  REQUIRE(resumed->losses.size() == 1);
  return {*straight, *first, *resumed, log.str()};
}

TEST_CASE("ResumeGivesTheSameNextStepLoss") {
  SynthServer server;
  TrainerOptions o = server.Options();
  o.steps = 13;
  o.accum = 2;  // micro-batches and the stream position of the last one
  o.eval_dataset.clear();
  const ResumedRuns r = TrainStraightAndResumed(server, o);
  for (int i = 0; i < 12; ++i) CHECK(r.first.losses[i] == r.straight.losses[i]);
  CHECK(r.resumed.losses[0] == r.straight.losses[12]);  // bitwise
  CHECK(r.log.find("resuming from") != std::string::npos);
}

TEST_CASE("CheckpointOfAnotherModelIsRefused") {
  SynthServer server;
  TrainerOptions o = server.Options();
  o.steps = 2;
  o.eval_dataset.clear();
  o.checkpoint_dir = server.dir.file("ck");
  std::ostringstream log;
  REQUIRE(Train(o, log).ok());
  o.resume = true;
  o.width = 32;
  o.steps = 3;
  const Status s = Train(o, log).status();
  CHECK(s.code() == StatusCode::kFailedPrecondition);
  CHECK(s.message().find("width 64") != std::string::npos);
}

TEST_CASE("NonFiniteStepIsSkippedAndReported") {
  SynthServer server;
  TrainerOptions o = server.Options();
  o.steps = 4;
  o.eval_dataset.clear();
  o.lr = 1e38f;  // the first update sends the weights to ±1e38; later losses overflow
  o.warmup_steps = 0;
  o.adamw.weight_decay = 0;
  std::ostringstream log;
  Result<TrainSummary> s = Train(o, log);
  INFO(log.str());
  REQUIRE(s.ok());
  CHECK(s->skipped_updates >= 1);
  CHECK(log.str().find("update skipped") != std::string::npos);
}

TEST_CASE("MissingNumClassesIsAnError") {
  SynthServer server(/*num_classes=*/0);
  TrainerOptions o = server.Options();
  o.steps = 2;
  std::ostringstream log;
  const Status s = Train(o, log).status();
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK(s.message().find("--num-classes") != std::string::npos);
  o.num_classes = 4;
  o.eval_dataset.clear();
  CHECK(Train(o, log).ok());
}

TEST_CASE("BatchesTheModelCannotTakeAreRefusedNamingTheirDtypeOrMixedLabels") {
  // The model normalizes uint8 NHWC on the device and trains on hard labels: a dataset whose
  // transform list makes float batches, or mixes labels, is refused before any step.
  struct Case {
    std::string transforms, says;
  };
  const std::vector<Case> cases = {
      {"transforms { preset: PRESET_IMAGENET_TRAIN } transforms { normalize {} } "
       "transforms { output { dtype: DTYPE_BFLOAT16 layout: LAYOUT_NCHW } }",
       "holds bfloat16 NCHW images; sluice-trainer takes uint8 NHWC"},
      {"transforms { preset: PRESET_IMAGENET_TRAIN } transforms { mixup {} }",
       "has mixed labels (mixup or cutmix)"},
  };
  for (const Case& c : cases) {
    SynthServer server(4, "127.0.0.1:0", true, c.transforms);
    TrainerOptions o = server.Options();
    o.steps = 2;
    o.eval_dataset.clear();
    std::ostringstream log;
    const Status s = Train(o, log).status();
    INFO(s.ToString());
    CHECK(s.code() == StatusCode::kFailedPrecondition);
    CHECK(s.message().find(c.says) != std::string::npos);
  }
}

TEST_CASE("AnUnlabeledDatasetIsRefusedNamingItBeforeAnyStep") {
  // The server lists the dataset as unlabeled (DatasetInfo.unlabeled): the trainer, which
  // trains on labels, refuses it for --dataset and for --eval-dataset.
  SynthServer server(/*num_classes=*/0, "127.0.0.1:0", true, "unlabeled: true");
  TrainerOptions o = server.Options();
  o.steps = 2;
  o.eval_dataset.clear();
  std::ostringstream log;
  Status s = Train(o, log).status();
  INFO(s.ToString());
  CHECK(s.code() == StatusCode::kFailedPrecondition);
  CHECK(s.message().find("--dataset train: the dataset is unlabeled") != std::string::npos);
  o.dataset = "val";
  o.eval_dataset = "train";
  s = Train(o, log).status();
  CHECK(s.code() == StatusCode::kFailedPrecondition);
  CHECK(s.message().find("--eval-dataset train: the dataset is unlabeled") != std::string::npos);
}

TEST_CASE("UnknownDatasetIsNotFoundListingTheServersDatasetsBeforeAnyStep") {
  SynthServer server;
  struct Case {
    std::string dataset, eval_dataset;
    int num_classes;
    std::string says;
  };
  // With --num-classes too: the name is checked whatever the model needs from the server.
  const std::vector<Case> cases = {
      {"trian", "val", 0, "--dataset: no dataset 'trian'; the server has: train, val"},
      {"trian", "", 4, "--dataset: no dataset 'trian'; the server has: train, val"},
      {"train", "vall", 0, "--eval-dataset: no dataset 'vall'; the server has: train, val"},
  };
  for (const Case& c : cases) {
    TrainerOptions o = server.Options();
    o.dataset = c.dataset;
    o.eval_dataset = c.eval_dataset;
    o.num_classes = c.num_classes;
    o.steps = 2;
    std::ostringstream log;
    const Status s = Train(o, log).status();
    INFO(s.ToString());
    CHECK(s.code() == StatusCode::kNotFound);
    CHECK(s.message().find(c.says) != std::string::npos);
    CHECK(log.str().find("step") == std::string::npos);
  }
}

// A trainer started before its server (pods that come up in any order) waits for it, as its
// stream would (reconnect_deadline), instead of failing at its first ListDatasets; with
// --num-classes too, which needs nothing from the server's list but the dataset's name.
TEST_CASE("ATrainerStartedBeforeItsServerWaitsForItAndTrains") {
  testing::TempDir sockets;
  SynthServer server(4, "unix:" + sockets.file("sluice.sock"), /*start=*/false);
  TrainerOptions o = server.Options();
  o.eval_dataset.clear();
  o.num_classes = 4;
  o.steps = 10;
  std::ostringstream log;
  Result<TrainSummary> s = InvalidArgument("not run");
  std::thread trainer([&] { s = Train(o, log); });
  // The scenario itself, not a wait for a condition: the server comes up seconds after.
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  server.Start();
  trainer.join();
  INFO(log.str());
  REQUIRE(s.ok());
  CHECK(s->steps == 10);
}

TEST_CASE("AutoDeviceSaysWhyAndCudaWithoutDeviceFailsClearly") {
  std::string note;
  CHECK(ResolveDevice(Device::kCpu, &note).value() == Device::kCpu);
  const Device chosen = ResolveDevice(Device::kAuto, &note).value();
  INFO(note);
  if (chosen == Device::kCpu) {
    // This machine: no CUDA backend built, or no usable device; either way the note says so.
    CHECK((note.find("no CUDA backend") != std::string::npos ||
           note.find("no usable CUDA device") != std::string::npos));
    const Status cuda = ResolveDevice(Device::kCuda, &note).status();
    CHECK((cuda.code() == StatusCode::kUnimplemented ||
           cuda.code() == StatusCode::kFailedPrecondition));
    CHECK(cuda.message().find("--device cuda") != std::string::npos);
  } else {
    CHECK(chosen == Device::kCuda);
    CHECK(note.find("CUDA device") != std::string::npos);
  }
  // Names: the command line's and the JSON summary's.
  CHECK(ParseDevice("tpu").status().code() == StatusCode::kInvalidArgument);
  CHECK(ParseDevice("tpu").status().message().find("--device tpu") != std::string::npos);
  for (const Device d : {Device::kAuto, Device::kCpu, Device::kCuda})
    CHECK(ParseDevice(DeviceName(d)).value() == d);
}

TEST_CASE("PrecisionFollowsTheDeviceAndNarrowOnesAreEmulatedOnTheCpu") {
  std::string note;
  // The command line's names: "auto" is no precision yet, the others name one.
  CHECK(ParsePrecisionChoice("auto").value() == std::nullopt);
  for (const Precision p : {Precision::kFp32, Precision::kBf16, Precision::kFp16})
    CHECK(ParsePrecisionChoice(PrecisionName(p)).value() == p);
  CHECK(ResolvePrecision(Device::kCpu, std::nullopt) == Precision::kFp32);
  CHECK(ResolvePrecision(Device::kCpu, Precision::kFp32) == Precision::kFp32);
  CHECK(ResolvePrecision(Device::kCpu, Precision::kBf16, &note) == Precision::kBf16);
  CHECK(note.find("emulated on the CPU") != std::string::npos);
  CHECK(ResolvePrecision(Device::kCpu, Precision::kFp16, &note) == Precision::kFp16);
  CHECK(note.find("dynamic loss scaling") != std::string::npos);
  CHECK(ResolvePrecision(Device::kCuda, std::nullopt) == Precision::kBf16);
  CHECK(ResolvePrecision(Device::kCuda, Precision::kBf16) == Precision::kBf16);
  CHECK(ResolvePrecision(Device::kCuda, Precision::kFp32) == Precision::kFp32);
  CHECK(ResolvePrecision(Device::kCuda, Precision::kFp16) == Precision::kFp16);
  const Status fp8 = ParsePrecisionChoice("fp8").status();
  CHECK(fp8.code() == StatusCode::kInvalidArgument);
  CHECK(fp8.message().find("--precision fp8") != std::string::npos);
}

// fp16 on the CPU: the narrow storage is emulated, so a loss scale far too high overflows the
// scaled logit gradients (> 65504) exactly as on a GPU; the scaler must back off, skip those
// steps, say so, and then learn like fp32.
TEST_CASE("Fp16OnCpuBacksOffFromOverflowThenLearns") {
  SynthServer server;
  TrainerOptions o = server.Options();
  o.precision = Precision::kFp16;
  o.eval_dataset.clear();
  o.steps = 200;
  o.loss_scale.initial = 16777216.0f;  // 2^24: the first steps must overflow
  o.loss_scale.growth_interval = 50;
  std::ostringstream log;
  Result<TrainSummary> s = Train(o, log);
  INFO(log.str());
  REQUIRE(s.ok());
  CHECK(s->precision == Precision::kFp16);
  CHECK(s->skipped_updates >= 1);
  CHECK(s->skipped_updates < 20);
  CHECK(log.str().find("gradient overflow at loss scale 1.67772e+07; update skipped, scale → "
                       "8.38861e+06") != std::string::npos);
  CHECK(log.str().find("loss-scale") != std::string::npos);
  CHECK(s->loss_scale > 0);
  CHECK(s->loss_scale < o.loss_scale.initial);
  CHECK(s->final_loss <= 0.5 * s->initial_loss);
  CHECK(s->ToJson().find("\"loss_scale\"") != std::string::npos);
  CHECK(s->ToJson().find("\"precision\":\"fp16\"") != std::string::npos);
}

TEST_CASE("Fp16ResumeRestoresTheLossScaleAndGivesTheSameNextStepLoss") {
  SynthServer server;
  TrainerOptions o = server.Options();
  o.precision = Precision::kFp16;
  o.eval_dataset.clear();
  o.steps = 9;
  // 2^18 overflows: the scale backs off before the checkpoint, so a resume that started again
  // from the initial scale would overflow (and skip) once more and end at another scale.
  o.loss_scale.initial = 262144.0f;
  o.loss_scale.growth_interval = 3;
  const ResumedRuns r = TrainStraightAndResumed(server, o);
  INFO(r.log);
  CHECK(r.straight.skipped_updates >= 1);
  CHECK(r.resumed.losses[0] == r.straight.losses[8]);
  CHECK(r.resumed.loss_scale == r.straight.loss_scale);
  CHECK(r.resumed.skipped_updates + r.first.skipped_updates == r.straight.skipped_updates);
}

}  // namespace
}  // namespace sluice::trainer
