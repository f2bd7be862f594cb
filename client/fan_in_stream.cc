#include "client/fan_in_stream.h"

#include <algorithm>
#include <utility>

namespace sluice {

FanInStream::FanInStream(const std::vector<std::string>& targets, const ClientOptions& options,
                         const v1::StreamRequest& request)
    : options_(options) {
  for (size_t i = 0; i < targets.size(); ++i) {
    streams_.push_back(
        std::make_unique<ServerStream>(targets[i], options_, request, [this] { Wake(); }));
  }
  done_.assign(streams_.size(), false);
}

FanInStream::~FanInStream() {
  kept_.Release();
  streams_.clear();
}

void FanInStream::WaitStarted() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] {
    return std::all_of(streams_.begin(), streams_.end(), [](auto& s) { return s->started(); });
  });
}

Status FanInStream::FirstError() {
  for (auto& s : streams_) {
    Status error;
    if (s->FailedEarly(&error)) return error;
  }
  return Status::OK();
}

Status FanInStream::Next(ReceivedBatch* batch, bool* end_of_sequence) {
  kept_.Release();
  batch->lease.Release();
  RETURN_IF_ERROR(Get(batch, end_of_sequence));
  kept_ = std::move(batch->lease);
  return Status::OK();
}

Status FanInStream::Take(ReceivedBatch* batch, bool* end_of_sequence) {
  kept_.Release();
  batch->lease.Release();
  if (!final_.ok()) return final_;
  int held = 0;
  for (const auto& s : streams_) held += s->leased();
  if (held >= options_.max_held) {
    return FailedPrecondition("holding " + std::to_string(held) +
                              " batches; release one or raise ClientOptions::max_held");
  }
  return Get(batch, end_of_sequence);
}

int64_t FanInStream::reconnects() const {
  int64_t n = 0;
  for (const auto& s : streams_) n += s->reconnects();
  return n;
}

uint64_t FanInStream::skipped_after_last_batch() const {
  uint64_t n = 0;
  for (const auto& s : streams_) n += s->skipped_after_last_batch();
  return n;
}

int64_t FanInStream::shared_memory_batches() const {
  int64_t n = 0;
  for (const auto& s : streams_) n += s->shared_batches();
  return n;
}

Status FanInStream::Get(ReceivedBatch* batch, bool* end_of_sequence) {
  *end_of_sequence = false;
  if (!final_.ok()) return final_;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    bool all_done = true;
    for (size_t k = 0; k < streams_.size(); ++k) {
      const size_t i = (next_ + k) % streams_.size();
      if (done_[i]) continue;
      ServerStream::Item item;
      bool done = false;
      Status s;
      if (streams_[i]->TryTake(&item, &batch->lease, &done, &s)) {
        next_ = (i + 1) % streams_.size();
        batch->meta = item.meta;
        batch->images = {item.arrays->image_data(), item.meta.image_bytes()};
        const BatchArrays& a = *item.arrays;
        batch->labels = {a.labels.data(), a.labels.size()};
        batch->valid = {a.valid.data(), a.valid.size()};
        batch->record_files = {a.record_files.data(), a.record_files.size()};
        batch->record_indexes = {a.record_indexes.data(), a.record_indexes.size()};
        batch->mixed_labels = {a.mixed_labels.data(), a.mixed_labels.size()};
        batch->label_weights = {a.label_weights.data(), a.label_weights.size()};
        batch->features = {a.features.data(), a.feature_count};
        batch->server = static_cast<int>(i);
        lock.unlock();  // releasing a lease may Wake() this stream
        return CheckFormat(batch, i);
      }
      if (done) {
        done_[i] = true;
        if (!s.ok()) {
          final_ = s;
          return final_;
        }
        continue;
      }
      all_done = false;
    }
    if (all_done) {
      *end_of_sequence = true;
      return Status::OK();
    }
    cv_.wait(lock);
  }
}

FanInStream::Format FanInStream::FormatOf(const ReceivedBatch& batch) {
  const bool shown = batch.meta.n > 0;
  Format f{batch.meta.dtype,
           batch.meta.layout,
           shown ? int(!batch.mixed_labels.empty()) : -1,
           shown ? int(!batch.labels.empty()) : -1,
           {}};
  f.features.reserve(batch.features.size());
  for (const ReceivedFeature& a : batch.features) {
    f.features.push_back({a.name, a.type, a.row_shape, shown ? int(a.ragged()) : -1});
  }
  return f;
}

bool FanInStream::Merge(Format* a, const Format& b) {
  auto merge = [](int* x, int y) {
    if (*x < 0) *x = y;
    return y < 0 || *x == y;
  };
  if (a->dtype != b.dtype || a->layout != b.layout || a->features.size() != b.features.size()) {
    return false;
  }
  for (size_t k = 0; k < b.features.size(); ++k) {
    const FeatureFormat& x = a->features[k];
    const FeatureFormat& y = b.features[k];
    if (x.name != y.name || x.type != y.type || x.row_shape != y.row_shape) return false;
  }
  // Checked before any is filled in, so that a mismatch leaves *a as it was.
  Format merged = *a;
  bool same = merge(&merged.mixed_labels, b.mixed_labels) && merge(&merged.labels, b.labels);
  for (size_t k = 0; k < b.features.size(); ++k) {
    same = same && merge(&merged.features[k].ragged, b.features[k].ragged);
  }
  if (same) *a = std::move(merged);
  return same;
}

std::string FanInStream::FormatName(const Format& f) {
  auto shown = [](int v, const char* yes, const char* no) {
    return v < 0 ? std::string() : std::string(v ? yes : no);
  };
  std::string name = std::string(DTypeName(f.dtype)) + " " + std::string(LayoutName(f.layout)) +
                     shown(f.mixed_labels, " with mixed labels", " without mixed labels") +
                     shown(f.labels, ", labelled", ", unlabeled") + ", features [";
  for (size_t k = 0; k < f.features.size(); ++k) {
    const FeatureFormat& a = f.features[k];
    name += (k ? ", " : "") + a.name + " " + FeatureTypeName(a.type) + "[";
    for (size_t d = 0; d < a.row_shape.size(); ++d) {
      name += (d ? "," : "") + std::to_string(a.row_shape[d]);
    }
    name += "]" + shown(a.ragged, " ragged", "");
  }
  return name + "]";
}

Status FanInStream::CheckFormat(ReceivedBatch* batch, size_t server) {
  const Format got = FormatOf(*batch);
  if (!format_) {
    format_ = got;
    format_server_ = server;
    return Status::OK();
  }
  if (Merge(&*format_, got)) return Status::OK();
  batch->lease.Release();
  final_ = FailedPrecondition("batches of " + FormatName(got) + " from " +
                              streams_[server]->target() + ", after batches of " +
                              FormatName(*format_) + " from " + streams_[format_server_]->target() +
                              ": the servers of a stream must give one output (their transform "
                              "sets, features or labels differ)");
  return final_;
}

void FanInStream::Wake() {
  { std::lock_guard<std::mutex> lock(mu_); }
  cv_.notify_all();
}

}  // namespace sluice
