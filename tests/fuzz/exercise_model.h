#pragma once
// What the fuzzer does with one input, shared with the regression replay in the normal suite:
// load the bytes as an ONNX model, build an inference session and a training session, and run
// both on small random inputs. Errors (bad models, unsupported ops) are expected and swallowed;
// anything else (a crash, a sanitizer report, a hang) is a bug.
#include <string>

namespace onnxtrain::fuzzing {

// Returns a one-line account of how far the model got, for the replay test's log.
std::string exercise_model(const std::string& bytes);

}  // namespace onnxtrain::fuzzing
