#pragma once
// Engine log messages. The Python bindings install a sink that forwards to Python's `logging`
// (logger "onnxtrain"), so users configure one place.
#include <functional>
#include <string>

#include "core/error.h"

namespace onnxtrain {

enum class LogLevel { Verbose = 0, Info = 1, Warning = 2, Error = 3, Fatal = 4 };

using LogSink = std::function<void(LogLevel, const std::string&)>;
void set_log_sink(LogSink sink);
void set_log_level(LogLevel level);
bool log_enabled(LogLevel level);
void log_message(LogLevel level, const std::string& message);

template <typename... Parts>
void log(LogLevel level, const Parts&... parts) {
  if (log_enabled(level)) log_message(level, str_cat(parts...));
}

}  // namespace onnxtrain
