#include "io/durable_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "onnxtrain/error.h"

namespace onnxtrain::io {
namespace {

[[noreturn]] void fail(const std::string& what, const std::string& path) {
  throw Error(what + " '" + path + "' failed: " + std::strerror(errno));
}

// fsync through a descriptor of its own: the writers (ofstream, libzip) have closed theirs, and
// Linux flushes a file's dirty pages whichever descriptor asks.
void sync_path(const std::string& path, int flags, const char* what) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) fail(std::string("opening ") + what, path);
  const int rc = ::fsync(fd);
  const int saved = errno;
  ::close(fd);
  errno = saved;
  if (rc != 0) fail(std::string("flushing ") + what, path);
}

}  // namespace

void replace_file_durably(const std::string& written, const std::string& target) {
  sync_path(written, O_RDONLY, "the new file");
  if (std::rename(written.c_str(), target.c_str()) != 0)
    throw Error("cannot rename '" + written + "' to '" + target + "': " + std::strerror(errno));
  std::filesystem::path directory = std::filesystem::path(target).parent_path();
  if (directory.empty()) directory = ".";
  sync_path(directory.string(), O_RDONLY | O_DIRECTORY, "the directory");
}

}  // namespace onnxtrain::io
