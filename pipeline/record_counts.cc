#include "pipeline/record_counts.h"

#include <sys/stat.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "formats/file.h"
#include "formats/record_index.h"
#include "formats/record_reader_factory.h"
#include "formats/tar_index.h"
#include "formats/tfrecord_reader.h"
#include "pipeline/options.h"

namespace sluice {
namespace {

// An uncompressed file's frames, each header its own read (FrameHeaderWalker): the damage that
// ends the walk is one more record, as FileReaderSource counts it before it gives up on the file;
// a bad data CRC or an over-long record is a record like any other.
uint64_t ScanFrames(int fd, const std::string& path, uint64_t size) {
  FrameHeaderWalker walker(fd, path, size);
  uint64_t records = 0;
  IndexEntry frame;
  while (walker.Next(&frame)) ++records;
  return walker.status().ok() ? records : records + 1;
}

// A file read as the source reads it, payloads streamed through the reader's buffer.
FileRecords ScanRecords(const std::string& path, std::optional<Compression> compression,
                        SourceKind kind) {
  RecordReaderOptions rro;
  TFRecordReaderOptions& ro = rro.stream;
  ro.compression = compression;
  ro.buffer_bytes = kReadBufferBytes;
  ro.max_held_record_bytes = 0;  // hold nothing: every payload streams through
  Result<std::unique_ptr<RecordReader>> reader = OpenRecordReader(path, kind, rro);
  if (!reader.ok()) return FileRecords{1, true};
  FileRecords out;
  for (;;) {
    bool eof = false;
    Status s = (*reader)->SkipRecord(&eof);
    if (s.ok() && eof) break;
    ++out.records;
    if (!s.ok() && !(*reader)->can_continue()) break;
  }
  return out;
}

struct Key {
  std::string path;
  uint64_t size;
  int64_t mtime_ns;
  int compression;  // -1: detect
  int kind;         // SourceKind
  auto operator<=>(const Key&) const = default;
};

// Counts by key, each file counted once however many streams ask at the same time: the first
// caller counts it outside the lock, later callers of the same key wait for its result (streams
// that start together, DDP ranks times workers, would otherwise each scan every file).
class CountCache {
 public:
  template <typename Count>
  FileRecords Get(const Key& key, Count count) {
    std::unique_lock<std::mutex> lock(mu_);
    if (auto it = counts_.find(key); it != counts_.end()) return it->second;
    if (auto it = counting_.find(key); it != counting_.end()) {
      const std::shared_ptr<Counting> pending = it->second;
      done_.wait(lock, [&] { return pending->done; });
      return pending->records;
    }
    auto pending = std::make_shared<Counting>();
    counting_.emplace(key, pending);
    lock.unlock();
    const FileRecords records = count();
    lock.lock();
    pending->records = records;
    pending->done = true;
    counting_.erase(key);
    Insert(key, records);
    lock.unlock();
    done_.notify_all();
    return records;
  }

 private:
  struct Counting {
    bool done = false;  // guarded by mu_
    FileRecords records;
  };

  void Insert(const Key& key, FileRecords records) {  // REQUIRES: mu_ held
    if (!counts_.emplace(key, records).second) return;
    order_.push_back(key);
    while (order_.size() > kMaxCachedCounts) {
      counts_.erase(order_.front());
      order_.pop_front();
    }
  }

  std::mutex mu_;
  std::condition_variable done_;       // a count in counting_ finished
  std::map<Key, FileRecords> counts_;  // guarded by mu_
  std::deque<Key> order_;              // insertion order, for eviction; guarded by mu_
  // Counts in progress, at most one per key (one per concurrent caller); guarded by mu_.
  std::map<Key, std::shared_ptr<Counting>> counting_;
};

CountCache& Cache() {
  static CountCache* cache = new CountCache();  // never destroyed: used until exit
  return *cache;
}

std::atomic<uint64_t> g_scans{0};

}  // namespace

FileRecords CountFileRecords(const std::string& path, std::optional<Compression> compression,
                             SourceKind kind) {
  if (kind == SourceKind::kImage) return FileRecords{1, false};
  if (kind == SourceKind::kTar) {
    // The index the lazy start would use (RecordIndexSource::Open), when its entries group
    // members as the reader does and the shard still ends as it says (CheckTarIndexEnds): a few
    // reads instead of one per member.
    Result<Compression> c =
        compression ? Result<Compression>(*compression) : DetectTarCompression(path);
    Result<uint64_t> size = GetFileSize(path);
    if (c.ok() && *c == Compression::kNone && size.ok()) {
      Result<std::vector<TarIndexSample>> index = ReadTarIndex(IndexPathFor(path), *size);
      if (index.ok() && CheckTarIndexEnds(path, *index, RecordReaderOptions{}).ok()) {
        return FileRecords{index->size(), false};
      }
    }
    return ScanRecords(path, compression, kind);
  }
  Result<UniqueFd> fd = OpenForPositionalReads(path);
  if (!fd.ok()) return FileRecords{1, true};
  struct stat st {};
  if (::fstat(fd->get(), &st) != 0) return FileRecords{1, true};
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size == 0) return FileRecords{};
  Compression c = compression.value_or(Compression::kNone);
  if (!compression) {
    std::string head(std::min<uint64_t>(size, kTFRecordHeaderBytes), '\0');
    if (!ReadFully(fd->get(), path, 0, head.size(), head.data()).ok()) return FileRecords{1, true};
    c = DetectCompression(head);
  }
  if (c != Compression::kNone) return ScanRecords(path, c, kind);
  // The index the lazy start would use (RecordIndexSource::Open): one that tiles the file.
  Result<std::vector<IndexEntry>> index = ReadRecordIndex(IndexPathFor(path));
  if (index.ok() && IndexEndsWithFile(*index, size)) return FileRecords{index->size(), false};
  return FileRecords{ScanFrames(fd->get(), path, size), false};
}

std::vector<FileRecords> CountRecords(const std::vector<std::string>& files,
                                      const std::vector<SourceKind>& kinds,
                                      std::optional<Compression> compression) {
  std::vector<FileRecords> out;
  out.reserve(files.size());
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string& path = files[i];
    const SourceKind kind = kinds[i];
    if (kind == SourceKind::kImage) {
      out.push_back(CountFileRecords(path, compression, kind));  // no I/O: nothing to cache
      continue;
    }
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
      out.push_back(FileRecords{1, true});  // not cached: it may appear
      continue;
    }
    const Key key{path, static_cast<uint64_t>(st.st_size),
                  int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec,
                  compression ? static_cast<int>(*compression) : -1, static_cast<int>(kind)};
    out.push_back(Cache().Get(key, [&] {
      g_scans.fetch_add(1, std::memory_order_relaxed);
      return CountFileRecords(path, compression, kind);
    }));
  }
  return out;
}

uint64_t RecordCountScans() { return g_scans.load(std::memory_order_relaxed); }

}  // namespace sluice
