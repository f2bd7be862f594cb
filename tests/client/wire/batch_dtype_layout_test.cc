// A batch's element type, layout and mixed labels on the wire (service.proto Batch.dtype, layout,
// mixed_labels, label_weights): every dtype and layout round-trips through both encodings and
// reads as protobuf reads it; a uint8 NHWC batch is the bytes it was before dtypes existed; and
// each way a message can disagree with itself is DataLoss naming the field.
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "client/wire/batch_wire.h"
#include "sluice/v1/service.pb.h"
#include "tests/client/wire/batch_wire_test_support.h"

namespace sluice {
namespace {

using wire_testing::Buffer;
using wire_testing::DecodeStatus;
using wire_testing::ServerBuffer;

constexpr DType kDTypes[] = {DType::kUint8, DType::kFloat16, DType::kBFloat16, DType::kFloat32};
constexpr Layout kLayouts[] = {Layout::kNhwc, Layout::kNchw};

BatchMeta Meta(DType dtype = DType::kUint8, Layout layout = Layout::kNhwc) {
  BatchMeta m;
  m.epoch = 1;
  m.index = 6;
  m.end_record = 60;
  m.n = 3;
  m.height = 2;
  m.width = 5;
  m.dtype = dtype;
  m.layout = layout;
  return m;
}

std::string Images(const BatchMeta& m) {
  std::string s(m.image_bytes(), '\0');
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<char>(i * 13 + 5);
  return s;
}

std::vector<int32_t> Shape(const v1::Batch& b) { return {b.shape().begin(), b.shape().end()}; }

TEST_CASE("EveryDTypeAndLayoutRoundTripsOnTheSocketAndSharedMemoryEncodings") {
  const std::vector<int32_t> labels = {0, 3, 1};
  for (DType dtype : kDTypes) {
    for (Layout layout : kLayouts) {
      for (bool shared : {false, true}) {
        INFO(DTypeName(dtype) << " " << LayoutName(layout) << (shared ? ", shared" : ", socket"));
        const BatchMeta m = Meta(dtype, layout);
        CHECK(m.image_bytes() == 3u * 2 * 5 * 3 * DTypeSize(dtype));
        const std::string images = Images(m);
        std::string bytes;
        if (shared) {
          bytes = EncodeSharedBatch(m, labels, 2);
        } else {
          bytes = EncodeBatchPrefix(m, labels) + images;
        }
        v1::Batch parsed;
        REQUIRE(parsed.ParseFromString(bytes));
        CHECK(static_cast<int>(parsed.dtype()) == static_cast<int>(dtype));
        CHECK(static_cast<int>(parsed.layout()) == static_cast<int>(layout));
        CHECK(Shape(parsed) == (layout == Layout::kNchw ? std::vector<int32_t>{3, 3, 2, 5}
                                                        : std::vector<int32_t>{3, 2, 5, 3}));
        if (shared) CHECK(parsed.shared_memory().length() == m.image_bytes());

        grpc::ByteBuffer b = shared ? Buffer(bytes) : ServerBuffer(m, labels, images);
        BatchMeta got;
        BatchArrays arrays;
        REQUIRE(DecodeBatch(&b, &got, &arrays).ok());
        CHECK(got.dtype == dtype);
        CHECK(got.layout == layout);
        CHECK(got.n == 3);
        CHECK(got.height == 2);
        CHECK(got.width == 5);
        CHECK(got.channels == 3);
        CHECK(got.image_bytes() == m.image_bytes());
        CHECK(arrays.labels == labels);
        CHECK(arrays.mixed_labels.empty());
        CHECK(arrays.label_weights.empty());
        if (!shared) {
          CHECK(std::string(reinterpret_cast<const char*>(arrays.images.data()),
                            got.image_bytes()) == images);
        }
      }
    }
  }
}

TEST_CASE("Uint8NhwcBatchesAreTheBytesTheyWereBeforeDTypesExisted") {
  // What the encoders wrote before Batch had dtype, layout and mixed labels.
  const BatchMeta m = Meta();
  const std::vector<int32_t> labels = {0, 3, 1};
  v1::Batch before;
  before.mutable_position()->set_epoch(m.epoch);
  before.mutable_position()->set_index(m.index);
  before.mutable_position()->set_end_record(m.end_record);
  for (int d : {3, 2, 5, 3}) before.add_shape(d);
  for (int32_t l : labels) before.add_labels(l);
  v1::Batch shared = before;
  shared.mutable_shared_memory()->set_slot(4);
  shared.mutable_shared_memory()->set_length(m.image_bytes());
  CHECK(EncodeSharedBatch(m, labels, 4) == shared.SerializeAsString());
  before.set_images(Images(m));
  CHECK(EncodeBatchPrefix(m, labels) + Images(m) == before.SerializeAsString());
}

// mixed_labels and label_weights again, unpacked (one tag per value), as a writer may send them.
std::string UnpackedMix(const std::vector<int32_t>& mixed, const std::vector<float>& weights) {
  std::string out;
  google::protobuf::io::StringOutputStream s(&out);
  google::protobuf::io::CodedOutputStream coded(&s);
  for (int32_t l : mixed) {
    coded.WriteTag((10 << 3) | 0);
    coded.WriteVarint64(static_cast<uint64_t>(static_cast<int64_t>(l)));
  }
  for (float w : weights) {
    uint32_t bits;
    std::memcpy(&bits, &w, sizeof(bits));
    coded.WriteTag((11 << 3) | 5);
    coded.WriteLittleEndian32(bits);
  }
  return out;
}

TEST_CASE("MixedLabelsAndWeightsRoundTripPackedAndUnpackedOnBothEncodings") {
  const BatchMeta m = Meta(DType::kBFloat16, Layout::kNchw);
  const std::vector<int32_t> labels = {0, 3, 1};
  const std::vector<int32_t> mixed = {1, 0, 3};
  const std::vector<float> weights = {0.25f, 1.0f, 0.0f};
  BatchExtras extras;
  extras.mixed_labels = mixed;
  extras.label_weights = weights;
  for (bool shared : {false, true}) {
    INFO((shared ? "shared memory" : "socket"));
    const std::string bytes = shared ? EncodeSharedBatch(m, labels, 1, extras)
                                     : EncodeBatchPrefix(m, labels, extras) + Images(m);
    v1::Batch parsed;
    REQUIRE(parsed.ParseFromString(bytes));
    CHECK(std::vector<int32_t>(parsed.mixed_labels().begin(), parsed.mixed_labels().end()) ==
          mixed);
    CHECK(std::vector<float>(parsed.label_weights().begin(), parsed.label_weights().end()) ==
          weights);
    v1::Batch without = parsed;
    without.clear_mixed_labels();
    without.clear_label_weights();
    const std::vector<std::pair<std::string, std::string>> encodings = {
        {"packed (protobuf's own)", bytes},
        {"unpacked", without.SerializeAsString() + UnpackedMix(mixed, weights)},
    };
    BatchArrays arrays;  // reused, as a stream reuses it
    for (const auto& [name, encoded] : encodings) {
      INFO(name);
      grpc::ByteBuffer b = Buffer(encoded);
      BatchMeta got;
      REQUIRE(DecodeBatch(&b, &got, &arrays).ok());
      CHECK(arrays.mixed_labels == mixed);
      CHECK(arrays.label_weights == weights);
      CHECK(got.dtype == DType::kBFloat16);
    }
    // The next batch without them: nothing left over from the last.
    grpc::ByteBuffer plain = Buffer(without.SerializeAsString());
    BatchMeta got;
    REQUIRE(DecodeBatch(&plain, &got, &arrays).ok());
    CHECK(arrays.mixed_labels.empty());
    CHECK(arrays.label_weights.empty());
  }
}

// A plain v1::Batch of 3 images of 2x5 with its images (or a slot), shaped and typed as given.
v1::Batch ProtoBatch(int dtype, int layout, std::vector<int32_t> shape, size_t image_bytes,
                     bool shared) {
  v1::Batch b;
  b.mutable_position()->set_epoch(1);
  for (int32_t d : shape) b.add_shape(d);
  for (int32_t l : {0, 3, 1}) b.add_labels(l);
  b.set_dtype(static_cast<v1::DType>(dtype));
  b.set_layout(static_cast<v1::Layout>(layout));
  if (shared) {
    b.mutable_shared_memory()->set_slot(0);
    b.mutable_shared_memory()->set_length(image_bytes);
  } else {
    b.set_images(std::string(image_bytes, '\x11'));
  }
  return b;
}

TEST_CASE("ADTypeLayoutShapeOrMixedLabelsThatDisagreeAreDataLossNamingTheField") {
  constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const size_t f32 = 3 * 2 * 5 * 3 * 4;  // float32 images of [3, 2, 5, 3]
  struct Case {
    std::string name;
    int dtype, layout;
    std::vector<int32_t> shape;
    size_t image_bytes;
    std::vector<int32_t> mixed;
    std::vector<float> weights;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"unknown dtype", 4, 0, {3, 2, 5, 3}, 90, {}, {}, "dtype 4 is not a known DType"},
      {"negative dtype", -1, 0, {3, 2, 5, 3}, 90, {}, {}, "dtype -1"},
      {"unknown layout", 3, 2, {3, 2, 5, 3}, f32, {}, {}, "layout 2 is not a known Layout"},
      {"NCHW with channels last", 3, 1, {3, 2, 5, 3}, f32, {}, {}, "[N, 3, H, W] for layout NCHW"},
      {"NHWC with channels first", 3, 0, {3, 3, 2, 5}, f32, {}, {}, "[N, H, W, 3] for layout NHWC"},
      {"float32 sent as uint8 bytes", 3, 0, {3, 2, 5, 3}, 90, {}, {}, "shape needs 360 (float32)"},
      {"bfloat16 one byte short", 2, 1, {3, 3, 2, 5}, 179, {}, {}, "shape needs 180 (bfloat16)"},
      {"two mixed labels", 3, 0, {3, 2, 5, 3}, f32, {1, 2}, {.5f, .5f}, "mixed_labels holds 2"},
      {"four weights",
       3,
       0,
       {3, 2, 5, 3},
       f32,
       {1, 2, 0},
       {.5f, .5f, .5f, .5f},
       "label_weights holds 4"},
      {"mixed labels without weights",
       3,
       0,
       {3, 2, 5, 3},
       f32,
       {1, 2, 0},
       {},
       "mixed_labels without label_weights"},
      {"weights without mixed labels",
       3,
       0,
       {3, 2, 5, 3},
       f32,
       {},
       {.5f, .5f, .5f},
       "label_weights without mixed_labels"},
      {"a NaN weight", 3, 0, {3, 2, 5, 3}, f32, {1, 2, 0}, {.5f, kNan, .5f}, "label_weights[1]"},
      {"an infinite weight",
       3,
       0,
       {3, 2, 5, 3},
       f32,
       {1, 2, 0},
       {kInf, .5f, .5f},
       "label_weights[0]"},
      {"a weight over 1",
       3,
       0,
       {3, 2, 5, 3},
       f32,
       {1, 2, 0},
       {.5f, .5f, 1.5f},
       "label_weights[2] is 1.5"},
      {"a negative weight",
       3,
       0,
       {3, 2, 5, 3},
       f32,
       {1, 2, 0},
       {-.25f, .5f, .5f},
       "label_weights[0] is -0.25"},
  };
  // 3 · 2^62 uint8 values fit in 64 bits; as float32, 3 · 2^64 bytes wrap to the 0 bytes sent.
  v1::Batch wrapping = ProtoBatch(3, 0, {1 << 20, 1 << 20, 1 << 22, 3}, 0, false);
  wrapping.add_labels(0);
  grpc::ByteBuffer wrapped = Buffer(wrapping.SerializePartialAsString());
  BatchMeta wrapped_meta;
  BatchArrays wrapped_arrays;
  const Status overflow = DecodeBatch(&wrapped, &wrapped_meta, &wrapped_arrays);
  CHECK(overflow.code() == StatusCode::kDataLoss);
  CHECK(overflow.message().find("overflows") != std::string::npos);
  for (bool shared : {false, true}) {
    for (const Case& c : cases) {
      INFO((shared ? "shared memory: " : "socket: ") << c.name);
      v1::Batch b = ProtoBatch(c.dtype, c.layout, c.shape, c.image_bytes, shared);
      for (int32_t l : c.mixed) b.add_mixed_labels(l);
      for (float w : c.weights) b.add_label_weights(w);
      const Status s = DecodeStatus(b.SerializeAsString());
      CHECK(s.code() == StatusCode::kDataLoss);
      CHECK(s.message().find(c.says) != std::string::npos);
    }
  }
  // Wrong wire types, and packed floats cut mid-value, name the field too.
  const std::string head = ProtoBatch(3, 0, {3, 2, 5, 3}, f32, false).SerializeAsString();
  const std::vector<std::pair<std::string, std::string>> malformed = {
      {"dtype", head + std::string("\x42\x01\x01", 3)},                      // length-delimited
      {"layout", head + std::string("\x4d\x01\x00\x00\x00", 5)},             // fixed32
      {"mixed_labels", head + std::string("\x55\x01\x00\x00\x00", 5)},       // fixed32
      {"label_weights", head + std::string("\x58\x01", 2)},                  // varint
      {"label_weights", head + std::string("\x5a\x03\x00\x00\x80", 5)},      // 3 bytes packed
      {"label_weights", head + std::string("\x5a\x08\x00\x00\x80\x3f", 6)},  // cut short
  };
  for (const auto& [field, bytes] : malformed) {
    INFO(field << " (" << bytes.size() - head.size() << " bytes)");
    const Status s = DecodeStatus(bytes);
    CHECK(s.code() == StatusCode::kDataLoss);
    CHECK(s.message().find(field) != std::string::npos);
  }
}

TEST_CASE("WeightsAtTheEndsOfTheRangeAndAnEmptyBatchAreAccepted") {
  v1::Batch b = ProtoBatch(1, 1, {3, 3, 2, 5}, 180, false);
  for (int32_t l : {2, 2, 0}) b.add_mixed_labels(l);
  for (float w : {0.0f, 1.0f, -0.0f}) b.add_label_weights(w);
  grpc::ByteBuffer buffer = Buffer(b.SerializeAsString());
  BatchMeta got;
  BatchArrays arrays;
  REQUIRE(DecodeBatch(&buffer, &got, &arrays).ok());
  CHECK(got.dtype == DType::kFloat16);
  CHECK(arrays.label_weights.size() == 3);

  v1::Batch empty;
  for (int32_t d : {0, 3, 2, 5}) empty.add_shape(d);
  empty.set_dtype(v1::DTYPE_FLOAT32);
  empty.set_layout(v1::LAYOUT_NCHW);
  grpc::ByteBuffer e = Buffer(empty.SerializeAsString());
  REQUIRE(DecodeBatch(&e, &got, &arrays).ok());
  CHECK(got.n == 0);
  CHECK(got.image_bytes() == 0);
}

}  // namespace
}  // namespace sluice
