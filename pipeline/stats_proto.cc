#include "pipeline/stats_proto.h"

#include <string>
#include <string_view>
#include <type_traits>
#include <variant>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>

namespace sluice {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

// One proto field and the snapshot member it carries.
template <typename Snapshot>
struct Field {
  std::string_view proto_name;
  std::variant<std::string Snapshot::*, uint64_t Snapshot::*, int64_t Snapshot::*,
               double Snapshot::*, int Snapshot::*>
      member;
};

constexpr Field<StageSnapshot> kStageFields[] = {
    {"name", &StageSnapshot::name},
    {"items", &StageSnapshot::items},
    {"bytes", &StageSnapshot::bytes},
    {"busy_seconds", &StageSnapshot::busy_seconds},
    {"starved_seconds", &StageSnapshot::starved_seconds},
    {"blocked_seconds", &StageSnapshot::blocked_seconds},
    {"max_parallelism", &StageSnapshot::max_parallelism},
};

constexpr Field<PoolSnapshot> kPoolFields[] = {
    {"name", &PoolSnapshot::name},
    {"bytes", &PoolSnapshot::bytes},
    {"peak_bytes", &PoolSnapshot::peak_bytes},
    {"limit_bytes", &PoolSnapshot::limit_bytes},
};

// JobStats' fields that come from the pipeline (the rest belong to the job: FillJobStats).
constexpr Field<StatsSnapshot> kJobFields[] = {
    {"batches", &StatsSnapshot::batches},
    {"images", &StatsSnapshot::images},
    {"skipped_records", &StatsSnapshot::skipped},
    {"record_index_fallbacks", &StatsSnapshot::index_fallbacks},
    {"shuffle_capped_records", &StatsSnapshot::shuffle_capped},
    {"dropped_records", &StatsSnapshot::dropped_records},
    {"padded_samples", &StatsSnapshot::padded_samples},
    {"boxes_dropped", &StatsSnapshot::boxes_dropped},
    {"wall_seconds", &StatsSnapshot::wall_seconds},
    {"queue_fill", &StatsSnapshot::queue_fill},
    {"queue_capacity", &StatsSnapshot::queue_capacity},
    {"decode_parallelism", &StatsSnapshot::decode_parallelism},
    {"decode_parallelism_max", &StatsSnapshot::decode_parallelism_max},
};

// The proto field's type must hold the member's: checked by tests/pipeline/stats_proto_test.cc.
template <typename Snapshot, size_t N>
void ToMessage(const Snapshot& from, const Field<Snapshot> (&fields)[N], Message* to) {
  const auto* reflection = to->GetReflection();
  for (const Field<Snapshot>& f : fields) {
    const FieldDescriptor* d = to->GetDescriptor()->FindFieldByName(std::string(f.proto_name));
    std::visit(
        [&](auto member) {
          const auto& v = from.*member;
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, std::string>) reflection->SetString(to, d, v);
          if constexpr (std::is_same_v<T, uint64_t>) reflection->SetUInt64(to, d, v);
          if constexpr (std::is_same_v<T, int64_t>) reflection->SetInt64(to, d, v);
          if constexpr (std::is_same_v<T, double>) reflection->SetDouble(to, d, v);
          if constexpr (std::is_same_v<T, int>) reflection->SetInt32(to, d, v);
        },
        f.member);
  }
}

template <typename Snapshot, size_t N>
void FromMessage(const Message& from, const Field<Snapshot> (&fields)[N], Snapshot* to) {
  const auto* reflection = from.GetReflection();
  for (const Field<Snapshot>& f : fields) {
    const FieldDescriptor* d = from.GetDescriptor()->FindFieldByName(std::string(f.proto_name));
    std::visit(
        [&](auto member) {
          auto& v = to->*member;
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, std::string>) v = reflection->GetString(from, d);
          if constexpr (std::is_same_v<T, uint64_t>) v = reflection->GetUInt64(from, d);
          if constexpr (std::is_same_v<T, int64_t>) v = reflection->GetInt64(from, d);
          if constexpr (std::is_same_v<T, double>) v = reflection->GetDouble(from, d);
          if constexpr (std::is_same_v<T, int>) v = reflection->GetInt32(from, d);
        },
        f.member);
  }
}

}  // namespace

void FillJobStats(const StatsSnapshot& s, v1::JobStats* out) {
  ToMessage(s, kJobFields, out);
  out->set_images_per_sec(s.wall_seconds > 0 ? static_cast<double>(s.images) / s.wall_seconds : 0);
  for (const StageSnapshot& stage : s.stages) ToMessage(stage, kStageFields, out->add_stages());
  for (const PoolSnapshot& pool : s.pools) ToMessage(pool, kPoolFields, out->add_pools());
}

StatsSnapshot SnapshotFromJobStats(const v1::JobStats& stats) {
  StatsSnapshot s;
  FromMessage(stats, kJobFields, &s);
  for (const v1::StageStats& stage : stats.stages()) {
    FromMessage(stage, kStageFields, &s.stages.emplace_back());
  }
  for (const v1::PoolStats& pool : stats.pools()) {
    FromMessage(pool, kPoolFields, &s.pools.emplace_back());
  }
  return s;
}

}  // namespace sluice
