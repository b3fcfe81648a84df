#pragma once
// Per-kernel profile in Chrome-trace JSON (chrome://tracing, Perfetto): one complete event per
// kernel with its op, node, input shapes and duration. Enabled by ONNXTRAIN_PROFILE=<path> or
// Profiler::start(path); the file is written by Profiler::stop() and at process exit.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace onnxtrain {

class Profiler {
 public:
  static Profiler& instance();
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }

  void start(const std::string& path);
  // Writes the trace collected so far and stops collecting. Returns the number of events.
  size_t stop();

  static int64_t now_us();
  void record(std::string name, std::string op, std::string category, std::string shapes, int64_t start_us,
              int64_t duration_us);

  ~Profiler();

 private:
  Profiler();
  struct Event {
    std::string name, op, category, shapes;
    int64_t start_us, duration_us;
    uint64_t thread;
  };
  std::atomic<bool> enabled_{false};
  std::mutex mutex_;
  std::string path_;
  std::vector<Event> events_;
};

}  // namespace onnxtrain
