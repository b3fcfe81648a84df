#include "runtime/profiler.h"

#include <cstdlib>
#include <fstream>
#include <functional>
#include <thread>

#include "core/logging.h"

namespace onnxtrain {
namespace {

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;
    out += c;
  }
  return out;
}

}  // namespace

Profiler& Profiler::instance() {
  static Profiler profiler;
  return profiler;
}

Profiler::Profiler() {
  if (const char* path = std::getenv("ONNXTRAIN_PROFILE"); path && *path) start(path);
}

Profiler::~Profiler() {
  if (enabled()) stop();
}

void Profiler::start(const std::string& path) {
  std::lock_guard<std::mutex> lock(mutex_);
  path_ = path;
  events_.clear();
  events_.reserve(1 << 16);
  enabled_ = true;
}

int64_t Profiler::now_us() {
  using namespace std::chrono;
  return duration_cast<microseconds>(steady_clock::now().time_since_epoch()).count();
}

void Profiler::record(std::string name, std::string op, std::string category, std::string shapes, int64_t start_us,
                      int64_t duration_us) {
  uint64_t thread = std::hash<std::thread::id>()(std::this_thread::get_id()) % 100000;
  std::lock_guard<std::mutex> lock(mutex_);
  if (!enabled_) return;
  events_.push_back({std::move(name), std::move(op), std::move(category), std::move(shapes), start_us, duration_us,
                     thread});
}

size_t Profiler::stop() {
  std::lock_guard<std::mutex> lock(mutex_);
  enabled_ = false;
  std::ofstream out(path_);
  if (!out) {
    log(LogLevel::Error, "cannot write the profile to '", path_, "'");
    return 0;
  }
  out << "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  for (size_t i = 0; i < events_.size(); ++i) {
    const Event& e = events_[i];
    out << (i ? ",\n" : "") << "{\"name\": \"" << json_escape(e.op) << "\", \"cat\": \"" << json_escape(e.category)
        << "\", \"ph\": \"X\", \"ts\": " << e.start_us << ", \"dur\": " << e.duration_us
        << ", \"pid\": 1, \"tid\": " << e.thread << ", \"args\": {\"node\": \"" << json_escape(e.name)
        << "\", \"op\": \"" << json_escape(e.op) << "\", \"shapes\": \"" << json_escape(e.shapes) << "\"}}";
  }
  out << "\n]}\n";
  size_t n = events_.size();
  log(LogLevel::Info, "wrote ", n, " profile events to '", path_, "'");
  events_.clear();
  return n;
}

}  // namespace onnxtrain
