// FanInStream's per-batch check (client/fan_in_stream.h FormatOf, Merge): batches of servers that
// deliver other labels or features do not pass as one stream's, and a batch of 0 samples, which
// shows neither labels nor raggedness, agrees with either and leaves them to the next batch.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "client/fan_in_stream.h"

namespace sluice {
namespace {

// A batch of n samples, labelled or not, with one int64 feature "tags" (ragged or one a sample).
struct Made {
  Made(int32_t n, bool labelled, bool ragged) : labels(labelled ? n : 0, 1) {
    tags.name = "tags";
    tags.type = FeatureType::kInt64;
    if (ragged) tags.row_lengths.assign(n, 0);
    batch.meta.n = n;
    batch.labels = {labels.data(), labels.size()};
    batch.features = {&tags, 1};
  }
  std::vector<int32_t> labels;
  ReceivedFeature tags;
  ReceivedBatch batch;
};

FanInStream::Format FormatOf(int32_t n, bool labelled, bool ragged) {
  return FanInStream::FormatOf(Made(n, labelled, ragged).batch);
}

TEST_CASE("BatchesWithOtherLabelsOrFeaturesAreNotOneStreamsAndZeroSamplesAgreeWithEither") {
  FanInStream::Format first = FormatOf(4, false, true);
  CHECK(FanInStream::Merge(&first, FormatOf(2, false, true)));
  CHECK_FALSE(FanInStream::Merge(&first, FormatOf(2, true, true)));    // labelled after unlabeled
  CHECK_FALSE(FanInStream::Merge(&first, FormatOf(2, false, false)));  // one row a sample
  FanInStream::Format other = FormatOf(2, false, true);
  other.features[0].name = "words";
  CHECK_FALSE(FanInStream::Merge(&first, other));
  other = FormatOf(2, false, true);
  other.features[0].row_shape = {4};
  CHECK_FALSE(FanInStream::Merge(&first, other));
  other = FormatOf(2, false, true);
  other.features[0].type = FeatureType::kFloat;
  CHECK_FALSE(FanInStream::Merge(&first, other));
  other = FormatOf(2, false, true);
  other.features.clear();
  CHECK_FALSE(FanInStream::Merge(&first, other));
  CHECK(FanInStream::FormatName(first) ==
        "uint8 NHWC without mixed labels, unlabeled, features [tags int64[] ragged]");

  // 0 samples first: what the next batch shows is then held to.
  FanInStream::Format empty = FormatOf(0, false, false);
  CHECK(FanInStream::FormatName(empty) == "uint8 NHWC, features [tags int64[]]");
  CHECK(FanInStream::Merge(&empty, FormatOf(0, true, true)));
  CHECK(FanInStream::Merge(&empty, FormatOf(3, true, true)));
  CHECK_FALSE(FanInStream::Merge(&empty, FormatOf(3, false, true)));
  CHECK_FALSE(FanInStream::Merge(&empty, FormatOf(3, true, false)));
  CHECK(FanInStream::Merge(&empty, FormatOf(0, false, false)));
  CHECK(FanInStream::FormatName(empty) ==
        "uint8 NHWC without mixed labels, labelled, features [tags int64[] ragged]");
}

}  // namespace
}  // namespace sluice
