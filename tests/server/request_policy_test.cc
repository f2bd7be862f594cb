// The policy on StreamRequest: which names find a dataset, which overrides a dataset accepts, and
// the message that names the field and bound of each refusal.
#include "server/request_policy.h"

#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <google/protobuf/text_format.h>
#include <google/protobuf/util/message_differencer.h>

#include "server/server_config.h"
#include "tests/server/request_policy_test_data.h"
#include "tests/test_support.h"

namespace sluice {
namespace {

using google::protobuf::TextFormat;
using testing::TempDir;

// testing::ThreeDatasetsConfig over three empty shards.
class Server {
 public:
  Server() {
    for (const char* name : {"a-0.tfrecord", "a-1.tfrecord", "a-2.tfrecord"}) {
      testing::WriteAll(dir_.file(name), "");
    }
    const std::string text = testing::ThreeDatasetsConfig(dir_.file("a-*.tfrecord"));
    v1::ServerConfig config;
    REQUIRE(TextFormat::ParseFromString(text, &config));
    Result<v1::ServerConfig> validated = ValidateServerConfig(config, DetectMemoryLimit());
    INFO(validated.status().ToString());
    REQUIRE(validated.ok());
    config_ = *validated;
  }

  const v1::ServerConfig& config() const { return config_; }

  Result<v1::PipelineOptions> Request(const std::string& dataset, const std::string& request) {
    v1::StreamRequest r;
    REQUIRE(TextFormat::ParseFromString(request, &r));
    r.set_dataset(dataset);
    Result<const v1::DatasetConfig*> d = FindDataset(config_, dataset);
    REQUIRE(d.ok());
    return PipelineForRequest(config_, **d, r);
  }

 private:
  TempDir dir_;
  v1::ServerConfig config_;
};

struct Accepted {
  std::string dataset;
  std::string request;  // text-format StreamRequest
  std::string expect;   // text-format PipelineOptions: the fields it sets must match
};

TEST_CASE("OverridesWithinTheLimitsAreApplied") {
  const std::vector<Accepted> cases = {
      {"train", "", "batch_size: 256 image_height: 224 image_width: 224"},
      {"train", "batch_size: 64", "batch_size: 64"},
      {"train", "batch_size: 1024", "batch_size: 1024"},
      {"train", "image_height: 96", "image_height: 96 image_width: 96 batch_size: 256"},
      {"train", "image_height: 96 image_width: 128", "image_height: 96 image_width: 128"},
      {"train", "image_width: 128", "image_height: 224 image_width: 128"},
      {"train", "mode: MODE_EVAL", "mode: MODE_EVAL"},
      {"train", "seed: 42", "seed: 42"},
      {"train", "epochs: 3", "epochs: 3"},
      {"train", "drop_remainder: true", "drop_remainder: true"},
      {"train", "shard { index: 2 count: 3 }", "shard { index: 2 count: 3 }"},
      {"train", "shard { index: 0 count: 100000 }", "shard { count: 100000 }"},
      {"sharded", "", "shard { index: 1 count: 16 }"},
      {"sharded", "shard { index: 2 count: 3 }", "shard { index: 33 count: 48 }"},
      {"eval",
       "batch_size: 32 image_height: 128 image_width: 128 mode: MODE_EVAL seed: 7 epochs: 1 "
       "drop_remainder: true",
       "batch_size: 32 image_height: 128 image_width: 128 mode: MODE_EVAL seed: 7 epochs: 1"},
      {"train", "start_position { epoch: 1 index: 5 end_record: 40 }", ""},
      {"train", "job_name: \"run-7.rank:0\" start_position { }", ""},
      {"train", "job_name: \"j\" start_position { epoch: 2 }", ""},
      {"train", "job_name: \"j\" num_consumers: 3 consumer_index: 2", ""},
      {"train", "job_name: \"j\" num_consumers: 4096 equal_shares: EQUAL_SHARES_PAD",
       "equal_shares: EQUAL_SHARES_PAD"},
      {"train", "batch_size: 64 image_height: 1024", "batch_size: 64 image_height: 1024"},
      {"train", "equal_shares: EQUAL_SHARES_PAD", "equal_shares: EQUAL_SHARES_PAD"},
      {"train", "equal_shares: EQUAL_SHARES_OFF", "equal_shares: EQUAL_SHARES_OFF"},
  };
  Server server;
  for (const Accepted& c : cases) {
    INFO(c.dataset << " { " << c.request << " }");
    Result<v1::PipelineOptions> o = server.Request(c.dataset, c.request);
    INFO(o.status().ToString());
    REQUIRE(o.ok());
    v1::PipelineOptions want;
    REQUIRE(TextFormat::ParseFromString(c.expect, &want));
    google::protobuf::util::MessageDifferencer differ;
    differ.set_scope(google::protobuf::util::MessageDifferencer::PARTIAL);
    std::string diff;
    differ.ReportDifferencesToString(&diff);
    bool same = differ.Compare(want, *o);
    INFO(diff);
    CHECK(same);
    // Everything else is the dataset's.
    CHECK(o->files_size() == 3);
    CHECK(o->memory_budget_bytes() == int64_t{1} << 30);
  }
}

struct Refused {
  std::string dataset;
  std::string request;
  std::string message;  // the whole error message
};

TEST_CASE("OverridesOutsideTheLimitsAreRefusedByField") {
  const std::vector<Refused> cases = {
      {"train", "batch_size: 5000", "batch_size 5000 is over this dataset's limit 1024"},
      {"train", "batch_size: -1", "batch_size -1 is negative"},
      {"train", "image_height: 8", "image_height 8 is under the minimum 32"},
      {"train", "image_height: 2000", "image_height 2000 is over the maximum 1024"},
      {"train", "image_height: 64 image_width: 16", "image_width 16 is under the minimum 32"},
      {"train", "image_width: -5", "image_width -5 is negative"},
      {"train", "epochs: -1", "epochs -1 is negative"},
      {"train", "shard { index: 3 count: 3 }", "shard.index 3 is outside [0, 3)"},
      {"train", "shard { index: -1 count: 3 }", "shard.index -1 is outside [0, 3)"},
      {"train", "shard { index: 1 }", "shard.index 1 is outside [0, 1)"},
      {"train", "shard { count: -2 }", "shard.count -2 is negative"},
      {"train", "shard { count: 100001 }", "shard.count 100001 is over 100000"},
      {"sharded", "shard { count: 100000 }",
       "shard.count 100000 within this server's own 16 shards makes 1600000, over 1048576"},
      {"eval", "mode: MODE_TRAIN", "mode is fixed by this dataset (MODE_EVAL)"},
      {"eval", "batch_size: 64", "batch_size is fixed by this dataset (32)"},
      {"eval", "image_height: 64", "image_height is fixed by this dataset (128)"},
      {"eval", "image_width: 64", "image_width is fixed by this dataset (128)"},
      {"eval", "seed: 8", "seed is fixed by this dataset (7)"},
      {"eval", "epochs: 0", "epochs is fixed by this dataset (1)"},
      {"eval", "drop_remainder: false", "drop_remainder is fixed by this dataset (true)"},
      {"train", "start_position { epoch: -1 }", "start_position.epoch -1 is negative"},
      {"train", "start_position { index: -2 }", "start_position.index -2 is negative"},
      {"train", "start_position { end_record: -3 }", "start_position.end_record -3 is negative"},
      {"train", "job_name: \"j\" start_position { index: 3 }",
       "start_position.index 3 / end_record 0: a shared job takes only an epoch's start (epoch, "
       "0, 0), naming its run from that epoch; index and end_record resume private streams"},
      {"train", "job_name: \"j\" start_position { epoch: 1 end_record: 5 }",
       "start_position.index 0 / end_record 5: a shared job takes only an epoch's start (epoch, "
       "0, 0), naming its run from that epoch; index and end_record resume private streams"},
      {"train", "job_name: \"j\" num_consumers: -1", "num_consumers -1 is negative"},
      {"train", "job_name: \"j\" num_consumers: 4097", "num_consumers 4097 is over 4096"},
      {"train", "job_name: \"j\" consumer_index: 1",
       "consumer_index 1 without num_consumers: it names one of a job's num_consumers consumers "
       "in lockstep"},
      {"train", "job_name: \"j\" num_consumers: 3 consumer_index: 3",
       "consumer_index 3 is outside [0, 3) (num_consumers)"},
      {"train", "job_name: \"j\" num_consumers: 3 consumer_index: -1",
       "consumer_index -1 is outside [0, 3) (num_consumers)"},
      {"train", "num_consumers: 2",
       "num_consumers 2 needs a job_name: consumers in lockstep share one named job"},
      {"train", "job_name: \"j\" num_consumers: 2 equal_shares: EQUAL_SHARES_OFF",
       "num_consumers 2 with equal_shares OFF: consumers in lockstep get equal shares; ask for "
       "DROP or PAD"},
      {"eval", "start_position { epoch: 1 }",
       "start_position.epoch 1 is past the stream's 1 epochs"},
      {"train", "job_name: \"two words\"",
       "job_name 'two words' is not at most 128 printable ASCII characters without spaces"},
      {"train", "batch_size: 1024 image_height: 1024",
       "a batch of 1024 at 1024x1024 is 3.0 GiB, over the server's max_batch_bytes 256 MiB; ask "
       "for a smaller batch or image"},
      {"train", "batch_size: 512 image_height: 224 image_width: 1024",
       "a batch of 512 at 224x1024 is 336.0 MiB, over the server's max_batch_bytes 256 MiB; ask "
       "for a smaller batch or image"},
  };
  Server server;
  for (const Refused& c : cases) {
    INFO(c.dataset << " { " << c.request << " }");
    Result<v1::PipelineOptions> o = server.Request(c.dataset, c.request);
    REQUIRE(!o.ok());
    CHECK(o.status().code() == StatusCode::kInvalidArgument);
    CHECK(o.status().message() == c.message);
  }
}

TEST_CASE("FeaturesCountInTheBatchMessageLimitAndDescribeDatasetListsThem") {
  // 32 samples of up to 16 MiB of features each cannot go in a 256 MiB message; without the
  // features the same request is accepted.
  Server server;
  v1::ServerConfig config = server.config();
  v1::DatasetConfig* train = config.mutable_datasets(0);
  REQUIRE(train->name() == "train");
  v1::StreamRequest r;
  r.set_dataset("train");
  r.set_batch_size(32);
  REQUIRE(PipelineForRequest(config, *train, r).ok());
  v1::FeatureSpec* spec = train->mutable_pipeline()->add_features();
  spec->set_key("image/caption");
  spec->set_name("caption");
  spec->set_type(v1::FEATURE_TYPE_BYTES);
  train->mutable_pipeline()->set_max_feature_bytes(16 << 20);
  train->mutable_pipeline()->mutable_boxes()->set_enabled(true);
  Result<v1::PipelineOptions> got = PipelineForRequest(config, *train, r);
  REQUIRE(!got.ok());
  CHECK(got.status().code() == StatusCode::kInvalidArgument);
  CHECK_THAT(got.status().message(),
             Catch::StartsWith("a batch of 32 at 224x224 with features of up to 16 MiB a sample "
                               "is 6"));
  CHECK_THAT(got.status().message(), Catch::EndsWith("over the server's max_batch_bytes 256 MiB; "
                                                     "ask for a smaller batch or image"));
  r.set_batch_size(8);
  CHECK(PipelineForRequest(config, *train, r).ok());

  train->mutable_pipeline()->set_unlabeled(true);
  const v1::DatasetInfo info = DescribeDataset(*train, config.fleet_shard());
  CHECK(info.unlabeled());
  REQUIRE(info.features_size() == 3);
  CHECK(info.features(0).name() == "caption");
  CHECK(info.features(0).type() == v1::FEATURE_TYPE_BYTES);
  CHECK(info.features(0).ragged());
  CHECK(info.features(1).name() == "boxes");
  CHECK(info.features(1).row_shape_size() == 1);
  CHECK(info.features(2).name() == "box_labels");
  CHECK_FALSE(server.config().datasets(0).pipeline().unlabeled());
  CHECK(DescribeDataset(server.config().datasets(0), config.fleet_shard()).features_size() == 0);
}

TEST_CASE("LockstepUnderADatasetThatSetsEqualSharesOffNamesTheDataset") {
  Server server;
  v1::ServerConfig config = server.config();
  v1::DatasetConfig* train = config.mutable_datasets(0);
  REQUIRE(train->name() == "train");
  train->mutable_pipeline()->set_equal_shares(v1::EQUAL_SHARES_OFF);
  v1::StreamRequest r;
  r.set_dataset("train");
  r.set_job_name("j");
  r.set_num_consumers(2);
  Result<v1::PipelineOptions> got = PipelineForRequest(config, *train, r);
  REQUIRE(!got.ok());
  CHECK(got.status().message() ==
        "num_consumers 2 with equal_shares OFF (dataset 'train' sets it; the request left it "
        "unset): consumers in lockstep get equal shares; ask for DROP or PAD");
}

TEST_CASE("UnknownEnumModeIsRefused") {
  Server server;
  v1::StreamRequest r;
  r.set_mode(static_cast<v1::Mode>(5));
  Result<v1::PipelineOptions> o =
      PipelineForRequest(server.config(), server.config().datasets(0), r);
  REQUIRE(!o.ok());
  CHECK(o.status().message() == "mode 5 is not a sluice.v1.Mode");
}

TEST_CASE("UnknownEqualSharesIsRefused") {
  Server server;
  v1::StreamRequest r;
  r.set_equal_shares(static_cast<v1::EqualShares>(7));
  Result<v1::PipelineOptions> o =
      PipelineForRequest(server.config(), server.config().datasets(0), r);
  REQUIRE(!o.ok());
  CHECK(o.status().message() == "equal_shares 7 is not a sluice.v1.EqualShares");
}

TEST_CASE("DatasetsAreFoundByNameNeverByPath") {
  Server server;
  Result<const v1::DatasetConfig*> train = FindDataset(server.config(), "train");
  REQUIRE(train.ok());
  CHECK((*train)->name() == "train");

  for (const char* name :
       {"../train", "/data/train-*", "train*", "tr?in", "a\\b", "[t]rain", ".train", "."}) {
    INFO(name);
    Result<const v1::DatasetConfig*> d = FindDataset(server.config(), name);
    REQUIRE(!d.ok());
    CHECK(d.status().code() == StatusCode::kInvalidArgument);
    CHECK(d.status().message() ==
          std::string("dataset names are names from the server's configuration, not paths or "
                      "globs: '") +
              name + "'; ListDatasets shows them");
  }
  CHECK(FindDataset(server.config(), "").status().code() == StatusCode::kInvalidArgument);

  Result<const v1::DatasetConfig*> unknown = FindDataset(server.config(), "nope");
  CHECK(unknown.status().code() == StatusCode::kNotFound);
  CHECK(unknown.status().message() == "no dataset 'nope'; this server has: train, eval, sharded");
  // What a client sent is echoed printable and short.
  std::string odd = "x\n" + std::string(200, 'y');
  CHECK(FindDataset(server.config(), odd).status().message() ==
        "no dataset 'x\\x0a" + std::string(78, 'y') +
            "...'; this server has: train, eval, sharded");
}

TEST_CASE("DescribeDatasetShowsDefaultsLimitsAndFixedFields") {
  Server server;
  v1::DatasetInfo train =
      DescribeDataset(server.config().datasets(0), server.config().fleet_shard());
  v1::DatasetInfo want;
  REQUIRE(TextFormat::ParseFromString(
      "name: \"train\" files: 3 num_classes: 10 batch_size: 256 image_height: 224 "
      "image_width: 224 mode: MODE_TRAIN max_batch_size: 1024 min_image_size: 32 "
      "max_image_size: 1024 "
      "transform_sets { name: \"default\" transforms { preset: PRESET_IMAGENET_TRAIN } }",
      &want));
  CHECK(google::protobuf::util::MessageDifferencer::Equals(train, want));

  v1::DatasetInfo eval =
      DescribeDataset(server.config().datasets(1), server.config().fleet_shard());
  CHECK(eval.batch_size() == 32);
  CHECK(eval.image_height() == 128);
  CHECK(eval.image_width() == 128);
  CHECK(eval.mode() == v1::MODE_EVAL);
  CHECK(std::vector<std::string>(eval.fixed_fields().begin(), eval.fixed_fields().end()) ==
        std::vector<std::string>{"batch_size", "image_height", "image_width", "mode", "seed",
                                 "epochs", "drop_remainder"});
}

}  // namespace
}  // namespace sluice
