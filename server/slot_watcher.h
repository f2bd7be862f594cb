// Waits, for shared-memory streams, on conditions another process changes: a client attaching
// to its segment, freeing a slot, or (once the stream ended) being done with every slot. Such changes wake nobody (they are stores into shared
// memory), so one thread polls every watched condition while there are any — every 200 µs after
// a change, backing off to every 2 ms while nothing changes — and sleeps while there are none. A
// stream's write reactor must not block, so it hands its wait to the watcher and continues in
// `ready`.
#pragma once

#include <condition_variable>
#include <functional>
#include <list>
#include <mutex>
#include <thread>

namespace sluice {

class SlotWatcher {
 public:
  SlotWatcher();
  ~SlotWatcher();  // stops the thread; watches left are dropped without their ready()
  SlotWatcher(const SlotWatcher&) = delete;
  SlotWatcher& operator=(const SlotWatcher&) = delete;

  // Calls ready() once, on the watcher's thread, as soon as check() (called there too) returns
  // true. One watch per owner at a time.
  void Watch(const void* owner, std::function<bool()> check, std::function<void()> ready);
  // Drops owner's watch, if any; when its check() or ready() is running, waits for it to return.
  // Never call it from inside them.
  void Cancel(const void* owner);

 private:
  struct Entry {
    const void* owner;
    std::function<bool()> check;
    std::function<void()> ready;
  };
  void Run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::list<Entry> entries_;       // guarded by mu_
  const void* running_ = nullptr;  // the owner whose check/ready runs now; guarded by mu_
  bool stop_ = false;              // guarded by mu_
  std::thread thread_;
};

}  // namespace sluice
