#pragma once
// ONNX's domain of training ops: the optimizers Adam, Adagrad, Momentum and the Gradient op.
namespace onnxtrain {
inline constexpr const char* kOnnxPreviewTrainingDomain = "ai.onnx.preview.training";
}  // namespace onnxtrain
