#include "core/logging.h"

#include <atomic>
#include <iostream>
#include <mutex>

namespace onnxtrain {
namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::Warning)};
std::mutex g_sink_mutex;
LogSink& sink() {
  static LogSink s;
  return s;
}
}  // namespace

void set_log_sink(LogSink s) {
  std::lock_guard<std::mutex> lock(g_sink_mutex);
  sink() = std::move(s);
}

void set_log_level(LogLevel level) { g_level = static_cast<int>(level); }

bool log_enabled(LogLevel level) { return static_cast<int>(level) >= g_level.load(); }

void log_message(LogLevel level, const std::string& message) {
  LogSink current;
  {
    // Called outside the lock: a Python sink takes the GIL, which another thread may hold.
    std::lock_guard<std::mutex> lock(g_sink_mutex);
    current = sink();
  }
  if (current) {
    current(level, message);
  } else {
    static const char* names[] = {"VERBOSE", "INFO", "WARNING", "ERROR", "FATAL"};
    std::cerr << "onnxtrain " << names[static_cast<int>(level)] << ": " << message << "\n";
  }
}

}  // namespace onnxtrain
