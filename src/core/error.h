#pragma once
// Errors carry a full sentence for the user: which op, node and tensor went wrong and why.
#include <sstream>
#include <stdexcept>
#include <string>

#include "onnxtrain/error.h"

namespace onnxtrain {

// Raised when a graph needs an op (or a gradient of an op) that onnxtrain does not implement.
// The Python front end maps it to its fallback policy.
class UnsupportedError : public Error {
 public:
  using Error::Error;
};

// Raised when a graph's structure, fixed when it was exported, does not fit this run's inputs (how
// many pieces a chunk makes depends on a size): the front end exports the module again for them.
class ExportMismatchError : public Error {
 public:
  using Error::Error;
};

template <typename... Parts>
std::string str_cat(const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  return os.str();
}

}  // namespace onnxtrain

#define OT_CHECK(cond, ...)                                              \
  do {                                                                   \
    if (!(cond)) throw ::onnxtrain::Error(::onnxtrain::str_cat(__VA_ARGS__)); \
  } while (0)

#define OT_THROW(...) throw ::onnxtrain::Error(::onnxtrain::str_cat(__VA_ARGS__))
