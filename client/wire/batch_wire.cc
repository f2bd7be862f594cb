#include "client/wire/batch_wire.h"

#include <google/protobuf/io/coded_stream.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/proto_buffer_reader.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "sluice/v1/service.pb.h"

namespace sluice {
namespace {

using google::protobuf::internal::WireFormatLite;
constexpr int kFeaturesField = 12;
constexpr int kImagesField = 15;
constexpr int kSharedMemoryField = 16;

Status Malformed(const std::string& what) {
  return DataLoss("malformed Batch message: " + what);
}

// Reads the length of a length-delimited field as protobuf's message parser does: at most 5
// bytes and under 2^31 (CodedInputStream alone takes 10 bytes and truncates, and a length
// truncated past 2^31 would set no limit at all).
bool ReadLength(google::protobuf::io::CodedInputStream* in, uint32_t* length) {
  const int at = in->CurrentPosition();
  uint64_t v = 0;
  if (!in->ReadVarint64(&v) || in->CurrentPosition() - at > 5 || v > INT32_MAX) return false;
  *length = static_cast<uint32_t>(v);
  return true;
}

// A varint as protobuf's parser stores it in a field of type T: int32 keeps the low 32 bits,
// bool (uint8_t here) is whether it is non-zero.
template <typename T>
T FromVarint(uint64_t v) {
  if constexpr (std::is_same_v<T, uint8_t>) {
    return v != 0 ? 1 : 0;
  } else {
    return static_cast<T>(v);
  }
}

// Reads a repeated varint field (int32, int64 or bool as uint8_t) in packed or unpacked form,
// appending to out.
template <typename T>
bool ReadVarints(google::protobuf::io::CodedInputStream* in, uint32_t wire_type,
                 std::vector<T>* out) {
  uint64_t v = 0;
  if (wire_type == WireFormatLite::WIRETYPE_VARINT) {
    if (!in->ReadVarint64(&v)) return false;
    out->push_back(FromVarint<T>(v));
    return true;
  }
  if (wire_type != WireFormatLite::WIRETYPE_LENGTH_DELIMITED) return false;
  uint32_t length = 0;
  if (!ReadLength(in, &length)) return false;
  auto limit = in->PushLimit(static_cast<int>(length));
  while (in->BytesUntilLimit() > 0) {
    if (!in->ReadVarint64(&v)) return false;
    out->push_back(FromVarint<T>(v));
  }
  in->PopLimit(limit);
  return true;
}

// Reads a repeated float field in packed or unpacked form, appending to out.
bool ReadFloats(google::protobuf::io::CodedInputStream* in, uint32_t wire_type,
                std::vector<float>* out) {
  uint32_t bits = 0;
  auto append = [&] {
    float v;
    std::memcpy(&v, &bits, sizeof(v));
    out->push_back(v);
  };
  if (wire_type == WireFormatLite::WIRETYPE_FIXED32) {
    if (!in->ReadLittleEndian32(&bits)) return false;
    append();
    return true;
  }
  if (wire_type != WireFormatLite::WIRETYPE_LENGTH_DELIMITED) return false;
  uint32_t length = 0;
  if (!ReadLength(in, &length) || length % sizeof(float) != 0) return false;
  auto limit = in->PushLimit(static_cast<int>(length));
  while (in->BytesUntilLimit() > 0) {
    if (!in->ReadLittleEndian32(&bits)) return false;
    append();
  }
  in->PopLimit(limit);
  return true;
}

// An enum field's varint as protobuf stores it in an open enum: the low 32 bits.
bool ReadEnum(google::protobuf::io::CodedInputStream* in, uint32_t wire_type, int32_t* out) {
  uint64_t v = 0;
  if (wire_type != WireFormatLite::WIRETYPE_VARINT || !in->ReadVarint64(&v)) return false;
  *out = static_cast<int32_t>(v);
  return true;
}

// Every field of a Batch but its images.
v1::Batch MetaMessage(const BatchMeta& meta, std::span<const int32_t> labels,
                      const BatchExtras& extras) {
  v1::Batch b;
  b.mutable_position()->set_epoch(meta.epoch);
  b.mutable_position()->set_index(meta.index);
  b.mutable_position()->set_end_record(meta.end_record);
  if (meta.shuffle_bytes != 0) b.mutable_position()->set_shuffle_bytes(meta.shuffle_bytes);
  b.add_shape(meta.n);
  if (meta.layout == Layout::kNchw) {
    b.add_shape(meta.channels);
    b.add_shape(meta.height);
    b.add_shape(meta.width);
  } else {
    b.add_shape(meta.height);
    b.add_shape(meta.width);
    b.add_shape(meta.channels);
  }
  // Proto3 writes neither when it is the default (uint8, NHWC): those batches' bytes are as
  // before dtypes existed.
  b.set_dtype(static_cast<v1::DType>(meta.dtype));
  b.set_layout(static_cast<v1::Layout>(meta.layout));
  b.mutable_labels()->Add(labels.begin(), labels.end());
  b.set_skipped_records(meta.skipped_records);
  if (std::find(extras.valid.begin(), extras.valid.end(), uint8_t{0}) != extras.valid.end()) {
    b.mutable_valid()->Reserve(static_cast<int>(extras.valid.size()));
    for (uint8_t v : extras.valid) b.add_valid(v != 0);
  }
  b.mutable_record_files()->Add(extras.record_files.begin(), extras.record_files.end());
  b.mutable_record_indexes()->Add(extras.record_indexes.begin(), extras.record_indexes.end());
  b.mutable_mixed_labels()->Add(extras.mixed_labels.begin(), extras.mixed_labels.end());
  b.mutable_label_weights()->Add(extras.label_weights.begin(), extras.label_weights.end());
  return b;
}

}  // namespace

std::string EncodeBatchPrefix(const BatchMeta& meta, std::span<const int32_t> labels,
                              const BatchExtras& extras) {
  const v1::Batch b = MetaMessage(meta, labels, extras);
  std::string out;
  b.SerializeToString(&out);
  out.append(extras.features);
  google::protobuf::io::StringOutputStream stream(&out);
  google::protobuf::io::CodedOutputStream coded(&stream);
  coded.WriteTag(WireFormatLite::MakeTag(kImagesField, WireFormatLite::WIRETYPE_LENGTH_DELIMITED));
  coded.WriteVarint64(meta.image_bytes());
  coded.Trim();
  return out;
}

std::string EncodeSharedBatch(const BatchMeta& meta, std::span<const int32_t> labels, uint32_t slot,
                              const BatchExtras& extras) {
  std::string out = MetaMessage(meta, labels, extras).SerializeAsString();
  out.append(extras.features);
  // A message's fields may come in any order and concatenated messages merge: the shared-memory
  // reference follows the features, in field order.
  v1::Batch ref;
  ref.mutable_shared_memory()->set_slot(slot);
  ref.mutable_shared_memory()->set_length(meta.image_bytes());
  ref.AppendToString(&out);
  return out;
}

namespace {

// The fields of a Batch message as they came, before they are checked against each other.
// Message fields that come more than once merge, as protobuf merges them.
struct RawBatch {
  v1::Position position;
  v1::SharedMemoryRef shared_memory;
  std::vector<int32_t> shape;
  int32_t dtype = 0;  // as sent: checked against formats/dtype.h's values
  int32_t layout = 0;
  uint64_t images_bytes = 0;
  bool have_images = false;
};

// A length-delimited message field merged into *m, as protobuf merges a repeated one.
bool MergeMessage(google::protobuf::io::CodedInputStream* in, WireFormatLite::WireType wire_type,
                  google::protobuf::MessageLite* m) {
  std::string bytes;
  uint32_t length = 0;
  return wire_type == WireFormatLite::WIRETYPE_LENGTH_DELIMITED && ReadLength(in, &length) &&
         in->ReadString(&bytes, static_cast<int>(length)) && m->MergeFromString(bytes);
}

// The images field, read straight into out->images.
Status ReadImages(google::protobuf::io::CodedInputStream* in, WireFormatLite::WireType wire_type,
                  size_t message_bytes, RawBatch* raw, BatchArrays* out) {
  uint32_t length = 0;
  if (wire_type != WireFormatLite::WIRETYPE_LENGTH_DELIMITED || !ReadLength(in, &length)) {
    return Malformed("images");
  }
  raw->images_bytes = length;
  auto cut_short = [&] {
    return Malformed("images (" + std::to_string(raw->images_bytes) + " bytes announced)");
  };
  // A corrupt length must not become a huge allocation.
  if (raw->images_bytes > message_bytes) return cut_short();
  RETURN_IF_ERROR(out->images.Reserve(raw->images_bytes).WithContext("batch images"));
  if (raw->images_bytes > 0 &&
      !in->ReadRaw(out->images.data(), static_cast<int>(raw->images_bytes))) {
    return cut_short();
  }
  raw->have_images = true;
  return Status::OK();
}

// Reads every field of the message; labels, the per-sample fields, images and skipped_records go
// straight to out and meta. Malformed for a field of the wrong wire type, a cut-short value or a
// bad tag.
Status ReadFields(google::protobuf::io::CodedInputStream& in, size_t message_bytes, RawBatch* raw,
                  BatchMeta* meta, BatchArrays* out) {
  for (;;) {
    const int tag_at = in.CurrentPosition();
    const uint32_t tag = in.ReadTag();
    if (tag == 0) break;
    // CodedInputStream takes tags of up to 10 bytes; protobuf's message parser, at most 5.
    if (in.CurrentPosition() - tag_at > 5) return Malformed("a tag over 5 bytes");
    const int field = WireFormatLite::GetTagFieldNumber(tag);
    const auto wire_type = WireFormatLite::GetTagWireType(tag);
    if (field == 0) return Malformed("field number 0");
    switch (field) {
      case 1:
        if (!MergeMessage(&in, wire_type, &raw->position)) return Malformed("position");
        break;
      case 2:
        if (!ReadVarints(&in, wire_type, &raw->shape)) return Malformed("shape");
        break;
      case 3:
        if (!ReadVarints(&in, wire_type, &out->labels)) return Malformed("labels");
        break;
      case 4:
        if (wire_type != WireFormatLite::WIRETYPE_VARINT ||
            !in.ReadVarint64(&meta->skipped_records)) {
          return Malformed("skipped_records");
        }
        break;
      case 5:
        if (!ReadVarints(&in, wire_type, &out->valid)) return Malformed("valid");
        break;
      case 6:
        if (!ReadVarints(&in, wire_type, &out->record_files)) return Malformed("record_files");
        break;
      case 7:
        if (!ReadVarints(&in, wire_type, &out->record_indexes)) {
          return Malformed("record_indexes");
        }
        break;
      case 8:
        if (!ReadEnum(&in, wire_type, &raw->dtype)) return Malformed("dtype");
        break;
      case 9:
        if (!ReadEnum(&in, wire_type, &raw->layout)) return Malformed("layout");
        break;
      case 10:
        if (!ReadVarints(&in, wire_type, &out->mixed_labels)) return Malformed("mixed_labels");
        break;
      case 11:
        if (!ReadFloats(&in, wire_type, &out->label_weights)) return Malformed("label_weights");
        break;
      case kFeaturesField: {
        uint32_t length = 0;
        if (out->feature_count == static_cast<size_t>(kMaxFeatureArrays)) {
          return Malformed("features: over " + std::to_string(kMaxFeatureArrays) + " arrays");
        }
        if (out->feature_count == out->feature_messages.size())
          out->feature_messages.emplace_back();
        std::string* message = &out->feature_messages[out->feature_count];
        if (wire_type != WireFormatLite::WIRETYPE_LENGTH_DELIMITED || !ReadLength(&in, &length) ||
            !in.ReadString(message, static_cast<int>(length))) {
          return Malformed("features[" + std::to_string(out->feature_count) + "]");
        }
        ++out->feature_count;
        break;
      }
      case kImagesField:
        RETURN_IF_ERROR(ReadImages(&in, wire_type, message_bytes, raw, out));
        break;
      case kSharedMemoryField:
        if (!MergeMessage(&in, wire_type, &raw->shared_memory)) return Malformed("shared_memory");
        out->shared = true;
        break;
      default: {
        uint32_t length = 0;
        const bool skipped = wire_type == WireFormatLite::WIRETYPE_LENGTH_DELIMITED
                                 ? ReadLength(&in, &length) && in.Skip(static_cast<int>(length))
                                 : WireFormatLite::SkipField(&in, tag);
        if (!skipped) return Malformed("field " + std::to_string(field));
      }
    }
  }
  if (!in.ConsumedEntireMessage()) return Malformed("trailing bytes");
  return Status::OK();
}

// Each per-sample field holds one value per image or none; the record ids come together.
Status CheckPerSample(const BatchMeta& meta, const BatchArrays& out) {
  const size_t n = static_cast<size_t>(meta.n);
  const struct {
    const char* name;
    size_t size;
  } fields[] = {{"valid", out.valid.size()},
                {"record_files", out.record_files.size()},
                {"record_indexes", out.record_indexes.size()},
                {"mixed_labels", out.mixed_labels.size()},
                {"label_weights", out.label_weights.size()}};
  for (const auto& f : fields) {
    if (f.size != 0 && f.size != n) {
      return Malformed(std::string(f.name) + " holds " + std::to_string(f.size) + " values for " +
                       std::to_string(n) + " images");
    }
  }
  if (out.record_files.size() != out.record_indexes.size()) {
    return Malformed(out.record_files.empty() ? "record_indexes without record_files"
                                              : "record_files without record_indexes");
  }
  if (out.mixed_labels.size() != out.label_weights.size()) {
    return Malformed(out.mixed_labels.empty() ? "label_weights without mixed_labels"
                                              : "mixed_labels without label_weights");
  }
  // A weight is the share of labels[i] in a soft label: anything else trains on garbage.
  for (size_t i = 0; i < out.label_weights.size(); ++i) {
    const float w = out.label_weights[i];
    if (!std::isfinite(w) || w < 0 || w > 1) {
      return Malformed("label_weights[" + std::to_string(i) + "] is " + std::to_string(w) +
                       ", not in [0, 1]");
    }
  }
  return Status::OK();
}

// The shape, the image bytes and the labels must agree: consumers index the images by the shape.
Status CheckFields(const RawBatch& raw, BatchMeta* meta, BatchArrays* out) {
  meta->epoch = raw.position.epoch();
  meta->index = raw.position.index();
  meta->end_record = raw.position.end_record();
  meta->shuffle_bytes = raw.position.shuffle_bytes();
  uint64_t images_bytes = raw.images_bytes;
  if (out->shared) {
    out->shared_slot = raw.shared_memory.slot();
    images_bytes = raw.shared_memory.length();
  }
  if (!IsKnownDType(raw.dtype)) {
    return Malformed("dtype " + std::to_string(raw.dtype) + " is not a known DType");
  }
  if (!IsKnownLayout(raw.layout)) {
    return Malformed("layout " + std::to_string(raw.layout) + " is not a known Layout");
  }
  meta->dtype = static_cast<DType>(raw.dtype);
  meta->layout = static_cast<Layout>(raw.layout);
  const bool nchw = meta->layout == Layout::kNchw;
  // Images are RGB: the channel dimension, where the layout puts it, is 3.
  const std::vector<int32_t>& shape = raw.shape;
  if (shape.size() != 4 || shape[0] < 0 || shape[1] <= 0 || shape[2] <= 0 || shape[3] <= 0 ||
      shape[nchw ? 1 : 3] != 3) {
    std::string got;
    for (int32_t d : shape) got += (got.empty() ? "" : ", ") + std::to_string(d);
    return Malformed(std::string("shape must be ") + (nchw ? "[N, 3, H, W]" : "[N, H, W, 3]") +
                     " for layout " + std::string(LayoutName(meta->layout)) + ", got [" + got +
                     "]");
  }
  meta->n = shape[0];
  meta->channels = shape[nchw ? 1 : 3];
  meta->height = shape[nchw ? 2 : 1];
  meta->width = shape[nchw ? 3 : 2];
  // Consumers index the images by the shape: its byte count must not wrap to what was sent.
  size_t bytes = 0;
  if (__builtin_mul_overflow(size_t(meta->n), size_t(meta->height), &bytes) ||
      __builtin_mul_overflow(bytes, size_t(meta->width), &bytes) ||
      __builtin_mul_overflow(bytes, size_t(meta->channels), &bytes) ||
      __builtin_mul_overflow(bytes, DTypeSize(meta->dtype), &bytes)) {
    return Malformed("shape's byte count overflows");
  }
  if (out->shared && raw.have_images) return Malformed("both images and shared_memory");
  if (!raw.have_images && !out->shared && meta->n > 0) return Malformed("no images");
  if (images_bytes != meta->image_bytes()) {
    return Malformed("images holds " + std::to_string(images_bytes) + " bytes, shape needs " +
                     std::to_string(meta->image_bytes()) + " (" +
                     std::string(DTypeName(meta->dtype)) + ")");
  }
  // None: an unlabeled dataset's batch.
  if (!out->labels.empty() && out->labels.size() != static_cast<size_t>(meta->n)) {
    return Malformed(std::to_string(out->labels.size()) + " labels for " +
                     std::to_string(meta->n) + " images");
  }
  RETURN_IF_ERROR(CheckPerSample(*meta, *out));
  if (out->labels.empty() && !out->mixed_labels.empty()) {
    return Malformed("mixed_labels without labels");
  }
  if (out->features.size() < out->feature_count) out->features.resize(out->feature_count);
  for (size_t k = 0; k < out->feature_count; ++k) {
    RETURN_IF_ERROR(DecodeFeatureArray(out->feature_messages[k], meta->n, &out->features[k]));
  }
  return Status::OK();
}

}  // namespace

Status DecodeBatch(grpc::ByteBuffer* buffer, BatchMeta* meta, BatchArrays* out) {
  const size_t message_bytes = buffer->Length();
  grpc::ProtoBufferReader reader(buffer);
  google::protobuf::io::CodedInputStream in(&reader);
  in.SetTotalBytesLimit(INT32_MAX);
  *meta = BatchMeta();
  out->labels.clear();
  out->valid.clear();
  out->record_files.clear();
  out->record_indexes.clear();
  out->mixed_labels.clear();
  out->label_weights.clear();
  out->feature_count = 0;
  out->shared = false;
  RawBatch raw;
  RETURN_IF_ERROR(ReadFields(in, message_bytes, &raw, meta, out));
  return CheckFields(raw, meta, out);
}

}  // namespace sluice
