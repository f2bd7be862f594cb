// The server configuration the request-policy tests and the StreamRequest fuzz target share.
#pragma once

#include <string>

namespace sluice::testing {

// Three datasets over the files `glob` matches: "train" with default limits, "eval" fixing
// every field a request may change, "sharded" being this server's shard 1 of 16. Text format.
inline std::string ThreeDatasetsConfig(const std::string& glob) {
  std::string text = R"(
    datasets { name: "train" num_classes: 10 pipeline { files: "$FILES" } }
    datasets {
      name: "eval"
      pipeline { files: "$FILES" batch_size: 32 image_height: 128 mode: MODE_EVAL seed: 7
                 epochs: 1 drop_remainder: true }
      limits { fix_batch_size: true fix_image_size: true fix_mode: true fix_seed: true
               fix_epochs: true fix_drop_remainder: true }
    }
    datasets { name: "sharded" pipeline { files: "$FILES" shard { index: 1 count: 16 } } })";
  for (size_t at; (at = text.find("$FILES")) != std::string::npos;) text.replace(at, 6, glob);
  return text;
}

}  // namespace sluice::testing
