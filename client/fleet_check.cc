#include "client/fleet_check.h"

#include <algorithm>
#include <map>
#include <set>

namespace sluice {
namespace {

bool Whole(const ServerShard& s) { return s.count <= 1; }

std::string Part(const ServerShard& s) {
  return Whole(s) ? "all" : "shard " + std::to_string(s.index) + " of " + std::to_string(s.count);
}

// "1, 3-5, 7": a sorted index set in runs, so that a thousand missing shards stay one line.
std::string Runs(const std::set<int32_t>& indexes) {
  std::string out;
  for (auto it = indexes.begin(); it != indexes.end();) {
    const int32_t first = *it;
    int32_t last = first;
    for (++it; it != indexes.end() && *it == last + 1; ++it) last = *it;
    if (!out.empty()) out += ", ";
    out += std::to_string(first);
    if (last != first) out += (last == first + 1 ? ", " : "-") + std::to_string(last);
  }
  return out;
}

}  // namespace

Status CheckFleet(const std::string& dataset, const std::vector<ServerShard>& servers) {
  std::set<int32_t> counts;
  bool any_whole = false;
  for (const ServerShard& s : servers) {
    if (Whole(s)) {
      any_whole = true;
    } else {
      counts.insert(s.count);
    }
  }
  if (counts.empty()) return Status::OK();

  std::vector<std::string> problems;
  if (counts.size() > 1 || any_whole) {
    problems.push_back("the targets do not split it the same way");
  } else {
    const int32_t count = *counts.begin();
    std::map<int32_t, std::vector<std::string>> by_index;
    for (const ServerShard& s : servers) by_index[s.index].push_back(s.target);
    std::set<int32_t> missing;
    for (int32_t i = 0; i < count; ++i) {
      if (!by_index.contains(i)) missing.insert(i);
    }
    for (const auto& [index, targets] : by_index) {
      if (index < 0 || index >= count) {
        problems.push_back("shard " + std::to_string(index) + " is not an index of " +
                           std::to_string(count));
      } else if (targets.size() > 1) {
        std::string names;
        for (const std::string& t : targets) names += (names.empty() ? "" : ", ") + t;
        problems.push_back("shard " + std::to_string(index) + " is served by " +
                           std::to_string(targets.size()) + " targets (" + names + ")");
      }
    }
    if (!missing.empty()) {
      problems.push_back(std::string("no target serves shard") + (missing.size() > 1 ? "s " : " ") +
                         Runs(missing));
    }
  }
  if (problems.empty()) return Status::OK();

  std::string message;
  for (const ServerShard& s : servers) {
    message += (message.empty() ? "" : ", ") + s.target + " serves " + Part(s);
  }
  message += " of '" + dataset + "'";
  for (const std::string& p : problems) message += "; " + p;
  return FailedPrecondition(message +
                            ". Give every server of the fleet as a target, each once (or set "
                            "ClientOptions::allow_partial_fleet to read only the shards reached)");
}

Status CheckTransformSet(const v1::DatasetInfo& info, const std::string& transform_set,
                         const std::string& target) {
  if (transform_set.empty() || transform_set == "default") return Status::OK();
  const std::string what = "dataset '" + info.name() + "': transform set '" + transform_set + "'";
  if (info.transform_sets().empty()) {
    return FailedPrecondition(what +
                              " asked of a server that predates transform sets (its DatasetInfo "
                              "lists none): it would serve uint8 NHWC batches; upgrade " +
                              target);
  }
  std::string offered;
  for (const v1::TransformSet& set : info.transform_sets()) {
    if (set.name() == transform_set) return Status::OK();
    offered += (offered.empty() ? "" : ", ") + set.name();
  }
  return InvalidArgument(what + " is not offered by " + target + ", which offers: " + offered);
}

namespace {

std::string ArraysName(const v1::DatasetInfo& info) {
  std::string name = info.unlabeled() ? "unlabeled, features [" : "labelled, features [";
  for (int k = 0; k < info.features_size(); ++k) {
    const v1::FeatureInfo& f = info.features(k);
    name += (k ? ", " : "") + f.name() + " " + v1::FeatureType_Name(f.type()) + "[";
    for (int d = 0; d < f.row_shape_size(); ++d) {
      name += (d ? "," : "") + std::to_string(f.row_shape(d));
    }
    name += f.ragged() ? "] ragged" : "]";
  }
  return name + "]";
}

bool SameFeature(const v1::FeatureInfo& a, const v1::FeatureInfo& b) {
  return a.name() == b.name() && a.type() == b.type() && a.ragged() == b.ragged() &&
         std::equal(a.row_shape().begin(), a.row_shape().end(), b.row_shape().begin(),
                    b.row_shape().end());
}

}  // namespace

Status CheckSameArrays(const v1::DatasetInfo& first, const std::string& first_target,
                       const v1::DatasetInfo& info, const std::string& target) {
  bool same =
      first.unlabeled() == info.unlabeled() && first.features_size() == info.features_size();
  for (int k = 0; same && k < info.features_size(); ++k) {
    same = SameFeature(first.features(k), info.features(k));
  }
  if (same) return Status::OK();
  return FailedPrecondition("dataset '" + info.name() + "': " + target + " serves " +
                            ArraysName(info) + ", " + first_target + " serves " +
                            ArraysName(first) +
                            ": the servers of a stream must give batches of the same arrays");
}

}  // namespace sluice
