// Files the product replaces (checkpoints, artifacts, exported models) reach stable storage before
// their new name does: the new file is flushed, then renamed over the old one, then its directory is
// flushed. Without the first flush a power loss can leave the name on an empty file; without the
// last one, the old file.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <limits.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <mutex>

#include "api/internal.h"
#include "io/durable_file.h"
#include "io/npz.h"
#include "onnxtrain/error.h"
#include "tests/cpp/file_sync_recorder.h"

namespace {

std::mutex g_mutex;
std::vector<std::string>* g_events = nullptr;

std::string fd_path(int fd) {
  char target[PATH_MAX];
  const std::string link = "/proc/self/fd/" + std::to_string(fd);
  const ssize_t n = ::readlink(link.c_str(), target, sizeof target - 1);
  return n < 0 ? "?" : std::string(target, static_cast<size_t>(n));
}

std::string absolute(const char* path) { return std::filesystem::absolute(path).lexically_normal().string(); }

void record(const std::string& event) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_events) g_events->push_back(event);
}

}  // namespace

extern "C" int fsync(int fd) {
  record("fsync " + fd_path(fd));
  static auto real = reinterpret_cast<int (*)(int)>(dlsym(RTLD_NEXT, "fsync"));
  return real(fd);
}

extern "C" int rename(const char* from, const char* to) {
  record("rename " + absolute(from) + " -> " + absolute(to));
  static auto real = reinterpret_cast<int (*)(const char*, const char*)>(dlsym(RTLD_NEXT, "rename"));
  return real(from, to);
}

namespace onnxtrain::testing {

FileSyncRecorder::FileSyncRecorder() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_events = new std::vector<std::string>;
}
FileSyncRecorder::~FileSyncRecorder() {
  std::lock_guard<std::mutex> lock(g_mutex);
  delete g_events;
  g_events = nullptr;
}
const std::vector<std::string>& FileSyncRecorder::events() const { return *g_events; }

namespace {

namespace fs = std::filesystem;

class DurableFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("onnxtrain_durable_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    dir_ = fs::canonical(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // The three events of a durable replacement of `target` by `written`, in order.
  std::vector<std::string> durable_replacement(const std::string& written, const std::string& target) const {
    return {"fsync " + written, "rename " + written + " -> " + target, "fsync " + dir_.string()};
  }

  fs::path dir_;
};

TEST_F(DurableFiles, NewFileIsFlushedBeforeTheRenameAndTheDirectoryAfter) {
  { std::ofstream(path("new")) << "payload"; }
  { std::ofstream(path("target")) << "old"; }
  FileSyncRecorder recorder;
  io::replace_file_durably(path("new"), path("target"));
  EXPECT_EQ(recorder.events(), durable_replacement(path("new"), path("target")));
  std::ifstream in(path("target"));
  std::string content;
  in >> content;
  EXPECT_EQ(content, "payload");
  EXPECT_FALSE(fs::exists(path("new")));
}

TEST_F(DurableFiles, WrittenFilesAndZipsAreReplacedDurably) {
  FileSyncRecorder recorder;
  api::write_file_bytes(path("model.onnx"), "bytes");
  EXPECT_EQ(recorder.events(), durable_replacement(path("model.onnx.tmp"), path("model.onnx")));
}

TEST_F(DurableFiles, MissingFileIsAnErrorNamingIt) {
  try {
    io::replace_file_durably(path("absent"), path("target"));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path("absent")), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(path("target")));
}

}  // namespace
}  // namespace onnxtrain::testing
