#pragma once
// The one exception type of onnxtrain: the engine throws it (or UnsupportedError, derived from it)
// with a complete sentence naming the op, node, tensor or file at fault.
#include <stdexcept>
#include <string>

// Marks what the shared library exports: the engine is built with hidden symbols, and only the
// public API (this header and onnxtrain.h) is visible to a program linking libonnxtrain.
#if defined(__GNUC__) || defined(__clang__)
#define ONNXTRAIN_API __attribute__((visibility("default")))
#else
#define ONNXTRAIN_API
#endif

namespace onnxtrain {

class ONNXTRAIN_API Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace onnxtrain
