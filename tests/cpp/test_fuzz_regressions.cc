// Replays every input in tests/fuzz/regressions/ (inputs that once crashed the fuzzer) through the
// fuzzer's own harness, against the normal build: each must end in an error or a run, not a crash.
#include <dirent.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "tests/fuzz/exercise_model.h"

namespace {

std::string regression_dir() {
  const char* root = std::getenv("ONNXTRAIN_SOURCE_DIR");
  return std::string(root ? root : ".") + "/tests/fuzz/regressions";
}

std::vector<std::string> regression_files() {
  std::vector<std::string> out;
  if (DIR* d = opendir(regression_dir().c_str())) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.' && std::string(e->d_name) != "README.md") out.push_back(e->d_name);
    closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(FuzzRegressions, EveryRecordedCrashNowEndsInAnErrorOrARun) {
  const auto files = regression_files();
  ASSERT_FALSE(files.empty()) << "no regression inputs in " << regression_dir();
  for (const auto& name : files) {
    std::ifstream in(regression_dir() + "/" + name, std::ios::binary);
    std::ostringstream bytes;
    bytes << in.rdbuf();
    SCOPED_TRACE(name);
    const std::string account = onnxtrain::fuzzing::exercise_model(bytes.str());
    EXPECT_FALSE(account.empty());
    std::cout << name << ": " << account.substr(0, 300) << "\n";
  }
}

}  // namespace
