// libFuzzer entry point: bytes -> ONNX model -> inference and training sessions -> a run on small
// random inputs (exercise_model.cc). Built and run by scripts/fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <string>

#include "tests/fuzz/exercise_model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  onnxtrain::fuzzing::exercise_model(std::string(reinterpret_cast<const char*>(data), size));
  return 0;
}
