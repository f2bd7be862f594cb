#include "server/tools/shard_set_writer.h"

#include <atomic>
#include <filesystem>

#include <fmt/format.h>
#include <tbb/info.h>
#include <tbb/parallel_pipeline.h>

#include "formats/record_index.h"
#include "server/tools/progress.h"

namespace sluice {

std::string ShardFileName(const std::string& prefix, int shard, int shards) {
  return fmt::format("{}-{:05d}-of-{:05d}.tfrecord", prefix, shard, shards);
}

ShardSetWriter::ShardSetWriter(const ShardSetOptions& options, uint64_t items)
    : options_(options), items_(items) {}

Result<std::unique_ptr<ShardSetWriter>> ShardSetWriter::Create(const ShardSetOptions& options,
                                                               uint64_t items) {
  if (options.shards < 1) return InvalidArgument("--shards must be at least 1");
  std::error_code ec;
  std::filesystem::create_directories(options.dir, ec);
  if (ec) return IOError("create directory " + options.dir + ": " + ec.message());
  std::unique_ptr<ShardSetWriter> w(new ShardSetWriter(options, items));
  if (!options.overwrite) {
    for (int s = 0; s < options.shards; ++s) {
      if (std::filesystem::exists(w->PathOf(s))) {
        return Status(StatusCode::kAlreadyExists,
                      w->PathOf(s) + " already exists (pass --overwrite to replace it)");
      }
    }
  }
  return w;
}

ShardSetWriter::~ShardSetWriter() {
  if (finished_) return;
  writer_.reset();  // an unclosed writer removes its temporary files
  std::error_code ec;
  for (const std::string& path : committed_) {
    std::filesystem::remove(path, ec);
    std::filesystem::remove(IndexPathFor(path), ec);
  }
}

std::string ShardSetWriter::PathOf(int shard) const {
  return (std::filesystem::path(options_.dir) /
          ShardFileName(options_.prefix, shard, options_.shards)).string();
}

Status ShardSetWriter::OpenUpTo(int shard) {
  while (current_ < shard) {
    if (writer_) {
      RETURN_IF_ERROR(writer_->Close());
      committed_.push_back(PathOf(current_));
      writer_.reset();
    }
    ++current_;
    if (current_ >= options_.shards) break;
    TFRecordWriterOptions wo;
    wo.compression = options_.compression;
    ASSIGN_OR_RETURN(writer_, TFRecordWriter::Create(PathOf(current_), wo));
  }
  return Status::OK();
}

Status ShardSetWriter::Write(uint64_t item, std::string_view record) {
  int shard = items_ == 0 ? 0 : static_cast<int>(item * options_.shards / items_);
  RETURN_IF_ERROR(OpenUpTo(shard));
  RETURN_IF_ERROR(writer_->Write(record));
  ++records_;
  bytes_ += record.size();
  return Status::OK();
}

Status ShardSetWriter::Finish() {
  RETURN_IF_ERROR(OpenUpTo(options_.shards));
  finished_ = true;
  return Status::OK();
}

std::vector<std::string> ShardSetWriter::paths() const {
  std::vector<std::string> out;
  for (int s = 0; s < options_.shards; ++s) out.push_back(PathOf(s));
  return out;
}

Status WriteShardSet(const ShardSetOptions& options, uint64_t items, const MakeRecordFn& make,
                     const SkipFn& on_skip, Progress* progress, uint64_t* records_written) {
  ASSIGN_OR_RETURN(std::unique_ptr<ShardSetWriter> writer, ShardSetWriter::Create(options, items));
  struct Item {
    uint64_t index = 0;
    std::string record;
    Status status;
  };
  // Enough tokens to keep every thread busy while the writer drains in order.
  const size_t tokens = 4 * static_cast<size_t>(tbb::info::default_concurrency());
  uint64_t next = 0;
  Status failure;                 // touched by the output stage only
  std::atomic<bool> stop{false};  // tells the input stage to stop feeding
  tbb::parallel_pipeline(
      tokens,
      tbb::make_filter<void, Item*>(tbb::filter_mode::serial_in_order,
                                    [&](tbb::flow_control& fc) -> Item* {
                                      if (next >= items || stop.load()) {
                                        fc.stop();
                                        return nullptr;
                                      }
                                      return new Item{next++, {}, {}};
                                    }) &
          tbb::make_filter<Item*, Item*>(tbb::filter_mode::parallel,
                                         [&](Item* item) {
                                           item->status = make(item->index, &item->record);
                                           return item;
                                         }) &
          tbb::make_filter<Item*, void>(tbb::filter_mode::serial_in_order, [&](Item* item) {
            std::unique_ptr<Item> owned(item);
            if (progress) progress->Add(1);
            if (!failure.ok()) return;
            if (!item->status.ok()) {
              if (!on_skip(item->index, item->status)) {
                failure = Status(StatusCode::kCancelled, item->status.message());
                stop = true;
              }
              return;
            }
            failure = writer->Write(item->index, item->record);
            if (!failure.ok()) stop = true;
          }));
  RETURN_IF_ERROR(failure);
  RETURN_IF_ERROR(writer->Finish());
  if (records_written) *records_written = writer->records();
  return Status::OK();
}

}  // namespace sluice
