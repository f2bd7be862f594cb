// ReadAheadFile and its IoPool: the same bytes and errors as the plain file, in the same order,
// for every chunk and read size; safe destruction with reads queued or running; memory accounted.
#include "pipeline/read_ahead_file.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <future>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "formats/tfrecord_reader.h"
#include "formats/tfrecord_writer.h"
#include "pipeline/io_pool.h"
#include "tests/test_support.h"

namespace sluice {
namespace {

using testing::RandomBytes;

// Everything a SequentialFile delivers: its bytes up to the first error or end of file, and that
// error (OK at end of file).
struct Drained {
  std::string bytes;
  Status status;
  size_t calls = 0;
};

// Reads with sizes cycling through read_sizes.
Drained Drain(SequentialFile* file, const std::vector<size_t>& read_sizes) {
  Drained d;
  std::string scratch;
  for (size_t i = 0;; ++i) {
    const size_t n = read_sizes[i % read_sizes.size()];
    scratch.resize(n);
    size_t got = 0;
    ++d.calls;
    d.status = file->Read(n, scratch.data(), &got);
    if (!d.status.ok()) return d;
    REQUIRE(got <= n);
    if (got == 0) return d;
    d.bytes.append(scratch.data(), got);
  }
}

ReadAheadOptions Chunks(size_t chunk_bytes, int chunks, PoolCounters* memory = nullptr) {
  ReadAheadOptions o;
  o.chunk_bytes = chunk_bytes;
  o.chunks = chunks;
  o.memory = memory;
  return o;
}

TEST_CASE("ByteIdenticalForManyChunkAndReadSizes") {
  IoPool pool(3);
  const std::vector<size_t> sizes = {0, 1, 4095, 4096, 4097, 300001};
  const std::vector<size_t> chunk_sizes = {1, 7, 4096, 65536, 1 << 20};
  const std::vector<std::vector<size_t>> read_patterns = {
      {1}, {13}, {4096}, {1 << 20}, {5, 100000, 1, 4096, 777}};
  for (size_t size : sizes) {
    const std::string contents = RandomBytes(size, static_cast<uint32_t>(size));
    for (size_t chunk : chunk_sizes) {
      if (size / chunk > 5000) continue;  // one pool task per chunk: keep the test short
      for (int chunks : {1, 2, 3}) {
        for (const auto& reads : read_patterns) {
          if (size / reads[0] > 50000) continue;
          INFO("size " << size << " chunk " << chunk << " x" << chunks << " first read "
                       << reads[0]);
          auto file = NewReadAheadFile(NewMemoryFile("mem", contents), &pool,
                                       Chunks(chunk, chunks));
          Drained d = Drain(file.get(), reads);
          REQUIRE(d.status.ok());
          REQUIRE(d.bytes == contents);
          // End of file is sticky.
          char c;
          size_t got = 1;
          REQUIRE(file->Read(1, &c, &got).ok());
          REQUIRE(got == 0);
        }
      }
    }
  }
}

TEST_CASE("FilesOfACycleReadInTurnsShareThePool") {
  IoPool pool(2);
  std::vector<std::string> contents;
  std::vector<std::unique_ptr<SequentialFile>> files;
  for (int i = 0; i < 6; ++i) {
    contents.push_back(RandomBytes(100000 + 977 * i, 100 + i));
    std::string name = "f";
    name += std::to_string(i);
    files.push_back(NewReadAheadFile(NewMemoryFile(name, contents.back()), &pool,
                                     Chunks(4096, 2)));
  }
  std::vector<std::string> got(files.size());
  bool more = true;
  while (more) {
    more = false;
    for (size_t i = 0; i < files.size(); ++i) {
      char buf[3000];
      size_t n = 0;
      REQUIRE(files[i]->Read(sizeof(buf), buf, &n).ok());
      got[i].append(buf, n);
      more |= n > 0;
    }
  }
  for (size_t i = 0; i < files.size(); ++i) CHECK(got[i] == contents[i]);
}

TEST_CASE("NameIsTheBaseFilesName") {
  IoPool pool(1);
  auto file = NewReadAheadFile(NewMemoryFile("shard-7.tfrecord", "abc"), &pool, Chunks(2, 2));
  CHECK(file->name() == "shard-7.tfrecord");
}

TEST_CASE("ZeroLengthFileIsAtEndAtOnce") {
  IoPool pool(1);
  auto file = NewReadAheadFile(NewMemoryFile("empty", ""), &pool, Chunks(1 << 20, 2));
  for (int i = 0; i < 3; ++i) {
    char buf[16];
    size_t got = 99;
    REQUIRE(file->Read(sizeof(buf), buf, &got).ok());
    CHECK(got == 0);
  }
  size_t got = 99;
  REQUIRE(file->Read(0, nullptr, &got).ok());
  CHECK(got == 0);
}

TEST_CASE("InjectedIoErrorSurfacesAfterTheBytesBeforeItWithTheSameMessage") {
  IoPool pool(2);
  const std::string contents = RandomBytes(50000, 7);
  for (size_t chunk : {size_t{1000}, size_t{4096}, size_t{1} << 20}) {
    for (int64_t fail_at : {int64_t{0}, int64_t{1}, int64_t{999}, int64_t{1000}, int64_t{1001},
                            int64_t{4096}, int64_t{12345}, int64_t{49999}}) {
      for (size_t read : {size_t{1}, size_t{333}, size_t{1} << 20}) {
        if (read == 1 && fail_at > 5000) continue;
        INFO("chunk " << chunk << " fail_at " << fail_at << " read " << read);
        auto plain = NewMemoryFile("shard-3", contents, fail_at);
        auto ahead = NewReadAheadFile(NewMemoryFile("shard-3", contents, fail_at), &pool,
                                      Chunks(chunk, 2));
        Drained want = Drain(plain.get(), {read});
        Drained got = Drain(ahead.get(), {read});
        REQUIRE_FALSE(want.status.ok());
        CHECK(got.bytes == want.bytes);
        CHECK(got.bytes.size() == static_cast<size_t>(fail_at));
        CHECK(got.status.code() == want.status.code());
        CHECK(got.status.message() == want.status.message());
        // Final: every later call reports it again.
        char c;
        size_t n = 1;
        Status again = ahead->Read(1, &c, &n);
        CHECK(again.message() == want.status.message());
        CHECK(n == 0);
      }
    }
  }
}

TEST_CASE("LentChunksGiveTheSameBytesAndErrorAsReads") {
  IoPool pool(2);
  const std::string contents = RandomBytes(30000, 11);
  for (size_t chunk : {size_t{1}, size_t{999}, size_t{4096}, size_t{1} << 20}) {
    for (int64_t fail_at : {int64_t{-1}, int64_t{0}, int64_t{998}, int64_t{4096}, int64_t{29999}}) {
      // Lend, and every third call a Read of 100 bytes, mixed.
      INFO("chunk " << chunk << " fail_at " << fail_at);
      auto plain = NewMemoryFile("m", contents, fail_at);
      Drained want = Drain(plain.get(), {1 << 20});
      auto file = NewReadAheadFile(NewMemoryFile("m", contents, fail_at), &pool, Chunks(chunk, 2));
      auto* lender = dynamic_cast<LendingSequentialFile*>(file.get());
      REQUIRE(lender != nullptr);
      std::string got;
      Status status;
      for (int i = 0;; ++i) {
        if (i % 3 == 2) {
          char buf[100];
          size_t n = 0;
          status = file->Read(sizeof(buf), buf, &n);
          if (!status.ok() || n == 0) break;
          got.append(buf, n);
        } else {
          std::string_view data;
          status = lender->Lend(&data);
          if (!status.ok() || data.empty()) break;
          got.append(data);
        }
      }
      CHECK(got == want.bytes);
      CHECK(status.message() == want.status.message());
      std::string_view data = "x";
      CHECK(lender->Lend(&data).message() == want.status.message());  // final either way
      CHECK(data.empty());
    }
  }
}

// What a TFRecordReader makes of a stream: its records, then the first error with the offset of
// the record it hit.
struct ReaderRun {
  std::vector<std::string> records;
  std::vector<uint64_t> offsets;
  Status status;
  uint64_t error_offset = 0;
};

ReaderRun ReadRecords(std::unique_ptr<SequentialFile> file, size_t buffer_bytes) {
  TFRecordReaderOptions options;
  options.buffer_bytes = buffer_bytes;
  TFRecordReader reader(std::move(file), options);
  ReaderRun run;
  for (;;) {
    std::string_view record;
    bool eof = false;
    run.status = reader.ReadRecord(&record, &eof);
    if (!run.status.ok()) {
      run.error_offset = reader.record_offset();
      return run;
    }
    if (eof) return run;
    run.records.emplace_back(record);
    run.offsets.push_back(reader.record_offset());
  }
}

TEST_CASE("RecordReaderSeesTheSameRecordsAndErrorAtTheSameOffset") {
  IoPool pool(2);
  std::string shard;
  for (int i = 0; i < 200; ++i) AppendTFRecordFrame(RandomBytes(10 + 37 * i, i), &shard);
  for (int64_t fail_at : {int64_t{-1}, int64_t{0}, int64_t{5000}, int64_t{123457},
                          static_cast<int64_t>(shard.size()) - 1}) {
    for (size_t buffer : {size_t{64}, size_t{4096}, size_t{1} << 20}) {
      INFO("fail_at " << fail_at << " buffer " << buffer);
      ReaderRun want = ReadRecords(NewMemoryFile("s.tfrecord", shard, fail_at), buffer);
      ReaderRun got = ReadRecords(
          NewReadAheadFile(NewMemoryFile("s.tfrecord", shard, fail_at), &pool, Chunks(4096, 2)),
          buffer);
      CHECK(got.records == want.records);
      CHECK(got.offsets == want.offsets);
      CHECK(got.status.code() == want.status.code());
      CHECK(got.status.message() == want.status.message());
      CHECK(got.error_offset == want.error_offset);
      if (fail_at < 0) CHECK(got.records.size() == 200);
    }
  }
}

// A base file that can be held inside Read and that records whether it was read after its
// destruction began.
struct SlowState {
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  int reads_started = 0;
  std::atomic<bool> destroyed{false};
  std::atomic<bool> read_after_destroy{false};
};

class SlowFile final : public SequentialFile {
 public:
  explicit SlowFile(SlowState* s) : s_(s) {}
  ~SlowFile() override { s_->destroyed = true; }
  Status Read(size_t n, char* scratch, size_t* bytes_read) override {
    if (s_->destroyed) s_->read_after_destroy = true;
    std::unique_lock<std::mutex> lock(s_->mu);
    ++s_->reads_started;
    s_->cv.notify_all();
    s_->cv.wait(lock, [this] { return s_->release; });
    std::memset(scratch, 'x', n);
    *bytes_read = n;  // endless
    return Status::OK();
  }
  const std::string& name() const override { return name_; }

 private:
  SlowState* s_;
  std::string name_ = "slow";
};

TEST_CASE("DestroyWhileAReadIsRunningWaitsForIt") {
  IoPool pool(2);
  SlowState state;
  auto file = NewReadAheadFile(std::make_unique<SlowFile>(&state), &pool, Chunks(100, 2));
  {
    std::unique_lock<std::mutex> lock(state.mu);
    state.cv.wait(lock, [&] { return state.reads_started == 1; });
  }
  // The read is held in the base: destruction must wait for it, not free the file under it.
  auto destroyed = std::async(std::launch::async, [&] { file.reset(); });
  CHECK(destroyed.wait_for(std::chrono::milliseconds(100)) == std::future_status::timeout);
  CHECK_FALSE(state.destroyed);
  {
    std::lock_guard<std::mutex> lock(state.mu);
    state.release = true;
  }
  state.cv.notify_all();
  destroyed.get();
  CHECK(state.destroyed);
  CHECK_FALSE(state.read_after_destroy);
}

TEST_CASE("DestroyWithAReadQueuedCancelsIt") {
  IoPool pool(1);
  // Occupy the only pool thread so the file's first read stays queued.
  std::promise<void> go;
  std::shared_future<void> go_future = go.get_future().share();
  std::promise<void> busy;
  pool.Submit([&] {
    busy.set_value();
    go_future.wait();
  });
  busy.get_future().wait();
  SlowState state;
  state.release = true;
  auto file = NewReadAheadFile(std::make_unique<SlowFile>(&state), &pool, Chunks(100, 2));
  file.reset();  // must not wait for the busy thread: its read is taken off the queue
  CHECK(state.destroyed);
  go.set_value();
  // Give the pool a chance to run anything still queued: nothing may touch the file.
  std::promise<void> after;
  pool.Submit([&] { after.set_value(); });
  after.get_future().wait();
  CHECK(state.reads_started == 0);
}

TEST_CASE("DestroyMidFileWithReadsInFlight") {
  // Many files dropped at every point of their reading, with the pool busy: no crash, no leak
  // (run under ASan/TSan to see it).
  IoPool pool(3);
  const std::string contents = RandomBytes(200000, 3);
  for (int stop_after = 0; stop_after < 60; ++stop_after) {
    auto file = NewReadAheadFile(NewMemoryFile("m", contents), &pool, Chunks(1000, 2));
    char buf[700];
    for (int i = 0; i < stop_after; ++i) {
      size_t got = 0;
      REQUIRE(file->Read(sizeof(buf), buf, &got).ok());
    }
  }
}

TEST_CASE("ChunkBuffersAreAccountedWhileTheFileIsOpen") {
  IoPool pool(1);
  PoolCounters memory;
  {
    auto file = NewReadAheadFile(NewMemoryFile("m", RandomBytes(10000, 1)), &pool,
                                 Chunks(1000, 2, &memory));
    CHECK(memory.bytes == 2000);
    CHECK(memory.items == 2);
    Drained d = Drain(file.get(), {512});
    CHECK(d.bytes.size() == 10000);
  }
  CHECK(memory.bytes == 0);
  CHECK(memory.items == 0);
  CHECK(memory.peak == 2000);
}

TEST_CASE("PoolRunsTasksInOrderAndCancelRemovesOnlyQueuedOnes") {
  IoPool pool(1);
  std::promise<void> go;
  std::shared_future<void> go_future = go.get_future().share();
  std::promise<void> started;
  IoPool::TaskId blocker = pool.Submit([&] {
    started.set_value();
    go_future.wait();
  });
  started.get_future().wait();
  std::mutex mu;
  std::vector<int> ran;
  std::vector<IoPool::TaskId> ids;
  for (int i = 0; i < 4; ++i) {
    ids.push_back(pool.Submit([&, i] {
      std::lock_guard<std::mutex> lock(mu);
      ran.push_back(i);
    }));
  }
  CHECK_FALSE(pool.Cancel(blocker));  // running
  CHECK(pool.Cancel(ids[2]));
  CHECK_FALSE(pool.Cancel(ids[2]));
  go.set_value();
  std::promise<void> done;
  pool.Submit([&] { done.set_value(); });
  done.get_future().wait();
  std::lock_guard<std::mutex> lock(mu);
  CHECK(ran == std::vector<int>{0, 1, 3});
}

}  // namespace
}  // namespace sluice
