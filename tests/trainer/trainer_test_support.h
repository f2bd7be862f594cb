// A small learnable data set (`sluice synth` photo crops: 4 classes, 320 train + 80 val images)
// served by a real `sluice serve` as datasets "train" (num_classes 4) and "val", and trainer
// options sized to train on it in seconds.
#pragma once

#include <cstdlib>
#include <string>
#include <utility>

#include "tests/server/serve_test_support.h"
#include "trainer/trainer.h"

namespace sluice::testing {

struct SynthServer {
  // listen: the server's address; start false: Start() starts it later. train_extra: more of
  // the train dataset's pipeline (textproto fields).
  explicit SynthServer(int num_classes = 4, std::string listen = "127.0.0.1:0", bool start = true,
                       const std::string& train_extra = "")
      : listen(std::move(listen)) {
    // $SLUICE_PHOTOS where Debian's mate-backgrounds is not installed (the lent GPU machine).
    const char* photos = std::getenv("SLUICE_PHOTOS");
    const CommandResult synth = RunSluice(
        "synth --photos " +
        std::string(photos != nullptr && *photos != '\0' ? photos
                                                          : "/usr/share/backgrounds/mate/nature") +
        " --classes 4 --images 400 "
        "--val-fraction 0.2 --shards 4 --val-shards 1 --seed 1 --threads 2 --out " +
        dir.file("data"));
    if (synth.exit_code != 0) throw std::runtime_error("sluice synth failed: " + synth.err);
    const std::string classes =
        num_classes > 0 ? "num_classes: " + std::to_string(num_classes) + " " : "";
    WriteAll(dir.file("sluice.textproto"),
             "listen: \"" + this->listen + "\"\n" +
                 "datasets { name: \"train\" " +
                 classes + "pipeline { files: \"" + dir.file("data/train-*") +
                 "\" cache { mode: CACHE_DECODED } threads: 2 shuffle { buffer_size: 320 } " +
                 train_extra + " } }\n"
                 "datasets { name: \"val\" " +
                 classes + "pipeline { files: \"" + dir.file("data/validation-*") +
                 "\" mode: MODE_EVAL epochs: 1 threads: 2 } }\n");
    if (start) Start();
  }

  void Start() {
    server = std::make_unique<ServerProcess>(
        std::vector<std::string>{"--config", dir.file("sluice.textproto")});
    if (!server->running()) throw std::runtime_error("sluice serve failed: " + server->output());
  }

  trainer::TrainerOptions Options() const {
    trainer::TrainerOptions o;
    o.targets = {server ? server->address() : listen};
    o.device = trainer::Device::kCpu;  // the CPU reference; the GPU tests ask for kCuda
    o.dataset = "train";
    o.eval_dataset = "val";
    o.batch_size = 32;
    o.image_size = 32;
    o.patch = 8;
    o.width = 64;
    o.depth = 2;
    o.steps = 300;
    o.log_every = 50;
    o.seed = 3;
    return o;
  }

  std::string listen;
  TempDir dir;
  std::unique_ptr<ServerProcess> server;
};

}  // namespace sluice::testing
