#include "client/wire/feature_wire.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/wire_format_lite.h>

#include <cstring>
#include <limits>

namespace sluice {
namespace {

using google::protobuf::internal::WireFormatLite;
using google::protobuf::io::CodedInputStream;
using google::protobuf::io::CodedOutputStream;

constexpr int kBatchFeaturesField = 12;
// FeatureArray's fields (service.proto).
constexpr int kName = 1, kType = 2, kRowShape = 3, kRowLengths = 4, kValues = 5, kValueLengths = 6;

uint32_t LengthTag(int field) {
  return WireFormatLite::MakeTag(field, WireFormatLite::WIRETYPE_LENGTH_DELIMITED);
}

// Bytes of a length-delimited field: tag, length and `length` bytes.
size_t FieldBytes(int field, size_t length) {
  return CodedOutputStream::VarintSize32(LengthTag(field)) +
         CodedOutputStream::VarintSize64(length) + length;
}

// A packed repeated int32 field as protobuf writes it (negative values take 10 bytes); nothing
// when empty.
template <typename Values>
void WritePacked(int field, const Values& values, size_t bytes, CodedOutputStream* out) {
  if (values.empty()) return;
  out->WriteTag(LengthTag(field));
  out->WriteVarint64(bytes);
  for (auto v : values) out->WriteVarint32SignExtended(static_cast<int32_t>(v));
}

template <typename Values>
size_t PackedBytes(const Values& values) {
  size_t bytes = 0;
  for (auto v : values)
    bytes += CodedOutputStream::VarintSize32SignExtended(static_cast<int32_t>(v));
  return bytes;
}

size_t PackedFieldBytes(int field, size_t bytes) {
  return bytes == 0 ? 0 : FieldBytes(field, bytes);
}

}  // namespace

void EncodeFeatureArrays(const std::vector<ArrayInfo>& arrays,
                         std::span<const SampleFeatures> samples, std::string* out) {
  google::protobuf::io::StringOutputStream stream(out);
  CodedOutputStream coded(&stream);
  for (size_t a = 0; a < arrays.size(); ++a) {
    const ArrayInfo& info = arrays[a];
    const bool bytes_type = info.type == FeatureType::kBytes;
    size_t values_bytes = 0, row_lengths_bytes = 0, value_lengths_bytes = 0;
    for (const SampleFeatures& s : samples) {
      const FeatureValues& v = s.arrays[a];
      values_bytes += v.data.size();
      if (info.ragged) row_lengths_bytes += CodedOutputStream::VarintSize32(v.rows);
      if (bytes_type) value_lengths_bytes += PackedBytes(v.sizes);
    }
    const size_t shape_bytes = PackedBytes(info.row_shape);
    // Proto3's rules, in field order, so that protobuf's own serialization is these bytes.
    const size_t message_bytes = (info.name.empty() ? 0 : FieldBytes(kName, info.name.size())) + 1 +
                                 CodedOutputStream::VarintSize32(static_cast<uint32_t>(info.type)) +
                                 PackedFieldBytes(kRowShape, shape_bytes) +
                                 PackedFieldBytes(kRowLengths, row_lengths_bytes) +
                                 (values_bytes == 0 ? 0 : FieldBytes(kValues, values_bytes)) +
                                 PackedFieldBytes(kValueLengths, value_lengths_bytes);
    coded.WriteTag(LengthTag(kBatchFeaturesField));
    coded.WriteVarint64(message_bytes);
    if (!info.name.empty()) {
      coded.WriteTag(LengthTag(kName));
      coded.WriteVarint64(info.name.size());
      coded.WriteString(info.name);
    }
    coded.WriteTag(WireFormatLite::MakeTag(kType, WireFormatLite::WIRETYPE_VARINT));
    coded.WriteVarint32(static_cast<uint32_t>(info.type));
    WritePacked(kRowShape, info.row_shape, shape_bytes, &coded);
    if (row_lengths_bytes != 0) {
      coded.WriteTag(LengthTag(kRowLengths));
      coded.WriteVarint64(row_lengths_bytes);
      for (const SampleFeatures& s : samples) coded.WriteVarint32(s.arrays[a].rows);
    }
    if (values_bytes != 0) {
      coded.WriteTag(LengthTag(kValues));
      coded.WriteVarint64(values_bytes);
      for (const SampleFeatures& s : samples) coded.WriteString(s.arrays[a].data);
    }
    if (value_lengths_bytes != 0) {
      coded.WriteTag(LengthTag(kValueLengths));
      coded.WriteVarint64(value_lengths_bytes);
      for (const SampleFeatures& s : samples) {
        for (uint32_t size : s.arrays[a].sizes)
          coded.WriteVarint32SignExtended(static_cast<int32_t>(size));
      }
    }
  }
  coded.Trim();
}

namespace {

// Reads the length of a length-delimited field as protobuf's parser does: at most 5 bytes and
// under 2^31.
bool ReadLength(CodedInputStream* in, uint32_t* length) {
  const int at = in->CurrentPosition();
  uint64_t v = 0;
  if (!in->ReadVarint64(&v) || in->CurrentPosition() - at > 5 || v > INT32_MAX) return false;
  *length = static_cast<uint32_t>(v);
  return true;
}

// A repeated int32 field, packed or not, appended to *out (the low 32 bits, as protobuf keeps).
bool ReadInt32s(CodedInputStream* in, WireFormatLite::WireType wire_type,
                std::vector<int32_t>* out) {
  uint64_t v = 0;
  if (wire_type == WireFormatLite::WIRETYPE_VARINT) {
    if (!in->ReadVarint64(&v)) return false;
    out->push_back(static_cast<int32_t>(v));
    return true;
  }
  uint32_t length = 0;
  if (wire_type != WireFormatLite::WIRETYPE_LENGTH_DELIMITED || !ReadLength(in, &length)) {
    return false;
  }
  auto limit = in->PushLimit(static_cast<int>(length));
  while (in->BytesUntilLimit() > 0) {
    if (!in->ReadVarint64(&v)) return false;
    out->push_back(static_cast<int32_t>(v));
  }
  in->PopLimit(limit);
  return true;
}

Status Bad(const ReceivedFeature& f, const std::string& what) {
  return DataLoss("malformed Batch feature '" + f.name + "': " + what);
}

// The fields as they came; *out reused.
Status ReadFeatureFields(std::string_view message, ReceivedFeature* out) {
  CodedInputStream in(reinterpret_cast<const uint8_t*>(message.data()),
                      static_cast<int>(message.size()));
  int32_t type = 0;
  for (;;) {
    const int tag_at = in.CurrentPosition();
    const uint32_t tag = in.ReadTag();
    if (tag == 0) break;
    if (in.CurrentPosition() - tag_at > 5) return Bad(*out, "a tag over 5 bytes");
    const int field = WireFormatLite::GetTagFieldNumber(tag);
    const auto wire_type = WireFormatLite::GetTagWireType(tag);
    uint32_t length = 0;
    uint64_t v = 0;
    switch (field) {
      case 0:
        return Bad(*out, "field number 0");
      case kName:
      case kValues: {
        std::string* s = field == kName ? &out->name : &out->values;
        if (wire_type != WireFormatLite::WIRETYPE_LENGTH_DELIMITED || !ReadLength(&in, &length) ||
            !in.ReadString(s, static_cast<int>(length))) {
          return Bad(*out, field == kName ? "name" : "values");
        }
        break;
      }
      case kType:
        if (wire_type != WireFormatLite::WIRETYPE_VARINT || !in.ReadVarint64(&v)) {
          return Bad(*out, "type");
        }
        type = static_cast<int32_t>(v);
        break;
      case kRowShape:
        if (!ReadInt32s(&in, wire_type, &out->row_shape)) return Bad(*out, "row_shape");
        break;
      case kRowLengths:
        if (!ReadInt32s(&in, wire_type, &out->row_lengths)) return Bad(*out, "row_lengths");
        break;
      case kValueLengths:
        if (!ReadInt32s(&in, wire_type, &out->value_lengths)) return Bad(*out, "value_lengths");
        break;
      default: {
        const bool skipped = wire_type == WireFormatLite::WIRETYPE_LENGTH_DELIMITED
                                 ? ReadLength(&in, &length) && in.Skip(static_cast<int>(length))
                                 : WireFormatLite::SkipField(&in, tag);
        if (!skipped) return Bad(*out, "field " + std::to_string(field));
      }
    }
  }
  if (!in.ConsumedEntireMessage()) return Bad(*out, "trailing bytes");
  if (type < static_cast<int32_t>(FeatureType::kInt64) ||
      type > static_cast<int32_t>(FeatureType::kBytes)) {
    return Bad(*out, "type " + std::to_string(type) + " is not a known FeatureType");
  }
  out->type = static_cast<FeatureType>(type);
  return Status::OK();
}

// Rows, values per row and element count agree with what came; sets the offsets.
Status CheckFeature(int32_t n, ReceivedFeature* f) {
  if (f->row_shape.size() > kMaxRowDimensions) {
    return Bad(*f, "row_shape has " + std::to_string(f->row_shape.size()) + " dimensions, over " +
                       std::to_string(kMaxRowDimensions));
  }
  uint64_t row_values = 1;
  for (size_t d = 0; d < f->row_shape.size(); ++d) {
    if (f->row_shape[d] < 1 || f->row_shape[d] > kMaxRowDimension) {
      return Bad(*f, "row_shape[" + std::to_string(d) + "] is " + std::to_string(f->row_shape[d]) +
                         ", outside [1, " + std::to_string(kMaxRowDimension) + "]");
    }
    row_values *= static_cast<uint64_t>(f->row_shape[d]);  // at most 2^31 · 2^16: no overflow
    if (row_values > static_cast<uint64_t>(kMaxRowValues)) {
      return Bad(*f, "row_shape holds over " + std::to_string(kMaxRowValues) + " values a row");
    }
  }
  if (!f->row_lengths.empty() && f->row_lengths.size() != static_cast<size_t>(n)) {
    return Bad(*f, "row_lengths holds " + std::to_string(f->row_lengths.size()) + " values for " +
                       std::to_string(n) + " samples");
  }
  uint64_t rows = f->ragged() ? 0 : static_cast<uint64_t>(n);
  f->row_splits.assign(1, 0);
  if (f->ragged()) {
    for (size_t i = 0; i < f->row_lengths.size(); ++i) {
      if (f->row_lengths[i] < 0) {
        return Bad(
            *f, "row_lengths[" + std::to_string(i) + "] is " + std::to_string(f->row_lengths[i]));
      }
      rows += static_cast<uint64_t>(f->row_lengths[i]);
      f->row_splits.push_back(static_cast<int64_t>(rows));
    }
  }
  uint64_t elements = 0;
  if (__builtin_mul_overflow(rows, row_values, &elements)) {
    return Bad(*f, "the value count overflows");
  }
  f->value_offsets.clear();
  if (f->type != FeatureType::kBytes) {
    if (!f->value_lengths.empty()) {
      return Bad(*f, "value_lengths on a " + std::string(FeatureTypeName(f->type)) + " array");
    }
    const uint64_t element_bytes = f->type == FeatureType::kInt64 ? 8 : 4;
    if (f->values.size() / element_bytes != elements || f->values.size() % element_bytes != 0) {
      return Bad(*f, "values holds " + std::to_string(f->values.size()) + " bytes, " +
                         std::to_string(rows) + " rows of " + std::to_string(row_values) + " " +
                         FeatureTypeName(f->type) + " values need " +
                         std::to_string(elements * element_bytes));
    }
    return Status::OK();
  }
  if (f->value_lengths.size() != elements) {
    return Bad(*f, "value_lengths holds " + std::to_string(f->value_lengths.size()) +
                       " values for " + std::to_string(rows) + " rows of " +
                       std::to_string(row_values) + " bytes values");
  }
  uint64_t offset = 0;
  f->value_offsets.reserve(elements + 1);
  f->value_offsets.push_back(0);
  for (size_t k = 0; k < f->value_lengths.size(); ++k) {
    if (f->value_lengths[k] < 0) {
      return Bad(
          *f, "value_lengths[" + std::to_string(k) + "] is " + std::to_string(f->value_lengths[k]));
    }
    offset += static_cast<uint64_t>(f->value_lengths[k]);
    f->value_offsets.push_back(offset);
  }
  if (offset != f->values.size()) {
    return Bad(*f, "value_lengths add up to " + std::to_string(offset) + " bytes, values holds " +
                       std::to_string(f->values.size()));
  }
  return Status::OK();
}

}  // namespace

Status DecodeFeatureArray(std::string_view message, int32_t n, ReceivedFeature* out) {
  out->name.clear();
  out->type = FeatureType::kInt64;
  out->row_shape.clear();
  out->row_lengths.clear();
  out->values.clear();
  // Past every library's short-string capacity: the values live in an aligned heap block, which
  // int64s() and floats() read in place.
  out->values.reserve(64);
  out->value_lengths.clear();
  RETURN_IF_ERROR(ReadFeatureFields(message, out));
  return CheckFeature(n, out);
}

}  // namespace sluice
