// Shards for pipeline tests: small real JPEGs whose label is the record's global id, so a test can
// tell exactly which records a batch holds.
#pragma once

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "formats/image_example.h"
#include "formats/jpeg_codec.h"
#include "formats/tfrecord_writer.h"
#include "pipeline/options.h"
#include "pipeline/pipeline.h"
#include "sluice/v1/config.pb.h"
#include "tests/test_support.h"

namespace sluice::testing {

// A w x h JPEG whose pixels depend on id (so images of different records differ). Noise makes
// it as costly to store as a photograph.
inline std::string IdJpeg(int id, int w = 64, int h = 48, bool noisy = false) {
  Image img;
  img.Resize(w, h);
  uint32_t state = static_cast<uint32_t>(id) * 2654435761u + 1;
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      uint8_t* p = &img.pixels[(static_cast<size_t>(y) * w + x) * 3];
      state = state * 1664525u + 1013904223u;
      int n = noisy ? static_cast<int>(state >> 27) - 16 : 0;
      p[0] = static_cast<uint8_t>(x * 4 + id * 7 + n);
      p[1] = static_cast<uint8_t>(y * 5 + id * 13 + n);
      p[2] = static_cast<uint8_t>((x + y) * 2 + id * 29 + n);
    }
  }
  JpegEncoder enc;
  std::string out;
  JpegEncodeOptions eo;
  eo.quality = 90;
  if (!enc.Encode(img.view(), eo, &out).ok()) std::abort();
  return out;
}

struct TestShards {
  std::vector<std::string> paths;
  std::vector<std::vector<IndexEntry>> index;  // per file
  int records = 0;
};

// files shards of per_file records each; record ids (= labels) run 0..files*per_file-1.
inline TestShards WriteTestShards(const TempDir& dir, int files, int per_file, int w = 64,
                                  int h = 48, bool noisy = false) {
  TestShards s;
  int id = 0;
  for (int f = 0; f < files; ++f) {
    std::string path = dir.file("shard-" + std::to_string(f) + ".tfrecord");
    auto writer = TFRecordWriter::Create(path);
    if (!writer.ok()) std::abort();
    for (int r = 0; r < per_file; ++r, ++id) {
      std::string jpeg = IdJpeg(id, w, h, noisy);
      ImageRecord rec{jpeg, id, "c", h, w, "x.jpg"};
      if (!(*writer)->Write(EncodeImageExample(rec)).ok()) std::abort();
    }
    s.index.push_back((*writer)->index());
    if (!(*writer)->Close().ok()) std::abort();
    s.paths.push_back(path);
  }
  s.records = id;
  return s;
}

inline v1::PipelineOptions BaseOptions(const TempDir& dir) {
  v1::PipelineOptions o;
  o.add_files(dir.file("shard-*.tfrecord"));
  o.set_image_height(32);
  o.set_image_width(40);
  o.set_batch_size(8);
  o.set_threads(2);
  o.set_epochs(1);
  o.set_seed(42);
  o.mutable_shuffle()->set_buffer_size(20);
  return o;
}

// An iterator over options that must be valid. Iterators do not refer to their Pipeline.
inline std::unique_ptr<Iterator> StartIterator(const v1::PipelineOptions& options) {
  auto pipeline = Pipeline::Create(options);
  REQUIRE(pipeline.ok());
  auto it = (*pipeline)->MakeIterator();
  REQUIRE(it.ok());
  return std::move(*it);
}

struct Collected {
  std::vector<std::vector<int32_t>> labels_by_epoch;
  std::vector<BatchPosition> positions;
  std::vector<int> sizes;
  std::string image_bytes;  // all images, concatenated
  uint64_t skipped = 0;                    // the batches' skipped(), summed
  std::vector<uint64_t> skipped_by_batch;  // each batch's skipped()
  uint64_t skipped_after_last = 0;         // Iterator::SkippedAfterLastBatch() at the end
  Status status;
};

// keep_images = false: check only labels and positions (for tests measuring memory).
inline Collected RunToEnd(const v1::PipelineOptions& options, StatsSnapshot* stats = nullptr,
                          bool keep_images = true, BatchPosition start = {}) {
  Collected c;
  auto pipeline = Pipeline::Create(options);
  if (!pipeline.ok()) {
    c.status = pipeline.status();
    return c;
  }
  auto it = (*pipeline)->MakeIterator(start);
  if (!it.ok()) {
    c.status = it.status();
    return c;
  }
  for (;;) {
    Batch b;
    bool end = false;
    c.status = (*it)->GetNext(&b, &end);
    if (!c.status.ok() || end) break;
    auto pos = b.position();
    if (static_cast<size_t>(pos.epoch) >= c.labels_by_epoch.size()) {
      c.labels_by_epoch.resize(pos.epoch + 1);
    }
    for (int32_t l : b.labels()) c.labels_by_epoch[pos.epoch].push_back(l);
    c.positions.push_back(pos);
    c.sizes.push_back(b.size());
    c.skipped += b.skipped();
    c.skipped_by_batch.push_back(b.skipped());
    if (keep_images) {
      c.image_bytes.append(reinterpret_cast<const char*>(b.images().data()), b.images().size());
    }
  }
  c.skipped_after_last = (*it)->SkippedAfterLastBatch();
  if (stats) *stats = (*it)->Stats();
  return c;
}

// The labels sorted: an epoch's labels in any order compare equal to Iota(records).
inline std::vector<int32_t> Sorted(std::vector<int32_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

// 0, 1, …, n - 1: every label of n records once.
inline std::vector<int32_t> Iota(int n) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

}  // namespace sluice::testing
