// `sluice-trainer`: trains the patch-embedding MLP classifier on batches streamed by `sluice
// serve`. Exit 0 on success, 1 when training fails, 2 for bad flags or a backend this build lacks.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>

#include "client/client.h"
#include "client/wire/token_file.h"
#include "trainer/trainer.h"

namespace {

// Exit code 2: the run cannot start as configured (bad or unsupported options, no usable device).
int Fail(const sluice::Status& status) {
  std::cout.flush();
  std::cerr << "sluice-trainer: " << status.ToString() << "\n";
  const sluice::StatusCode code = status.code();
  return code == sluice::StatusCode::kUnimplemented ||
                 code == sluice::StatusCode::kInvalidArgument ||
                 code == sluice::StatusCode::kFailedPrecondition
             ? 2
             : 1;
}

}  // namespace

int main(int argc, char** argv) {
  using sluice::trainer::TrainerOptions;
  TrainerOptions o;
  std::string token_file, device = "auto", precision = "auto";
  CLI::App app("Train a patch-embedding MLP classifier on batches from `sluice serve`.",
               "sluice-trainer");
  app.add_option("--target", o.targets, "HOST:PORT, unix:PATH or dns:///HOST:PORT (repeatable)")
      ->required();
  app.add_option("--dataset", o.dataset, "Training dataset (default train)");
  app.add_option("--eval-dataset", o.eval_dataset, "Eval dataset, read in eval mode, one epoch");
  app.add_option("--steps", o.steps, "Optimizer steps in all (default 100)")
      ->check(CLI::PositiveNumber);
  app.add_option("--batch-size", o.batch_size, "Images per micro-batch (default 32)")
      ->check(CLI::PositiveNumber);
  app.add_option("--image-size", o.image_size, "Image side S (default 32)")
      ->check(CLI::PositiveNumber);
  app.add_option("--device", device,
                 "auto, cpu or cuda (default auto: cuda when a device is usable)");
  app.add_option("--precision", precision,
                 "auto, fp32, bf16 or fp16 (GEMM inputs; dynamic loss scaling with fp16). Default "
                 "auto: bf16 on CUDA, fp32 on the CPU (where bf16/fp16 are emulated, for tests)");
  app.add_option("--loss-scale", o.loss_scale.initial,
                 "fp16: initial dynamic loss scale (default 32768, the cap)")
      ->check(CLI::PositiveNumber)
      ->check(CLI::Range(0.0f, o.loss_scale.max_scale));
  app.add_option("--loss-scale-window", o.loss_scale.growth_interval,
                 "fp16: clean steps before the loss scale doubles (default 2000)")
      ->check(CLI::PositiveNumber);
  app.add_option("--accum", o.accum, "Micro-batches per step (default 1)")
      ->check(CLI::PositiveNumber);
  app.add_option("--lr", o.lr, "Peak learning rate (default 1e-3)");
  app.add_option("--warmup-steps", o.warmup_steps, "Linear warm-up (default min(100, steps/10))");
  app.add_option("--weight-decay", o.adamw.weight_decay,
                 "AdamW weight decay on linear weights (default 0.05)");
  app.add_option("--clip-norm", o.adamw.clip_norm,
                 "Global gradient-norm clip, 0 = off (default 1)");
  app.add_option("--width", o.width, "Model width D (default 64)");
  app.add_option("--depth", o.depth, "Residual MLP blocks L (default 2)");
  app.add_option("--patch", o.patch, "Patch side P (default 8)");
  app.add_option("--num-classes", o.num_classes, "Classes (default: the dataset's num_classes)");
  app.add_option("--checkpoint", o.checkpoint_dir, "Checkpoint directory (written at the end)");
  app.add_option("--checkpoint-every", o.checkpoint_every, "Also checkpoint every N steps");
  app.add_flag("--resume", o.resume,
               "Continue from the checkpoint in --checkpoint DIR if there is one");
  app.add_option("--stop-after", o.stop_after,
                 "Stop after N steps of this run (schedule still spans --steps)");
  app.add_option("--log-every", o.log_every, "Progress line every N steps (default 10)")
      ->check(CLI::PositiveNumber);
  app.add_option("--eval-every", o.eval_every, "Evaluate every M steps (default: at the end only)");
  app.add_option("--seed", o.seed, "Model init and training-stream seed (default 0)");
  app.add_option("--token-file", token_file, "File holding the server's bearer token");
  app.add_flag("--allow-partial-fleet", o.allow_partial_fleet,
               "When the targets do not reach every part of a `sluice serve --shard I/N` fleet, "
               "warn and train on the parts reached (default: refuse)");
  CLI11_PARSE(app, argc, argv);

  if (!token_file.empty()) {
    sluice::Result<std::string> token = sluice::ReadTokenFile(token_file);
    if (!token.ok()) {
      std::cerr << "sluice-trainer: " << token.status().ToString() << "\n";
      return 2;
    }
    o.token = *token;
  }
  // Both names are checked before Train() starts, so a misspelt one is reported (exit 2) before
  // any device is probed.
  sluice::Result<sluice::trainer::Device> parsed_device = sluice::trainer::ParseDevice(device);
  if (!parsed_device.ok()) return Fail(parsed_device.status());
  o.device = *parsed_device;
  sluice::Result<std::optional<sluice::trainer::Precision>> parsed_precision =
      sluice::trainer::ParsePrecisionChoice(precision);
  if (!parsed_precision.ok()) return Fail(parsed_precision.status());
  o.precision = *parsed_precision;
  sluice::Result<sluice::trainer::TrainSummary> summary = sluice::trainer::Train(o, std::cout);
  if (!summary.ok()) return Fail(summary.status());
  std::cout << summary->ToJson() << std::endl;
  return 0;
}
