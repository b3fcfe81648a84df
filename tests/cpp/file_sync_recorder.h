#pragma once
// Records the fsync and rename calls the engine makes while a FileSyncRecorder is alive: the test
// binary defines fsync and rename itself (tests/cpp/test_durable_files.cc), so the engine's calls,
// linked into this binary, reach the recorder before libc. Each event is "fsync PATH" or
// "rename FROM -> TO", paths as the kernel resolves them.
#include <string>
#include <vector>

namespace onnxtrain::testing {

class FileSyncRecorder {
 public:
  FileSyncRecorder();
  ~FileSyncRecorder();
  FileSyncRecorder(const FileSyncRecorder&) = delete;
  FileSyncRecorder& operator=(const FileSyncRecorder&) = delete;
  const std::vector<std::string>& events() const;
};

}  // namespace onnxtrain::testing
