#pragma once
// Helpers of the public API's tests: a fresh directory per test, byte equality of arrays, the
// text of the onnxtrain::Error a call throws, and raw reference files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "onnxtrain/onnxtrain.h"

namespace onnxtrain::testing {

// A directory named after the running test, emptied when made and removed after.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "onnxtrain_api_") {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = std::filesystem::temp_directory_path() /
            (prefix + std::to_string(::getpid()) + "_" + info->test_suite_name() + "_" + info->name());
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

inline bool same_bytes(const Array& a, const Array& b) {
  return a.type == b.type && a.shape == b.shape && a.bytes == b.bytes;
}

// The message of the onnxtrain::Error that f throws; a test failure when it throws none.
inline std::string expect_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no onnxtrain::Error was thrown";
  return "";
}

// n values of type T from a raw binary file (what the torch reference scripts write).
template <typename T>
std::vector<T> read_raw(const std::string& path, size_t n) {
  std::vector<T> v(n);
  std::ifstream in(path, std::ios::binary);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(n * sizeof(T)));
  EXPECT_TRUE(in.good()) << path;
  return v;
}

#define EXPECT_HAS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << (text)

}  // namespace onnxtrain::testing
