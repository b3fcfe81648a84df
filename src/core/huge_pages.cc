#include "core/huge_pages.h"

#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25  // Linux 6.1's value; older headers lack it
#endif

namespace onnxtrain {

namespace {

constexpr uintptr_t kHugePage = uintptr_t{2} << 20;
constexpr uintptr_t kPage = 4096;

uintptr_t round_down(uintptr_t n, uintptr_t to) { return n & ~(to - 1); }
uintptr_t round_up(uintptr_t n, uintptr_t to) { return round_down(n + to - 1, to); }

struct Range {
  uintptr_t begin, end;
};

class Worker {
 public:
  void collapse(uintptr_t begin, uintptr_t end) {
    begin = round_up(begin, kHugePage);
    end = round_down(end, kHugePage);
    if (end <= begin) return;
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back({begin, end});
    if (!started_) {
      started_ = true;
      std::thread([this] { work(); }).detach();
    }
    changed_.notify_all();
  }

  void forget(uintptr_t begin, uintptr_t end) {
    begin = round_down(begin, kHugePage);  // every huge page the range touches
    end = round_up(end, kHugePage);
    std::unique_lock<std::mutex> lock(mutex_);
    if (queue_.empty() && in_flight_.end == 0) return;
    drop(queue_, begin, end);
    changed_.wait(lock, [&] { return in_flight_.end <= begin || in_flight_.begin >= end; });
  }

  size_t wait_idle() {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return queue_.empty() && in_flight_.end == 0; });
    return collapsed_bytes_;
  }

  // fork() copies only the forking thread: the child's copy starts over, without the queues, so
  // that nothing in it waits for work no thread will finish.
  void before_fork() { mutex_.lock(); }
  void after_fork_in_parent() { mutex_.unlock(); }
  void after_fork_in_child() {
    queue_.clear();
    in_flight_ = {0, 0};
    started_ = false;
    mutex_.unlock();
  }

 private:
  static void drop(std::deque<Range>& queue, uintptr_t begin, uintptr_t end) {
    std::deque<Range> kept;
    for (const Range& r : queue) {
      if (r.end <= begin || r.begin >= end) {
        kept.push_back(r);
        continue;
      }
      if (r.begin < begin) kept.push_back({r.begin, begin});
      if (r.end > end) kept.push_back({end, r.end});
    }
    queue.swap(kept);
  }

  void work() {
    // Idle priority: only cycles the runs leave (the core the engine leaves free, unless something
    // else needs it). A run that touches a page under a collapse waits for it, and while it waits
    // its own core is free for this thread.
    sched_param param{};
    pthread_setschedparam(pthread_self(), SCHED_IDLE, &param);
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      changed_.wait(lock, [&] { return !queue_.empty(); });
      Range& front = queue_.front();
      in_flight_ = {front.begin, front.begin + kHugePage};  // one huge page at a time: forget() never waits long
      front.begin = in_flight_.end;
      if (front.begin >= front.end) queue_.pop_front();
      lock.unlock();
      void* at = reinterpret_cast<void*>(in_flight_.begin);
      const bool collapsed = madvise(at, kHugePage, MADV_COLLAPSE) == 0;
      if (!collapsed) madvise(at, kHugePage, MADV_HUGEPAGE);  // khugepaged may do it later
      lock.lock();
      if (collapsed) collapsed_bytes_ += kHugePage;
      in_flight_ = {0, 0};
      changed_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Range> queue_;
  Range in_flight_{0, 0};
  size_t collapsed_bytes_ = 0;
  bool started_ = false;
};

// Never destroyed: its thread runs until the process ends.
Worker& worker() {
  static Worker* w = [] {
    auto* made = new Worker();
    pthread_atfork([] { worker().before_fork(); }, [] { worker().after_fork_in_parent(); },
                   [] { worker().after_fork_in_child(); });
    return made;
  }();
  return *w;
}

uintptr_t address(uint8_t* p) { return reinterpret_cast<uintptr_t>(p); }

std::atomic<bool> g_spare_core{false};

}  // namespace

void set_spare_core(bool spare) { g_spare_core.store(spare, std::memory_order_relaxed); }
bool has_spare_core() { return g_spare_core.load(std::memory_order_relaxed); }

void collapse_to_huge_pages_later(uint8_t* begin, size_t bytes) {
  if (has_spare_core()) {
    worker().collapse(address(begin), address(begin) + bytes);
    return;
  }
  const uintptr_t from = round_up(address(begin), kPage), to = round_down(address(begin) + bytes, kPage);
  if (to > from) madvise(reinterpret_cast<void*>(from), to - from, MADV_HUGEPAGE);
}
void forget_huge_page_collapse(uint8_t* begin, size_t bytes) { worker().forget(address(begin), address(begin) + bytes); }
size_t wait_for_huge_page_collapses() { return worker().wait_idle(); }

}  // namespace onnxtrain
