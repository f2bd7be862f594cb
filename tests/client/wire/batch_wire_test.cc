// The Batch codec: what the server's prefix + image slice make is a plain v1::Batch to protobuf,
// and DecodeBatch reads any valid encoding (fields in any order, packed or not) and refuses a
// malformed one by naming the field. Image buffers come from a BufferAllocator; one that fails
// is an error naming the byte count.
#include "client/wire/batch_wire.h"

#include <catch2/catch.hpp>

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include "sluice/v1/service.pb.h"
#include "tests/client/wire/batch_wire_test_support.h"

namespace sluice {
namespace {

using wire_testing::Buffer;
using wire_testing::DecodeStatus;
using wire_testing::ServerBuffer;

BatchMeta Meta(int n = 3, int h = 2, int w = 4) {
  BatchMeta m;
  m.epoch = 2;
  m.index = 17;
  m.end_record = 999;
  m.n = n;
  m.height = h;
  m.width = w;
  m.skipped_records = 5;
  return m;
}

std::string Images(const BatchMeta& m) {
  std::string s(m.image_bytes(), '\0');
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<char>(i * 7 + 1);
  return s;
}

std::string Flatten(grpc::ByteBuffer& b) {
  std::vector<grpc::Slice> slices;
  REQUIRE(b.Dump(&slices).ok());
  std::string out;
  for (const auto& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

TEST_CASE("ServerEncodingIsAPlainProtobufBatch") {
  const BatchMeta m = Meta();
  const std::vector<int32_t> labels = {4, -1, 70000};
  const std::string images = Images(m);
  grpc::ByteBuffer b = ServerBuffer(m, labels, images);
  v1::Batch parsed;
  REQUIRE(parsed.ParseFromString(Flatten(b)));
  CHECK(parsed.position().epoch() == 2);
  CHECK(parsed.position().index() == 17);
  CHECK(parsed.position().end_record() == 999);
  CHECK(std::vector<int32_t>(parsed.shape().begin(), parsed.shape().end()) ==
        std::vector<int32_t>{3, 2, 4, 3});
  CHECK(std::vector<int32_t>(parsed.labels().begin(), parsed.labels().end()) == labels);
  CHECK(parsed.skipped_records() == 5);
  CHECK(parsed.images() == images);
}

TEST_CASE("DecodeReadsTheServerEncodingAndAnyProtobufEncoding") {
  const BatchMeta m = Meta();
  const std::vector<int32_t> labels = {4, -1, 70000};
  const std::string images = Images(m);
  // Protobuf's own serialization puts images (field 15) last too, but in one piece; and a
  // hand-made message with fields reversed and labels unpacked must read the same.
  v1::Batch b;
  b.mutable_position()->set_epoch(2);
  b.mutable_position()->set_index(17);
  b.mutable_position()->set_end_record(999);
  for (int d : {3, 2, 4, 3}) b.add_shape(d);
  for (int32_t l : labels) b.add_labels(l);
  b.set_skipped_records(5);
  b.set_images(images);
  std::string reordered;
  {
    google::protobuf::io::StringOutputStream s(&reordered);
    google::protobuf::io::CodedOutputStream out(&s);
    out.WriteTag((15 << 3) | 2);
    out.WriteVarint32(static_cast<uint32_t>(images.size()));
    out.WriteRaw(images.data(), static_cast<int>(images.size()));
    for (int32_t l : labels) {
      out.WriteTag((3 << 3) | 0);
      out.WriteVarint64(static_cast<uint64_t>(static_cast<int64_t>(l)));
    }
    out.WriteTag((99 << 3) | 0);  // an unknown field is skipped
    out.WriteVarint32(1);
    std::string rest;
    v1::Batch head = b;
    head.clear_images();
    head.clear_labels();
    head.SerializeToString(&rest);
    out.WriteRaw(rest.data(), static_cast<int>(rest.size()));
  }
  std::string plain;
  b.SerializeToString(&plain);
  std::vector<grpc::ByteBuffer> encodings;
  encodings.push_back(ServerBuffer(m, labels, images));
  encodings.push_back(Buffer(plain));
  encodings.push_back(Buffer(reordered));
  for (auto& e : encodings) {
    BatchMeta got;
    BatchArrays arrays;
    REQUIRE(DecodeBatch(&e, &got, &arrays).ok());
    CHECK(got.epoch == 2);
    CHECK(got.index == 17);
    CHECK(got.end_record == 999);
    CHECK(got.n == 3);
    CHECK(got.height == 2);
    CHECK(got.width == 4);
    CHECK(got.skipped_records == 5);
    CHECK(arrays.labels == labels);
    REQUIRE(arrays.images.capacity() >= got.image_bytes());
    CHECK(std::string(reinterpret_cast<const char*>(arrays.images.data()), got.image_bytes()) ==
          images);
  }
}

TEST_CASE("SharedMemoryBatchCarriesItsSlotInsteadOfTheImages") {
  const BatchMeta m = Meta();
  const std::vector<int32_t> labels = {4, -1, 70000};
  const std::string encoded = EncodeSharedBatch(m, labels, 7);
  v1::Batch parsed;
  REQUIRE(parsed.ParseFromString(encoded));
  CHECK(parsed.images().empty());
  CHECK(parsed.shared_memory().slot() == 7);
  CHECK(parsed.shared_memory().length() == m.image_bytes());

  grpc::ByteBuffer b = Buffer(encoded);
  BatchMeta got;
  BatchArrays out;
  REQUIRE(DecodeBatch(&b, &got, &out).ok());
  CHECK(out.shared);
  CHECK(out.shared_slot == 7);
  CHECK(out.labels == labels);
  CHECK(got.n == m.n);
  CHECK(got.image_bytes() == m.image_bytes());

  // Images and a slot at once, or a slot whose length disagrees with the shape: DataLoss.
  v1::Batch both = parsed;
  both.set_images(Images(m));
  grpc::ByteBuffer bb = Buffer(both.SerializeAsString());
  Status s = DecodeBatch(&bb, &got, &out);
  CHECK(s.code() == StatusCode::kDataLoss);
  CHECK(s.message().find("both images and shared_memory") != std::string::npos);
  v1::Batch short_ref = parsed;
  short_ref.mutable_shared_memory()->set_length(m.image_bytes() - 1);
  grpc::ByteBuffer sb = Buffer(short_ref.SerializeAsString());
  s = DecodeBatch(&sb, &got, &out);
  CHECK(s.code() == StatusCode::kDataLoss);
  CHECK(s.message().find("shape needs") != std::string::npos);
}

TEST_CASE("MalformedBatchesAreDataLossNamingTheField") {
  const BatchMeta m = Meta();
  const std::vector<int32_t> labels = {4, -1, 70000};
  const std::string images = Images(m);
  grpc::ByteBuffer good = ServerBuffer(m, labels, images);
  const std::string bytes = Flatten(good);
  struct Case {
    std::string name;
    std::string bytes;
    std::string says;
  };
  v1::Batch wrong_shape;
  for (int d : {4, 2, 4, 3}) wrong_shape.add_shape(d);
  for (int l : {1, 2, 3, 4}) wrong_shape.add_labels(l);
  wrong_shape.set_images(images);  // 3 images' worth
  grpc::ByteBuffer few_labels = ServerBuffer(m, {1, 2}, images);
  // 2^21 images of 2^21 × 2^22 × 3 bytes: 3 · 2^64, which wraps to the 0 bytes sent.
  v1::Batch wrapping;
  for (int d : {1 << 21, 1 << 21, 1 << 22, 3}) wrapping.add_shape(d);
  wrapping.add_labels(0);
  wrapping.set_images("");
  const std::vector<Case> cases = {
      {"images cut short", bytes.substr(0, bytes.size() - 10), "images"},
      {"shape disagrees with images", wrong_shape.SerializeAsString(), "shape needs"},
      {"too few labels", Flatten(few_labels), "labels for"},
      {"no shape", std::string("\x7a\x00", 2), "shape"},
      {"garbage", "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", "malformed"},
      {"byte count wraps", wrapping.SerializePartialAsString(), "overflows"},
      // A tag of 6 bytes, which CodedInputStream reads and protobuf's parser refuses.
      {"long tag", std::string("\x88\x80\x80\x80\x80\x00\x01", 7) + bytes, "tag over 5"},
      // Lengths as protobuf's parser reads them: at most 5 bytes and under 2^31. A packed shape
      // whose length truncates past 2^31 had set no limit, and was read as empty.
      {"length over 2^31", "\x12\xec\xec\xec\xec\xec\xec\x00" + bytes, "shape"},
      {"length in 6 bytes", std::string("\x0a\x80\x80\x80\x80\x80\x00", 7) + bytes, "position"},
      {"images over 2^31", "\x7a\x80\x80\x80\x80\x10" + bytes, "images"},
      {"field number 0", "\x02\x01x" + bytes, "field number 0"},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    const Status s = DecodeStatus(c.bytes);
    CHECK(s.code() == StatusCode::kDataLoss);
    CHECK(s.message().find(c.says) != std::string::npos);
  }

  // Position sent three times: protobuf merges them field by field, and so does DecodeBatch
  // (found by tests/fuzz/batch_wire_fuzz; it kept only the last).
  v1::Batch first, second;
  first.mutable_position()->set_epoch(9);
  second.mutable_position()->set_index(4);
  const std::string thrice = bytes + first.SerializeAsString() + second.SerializeAsString();
  grpc::ByteBuffer merged = Buffer(thrice);
  BatchMeta got;
  BatchArrays arrays;
  REQUIRE(DecodeBatch(&merged, &got, &arrays).ok());
  CHECK(got.epoch == 9);
  CHECK(got.index == 4);
  CHECK(got.end_record == m.end_record);
}

// A plain v1::Batch of m with these labels and its images (or, for a shared-memory batch, a slot).
v1::Batch ProtoBatch(const BatchMeta& m, const std::vector<int32_t>& labels, bool shared) {
  v1::Batch b;
  b.mutable_position()->set_epoch(m.epoch);
  b.mutable_position()->set_index(m.index);
  b.mutable_position()->set_end_record(m.end_record);
  for (int d : {m.n, m.height, m.width, m.channels}) b.add_shape(d);
  for (int32_t l : labels) b.add_labels(l);
  if (shared) {
    b.mutable_shared_memory()->set_slot(3);
    b.mutable_shared_memory()->set_length(m.image_bytes());
  } else {
    b.set_images(Images(m));
  }
  return b;
}

// The per-sample fields of b again, unpacked (one tag per value), as a writer may send them.
std::string Unpacked(const v1::Batch& b) {
  std::string out;
  google::protobuf::io::StringOutputStream s(&out);
  google::protobuf::io::CodedOutputStream coded(&s);
  for (bool v : b.valid()) {
    coded.WriteTag((5 << 3) | 0);
    coded.WriteVarint32(v ? 1 : 0);
  }
  for (int32_t f : b.record_files()) {
    coded.WriteTag((6 << 3) | 0);
    coded.WriteVarint64(static_cast<uint64_t>(static_cast<int64_t>(f)));
  }
  for (int64_t r : b.record_indexes()) {
    coded.WriteTag((7 << 3) | 0);
    coded.WriteVarint64(static_cast<uint64_t>(r));
  }
  return out;
}

TEST_CASE("PerSampleFieldsDecodePackedAndUnpackedOnTheSocketAndSharedMemoryPaths") {
  const BatchMeta m = Meta();
  const std::vector<int32_t> labels = {4, -1, 70000};
  const std::vector<uint8_t> valid = {1, 0, 1};
  const std::vector<int32_t> files = {0, 2, 1};
  const std::vector<int64_t> records = {5, int64_t{1} << 40, 0};
  for (bool shared : {false, true}) {
    v1::Batch with = ProtoBatch(m, labels, shared);
    for (size_t i = 0; i < valid.size(); ++i) {
      with.add_valid(valid[i] != 0);
      with.add_record_files(files[i]);
      with.add_record_indexes(records[i]);
    }
    v1::Batch without_extras = with;
    without_extras.clear_valid();
    without_extras.clear_record_files();
    without_extras.clear_record_indexes();
    const std::vector<std::pair<std::string, std::string>> encodings = {
        {"packed (protobuf's own)", with.SerializeAsString()},
        {"unpacked", without_extras.SerializeAsString() + Unpacked(with)},
    };
    BatchArrays arrays;  // reused, as a stream reuses it
    for (const auto& [name, bytes] : encodings) {
      INFO((shared ? "shared memory, " : "socket, ") << name);
      grpc::ByteBuffer b = Buffer(bytes);
      BatchMeta got;
      REQUIRE(DecodeBatch(&b, &got, &arrays).ok());
      CHECK(arrays.shared == shared);
      CHECK(arrays.labels == labels);
      CHECK(arrays.valid == valid);
      CHECK(arrays.record_files == files);
      CHECK(arrays.record_indexes == records);
    }
    // The next batch of the stream without them: nothing left over from the last.
    grpc::ByteBuffer plain = Buffer(without_extras.SerializeAsString());
    BatchMeta got;
    REQUIRE(DecodeBatch(&plain, &got, &arrays).ok());
    CHECK(arrays.valid.empty());
    CHECK(arrays.record_files.empty());
    CHECK(arrays.record_indexes.empty());
  }
  // A bool is true for any non-zero varint, as protobuf reads it.
  std::string two;
  {
    google::protobuf::io::StringOutputStream s(&two);
    google::protobuf::io::CodedOutputStream coded(&s);
    coded.WriteTag((5 << 3) | 2);
    coded.WriteVarint32(4);
    for (uint8_t v : {2, 0, 0x81, 0x01}) coded.WriteRaw(&v, 1);
  }
  const std::string bytes = ProtoBatch(m, labels, false).SerializeAsString() + two;
  v1::Batch parsed;
  REQUIRE(parsed.ParseFromString(bytes));
  grpc::ByteBuffer b = Buffer(bytes);
  BatchMeta got;
  BatchArrays arrays;
  REQUIRE(DecodeBatch(&b, &got, &arrays).ok());
  CHECK(arrays.valid == std::vector<uint8_t>(parsed.valid().begin(), parsed.valid().end()));
  CHECK(arrays.valid == std::vector<uint8_t>{1, 0, 1});
}

TEST_CASE("PerSampleFieldsOfAnotherLengthThanTheImagesAreDataLossNamingTheField") {
  const BatchMeta m = Meta();
  const std::vector<int32_t> labels = {4, -1, 70000};
  struct Case {
    std::string name;
    std::vector<bool> valid;
    std::vector<int32_t> files;
    std::vector<int64_t> records;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"two valid for three images", {true, false}, {}, {}, "valid holds 2 values for 3 images"},
      {"four record ids", {}, {0, 1, 2, 3}, {0, 1, 2, 3}, "record_files holds 4 values"},
      {"files without indexes", {}, {0, 1, 2}, {}, "record_files without record_indexes"},
      {"indexes without files", {}, {}, {0, 1, 2}, "record_indexes without record_files"},
      {"one index short", {}, {0, 1, 2}, {0, 1}, "record_indexes holds 2 values for 3 images"},
  };
  for (bool shared : {false, true}) {
    for (const Case& c : cases) {
      INFO((shared ? "shared memory: " : "socket: ") << c.name);
      v1::Batch batch = ProtoBatch(m, labels, shared);
      for (bool v : c.valid) batch.add_valid(v);
      for (int32_t f : c.files) batch.add_record_files(f);
      for (int64_t r : c.records) batch.add_record_indexes(r);
      const Status s = DecodeStatus(batch.SerializeAsString());
      CHECK(s.code() == StatusCode::kDataLoss);
      CHECK(s.message().find(c.says) != std::string::npos);
    }
  }
  // Wrong wire types and a packed field cut short name the field too.
  const std::string head = ProtoBatch(m, labels, false).SerializeAsString();
  const std::vector<std::pair<std::string, std::string>> malformed = {
      {"valid", head + std::string("\x2d\x01\x00\x00\x00", 5)},                         // fixed32
      {"record_files", head + std::string("\x31\x01\x00\x00\x00\x00\x00\x00\x00", 9)},  // fixed64
      {"record_indexes", head + std::string("\x3a\x02\x80", 3)},  // packed, cut short
  };
  for (const auto& [field, bytes] : malformed) {
    INFO(field);
    const Status s = DecodeStatus(bytes);
    CHECK(s.code() == StatusCode::kDataLoss);
    CHECK(s.message().find(field) != std::string::npos);
  }
}

// Refuses every allocation, remembering the sizes asked for.
class RefusingAllocator : public BufferAllocator {
 public:
  Result<void*> Allocate(size_t bytes) override {
    asked.push_back(bytes);
    return ResourceExhausted("no pinned memory left");
  }
  void Free(void* /*p*/, size_t /*bytes*/) noexcept override {}
  std::vector<size_t> asked;
};

TEST_CASE("ImageBufferThatCannotGrowIsAnErrorNamingTheByteCount") {
  const BatchMeta m = Meta();
  grpc::ByteBuffer b = ServerBuffer(m, {4, -1, 70000}, Images(m));
  auto allocator = std::make_shared<RefusingAllocator>();
  BatchMeta got;
  BatchArrays arrays(allocator);
  Status s = DecodeBatch(&b, &got, &arrays);
  CHECK(s.code() == StatusCode::kResourceExhausted);
  CHECK(s.message().find(std::to_string(m.image_bytes()) + " bytes") != std::string::npos);
  CHECK(s.message().find("no pinned memory left") != std::string::npos);
  CHECK(allocator->asked == std::vector<size_t>{m.image_bytes()});
}

TEST_CASE("ImagesLongerThanTheMessageAreDataLossWithoutAllocating") {
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream s(&bytes);
    google::protobuf::io::CodedOutputStream out(&s);
    out.WriteTag((15 << 3) | 2);
    out.WriteVarint64(uint64_t{1} << 30);  // a gigabyte announced
    out.WriteRaw("abc", 3);
  }
  grpc::ByteBuffer b = Buffer(bytes);
  auto allocator = std::make_shared<RefusingAllocator>();
  BatchMeta got;
  BatchArrays arrays(allocator);
  Status s = DecodeBatch(&b, &got, &arrays);
  CHECK(s.code() == StatusCode::kDataLoss);
  CHECK(s.message().find("bytes announced") != std::string::npos);
  CHECK(allocator->asked.empty());
}

TEST_CASE("HeapBuffersArePageAlignedAndGrowOnlyWhenAskedForMore") {
  HostBuffer buffer;
  CHECK(buffer.capacity() == 0);
  REQUIRE(buffer.Reserve(10000).ok());
  CHECK(buffer.capacity() == 10000);
  CHECK(reinterpret_cast<uintptr_t>(buffer.data()) % 4096 == 0);
  const uint8_t* first = buffer.data();
  REQUIRE(buffer.Reserve(5000).ok());
  CHECK(buffer.data() == first);
  CHECK(buffer.capacity() == 10000);
  HostBuffer moved = std::move(buffer);
  CHECK(moved.data() == first);
  CHECK(moved.capacity() == 10000);
}

}  // namespace
}  // namespace sluice
