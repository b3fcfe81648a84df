#include "tests/fuzz/exercise_model.h"

#include <algorithm>
#include <cstring>
#include <random>

#include "core/logging.h"
#include "onnx/model_io.h"
#include "ops/control/subgraph.h"
#include "session/training_session.h"

namespace onnxtrain::fuzzing {
namespace {

// Inputs stay small whatever the model declares: symbolic or huge dims become small ones.
constexpr int64_t kMaxDim = 6, kMaxElements = 4096, kMaxNodes = 400;
constexpr size_t kMaxTensorBytes = size_t(256) << 20;
constexpr int64_t kMaxLoopIterations = 1000;  // a fuzzed trip count must not stall the fuzzer

TensorShape input_shape(const ValueInfo* vi) {
  TensorShape shape;
  if (!vi || !vi->shape) return TensorShape{3};
  for (const Dim& d : *vi->shape) {
    if (shape.rank() == TensorShape::kMaxRank) break;
    shape.push_back(d.value >= 0 ? std::min(d.value, kMaxDim) : 2);
  }
  while (shape.numel() > kMaxElements)
    for (int i = 0; i < shape.rank(); ++i) shape[i] = std::max<int64_t>(1, shape[i] / 2);
  return shape;
}

Tensor random_input(DType dtype, const TensorShape& shape, std::mt19937_64& rng) {
  if (dtype == DType::Undefined || dtype == DType::String) dtype = DType::Float32;
  Tensor t = Tensor::empty(dtype, shape);
  std::uniform_real_distribution<double> real(-2, 2);
  std::uniform_int_distribution<int> small(0, 2);
  for (int64_t i = 0; i < t.numel(); ++i) {
    switch (dtype) {
      case DType::Float32: t.data<float>()[i] = static_cast<float>(real(rng)); break;
      case DType::Float64: t.data<double>()[i] = real(rng); break;
      case DType::Int64: t.data<int64_t>()[i] = small(rng); break;
      case DType::Int32: t.data<int32_t>()[i] = small(rng); break;
      case DType::Bool: t.data<bool>()[i] = small(rng) == 1; break;
      default: std::memset(static_cast<uint8_t*>(t.raw_data()), 0, t.nbytes()); i = t.numel(); break;
    }
  }
  return t;
}

std::vector<Tensor> random_feeds(const Graph& g, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Tensor> feeds;
  for (const auto& name : g.inputs) {
    if (g.is_initializer(name)) {
      feeds.push_back(g.initializers.at(name));
      continue;
    }
    const ValueInfo* vi = g.info(name);
    feeds.push_back(random_input(vi ? vi->dtype : DType::Float32, input_shape(vi), rng));
  }
  return feeds;
}

}  // namespace

std::string exercise_model(const std::string& bytes) {
  set_log_level(LogLevel::Error);
  set_tensor_byte_limit(kMaxTensorBytes);
  set_loop_iteration_limit(kMaxLoopIterations);
  Graph g;
  try {
    g = load_model(bytes);
  } catch (const std::exception& e) {
    return std::string("load: ") + e.what();
  }
  if (g.nodes.size() > kMaxNodes) return "skipped: too many nodes";
  std::string account = "loaded";
  try {
    InferenceSession session(g, false, 1);
    session.run(random_feeds(g, 1), 1);
    account += ", inference ran";
  } catch (const std::exception& e) {
    account += std::string(", inference: ") + e.what();
  }
  try {
    TrainingSessionOptions options;
    for (const auto& name : g.inputs) {
      const ValueInfo* vi = g.info(name);
      if (vi && is_floating(vi->dtype)) options.wrt.push_back(name);
    }
    for (const auto& name : g.initializer_order)
      if (is_floating(g.initializers.at(name).dtype()) &&
          std::find(options.wrt.begin(), options.wrt.end(), name) == options.wrt.end())
        options.wrt.push_back(name);
    if (options.wrt.empty()) return account + ", nothing to train";
    options.opt_level = 1;
    TrainingSession session(g, options);
    std::vector<Tensor> outputs;
    auto call = session.forward(random_feeds(g, 2), 2, outputs);
    std::vector<Tensor> grads;
    std::mt19937_64 rng(3);
    for (int pos : session.training_graph().differentiable_output_positions) {
      const Tensor& out = outputs.at(static_cast<size_t>(pos));
      grads.push_back(random_input(out.dtype(), out.shape(), rng));
    }
    session.backward(*call, grads);
    account += ", training ran";
  } catch (const std::exception& e) {
    account += std::string(", training: ") + e.what();
  }
  return account;
}

}  // namespace onnxtrain::fuzzing
