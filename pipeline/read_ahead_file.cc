#include "pipeline/read_ahead_file.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace sluice {
namespace {

class ReadAheadFile final : public LendingSequentialFile {
 public:
  ReadAheadFile(std::unique_ptr<SequentialFile> base, IoPool* pool,
                const ReadAheadOptions& options)
      : base_(std::move(base)),
        pool_(pool),
        chunk_bytes_(std::max<size_t>(1, options.chunk_bytes)),
        memory_(options.memory),
        name_(base_->name()),
        chunks_(static_cast<size_t>(std::max(1, options.chunks))) {
    // Not zero-filled: pages a short file never reaches are never touched.
    for (Chunk& c : chunks_) c.data.reset(new char[chunk_bytes_]);
    if (memory_) memory_->Add(reserved_bytes(), static_cast<int64_t>(chunks_.size()));
    std::lock_guard<std::mutex> lock(mu_);
    ScheduleLocked();
  }

  ~ReadAheadFile() override {
    {
      std::unique_lock<std::mutex> lock(mu_);
      closing_ = true;
      if (scheduled_ && pool_->Cancel(task_)) scheduled_ = false;
      // A read already running finishes its chunk (it sees closing_ and queues no other).
      cv_.wait(lock, [this] { return !scheduled_; });
    }
    if (memory_) memory_->Remove(reserved_bytes(), static_cast<int64_t>(chunks_.size()));
  }

  ReadAheadFile(const ReadAheadFile&) = delete;
  ReadAheadFile& operator=(const ReadAheadFile&) = delete;

  Status Read(size_t n, char* scratch, size_t* bytes_read) override {
    *bytes_read = 0;
    if (n == 0) return Status::OK();
    size_t out = 0;
    std::unique_lock<std::mutex> lock(mu_);
    while (out < n) {
      if (consumed_ == filled_) {
        if (out > 0) break;  // a short read rather than a wait
        cv_.wait(lock, [this] { return consumed_ < filled_; });
      }
      Chunk& c = chunks_[consumed_ % chunks_.size()];
      if (c.pos == c.size) {
        if (GiveBackLocked(c)) continue;
        // The last chunk: its end of file or error answers this and every later call.
        if (!c.status.ok() && out == 0) return c.status;
        break;
      }
      // Chunks in [consumed_, filled_) belong to this (the reading) thread: the pool fills only
      // chunk filled_, so the copy needs no lock.
      lock.unlock();
      const size_t take = std::min(n - out, c.size - c.pos);
      std::memcpy(scratch + out, c.data.get() + c.pos, take);
      c.pos += take;
      out += take;
      lock.lock();
      GiveBackLocked(c);
    }
    *bytes_read = out;
    return Status::OK();
  }

  // Lends the rest of the current chunk; it is given back to the pool at the next call.
  Status Lend(std::string_view* data) override {
    *data = {};
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [this] { return consumed_ < filled_; });
      Chunk& c = chunks_[consumed_ % chunks_.size()];
      if (c.pos < c.size) {
        *data = std::string_view(c.data.get() + c.pos, c.size - c.pos);
        c.pos = c.size;
        return Status::OK();
      }
      if (!GiveBackLocked(c)) return c.status;  // the last chunk: OK and empty at the end
    }
  }

  const std::string& name() const override { return name_; }

 private:
  struct Chunk {
    std::unique_ptr<char[]> data;  // chunk_bytes_
    size_t size = 0;               // bytes the base delivered into it
    size_t pos = 0;                // bytes of it read; reading thread only
    Status status;                 // the base's error after those bytes, if any
    bool eof = false;              // the base ended after those bytes
  };

  int64_t reserved_bytes() const {
    return static_cast<int64_t>(chunk_bytes_ * chunks_.size());
  }

  // Hands chunk c (the current one) back to the pool when it has been read to its end and is not
  // the last one; returns whether it did. REQUIRES: mu_ held.
  bool GiveBackLocked(const Chunk& c) {
    if (c.pos < c.size || !c.status.ok() || c.eof) return false;
    ++consumed_;
    ScheduleLocked();
    return true;
  }

  // Queues the read of chunk filled_ when it is free and the base may have more.
  // REQUIRES: mu_ held.
  void ScheduleLocked() {
    if (scheduled_ || closing_ || base_done_ || filled_ - consumed_ >= chunks_.size()) return;
    scheduled_ = true;
    task_ = pool_->Submit([this] { Fill(); });
  }

  // A pool task: reads one chunk of the base. One chunk per task, queued again behind the other
  // files' reads, so the cycle's files take turns on the pool.
  void Fill() {
    Chunk* c;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closing_) {
        scheduled_ = false;
        cv_.notify_all();
        return;
      }
      c = &chunks_[filled_ % chunks_.size()];
    }
    size_t got = 0;
    Status status;
    bool eof = false;
    while (got < chunk_bytes_) {
      size_t r = 0;
      status = base_->Read(chunk_bytes_ - got, c->data.get() + got, &r);
      if (!status.ok()) break;
      if (r == 0) {
        eof = true;
        break;
      }
      got += r;
    }
    std::lock_guard<std::mutex> lock(mu_);
    c->size = got;
    c->pos = 0;
    c->eof = eof;
    base_done_ = eof || !status.ok();
    c->status = std::move(status);
    ++filled_;
    scheduled_ = false;
    ScheduleLocked();
    // Under the lock: once it is released a closing destructor may free this object.
    cv_.notify_all();
  }

  std::unique_ptr<SequentialFile> base_;  // read by the one Fill task in flight only
  IoPool* const pool_;
  const size_t chunk_bytes_;
  PoolCounters* const memory_;
  const std::string name_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Chunk> chunks_;  // a ring, indexed by chunk number mod size; see Read()
  uint64_t consumed_ = 0;      // chunks read to their end; guarded by mu_
  uint64_t filled_ = 0;        // chunks the pool has filled; guarded by mu_
  bool scheduled_ = false;     // a Fill task is queued or running; guarded by mu_
  IoPool::TaskId task_ = 0;    // that task; guarded by mu_
  bool base_done_ = false;     // the base reported its end or an error; guarded by mu_
  bool closing_ = false;       // guarded by mu_
};

}  // namespace

std::unique_ptr<SequentialFile> NewReadAheadFile(std::unique_ptr<SequentialFile> base,
                                                 IoPool* pool, const ReadAheadOptions& options) {
  return std::make_unique<ReadAheadFile>(std::move(base), pool, options);
}

}  // namespace sluice
