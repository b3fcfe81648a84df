#pragma once
// What the optimizer ops of ONNX's ai.onnx.preview.training domain (Adam, Adagrad, Momentum)
// share: inputs R (learning rate), T (update count), then blocks of n tensors each (X..., G...,
// and the op's state tensors), outputs in blocks of n again (X_new..., then the new states).
// Every tensor of an index i in the blocks must have X_i's shape and element type: the spec
// writes its pseudo code with broadcasting, but an update is shaped like the tensor it updates.
#include <string>
#include <vector>

#include "opdef/op_registry.h"
#include "ops/common/elementwise.h"
#include "ops/training/training_domain.h"

namespace onnxtrain {

// Checked once, when the program is built: the input and output counts fit the block layout.
// Returns n, the number of tensors the node updates.
// `layout` names the blocks for the error message ("X, G, V").
inline int64_t optimized_tensor_count(const Node& node, int input_blocks, int output_blocks, const char* layout) {
  const int64_t tensors = static_cast<int64_t>(node.inputs.size()) - 2;
  OT_CHECK(tensors > 0 && tensors % input_blocks == 0, node.describe(), " has ", node.inputs.size(),
           " inputs; it takes R, T and then ", input_blocks, " tensors per optimized tensor (",
           layout, "), in blocks");
  const int64_t n = tensors / input_blocks;
  OT_CHECK(static_cast<int64_t>(node.outputs.size()) <= n * output_blocks, node.describe(), " has ",
           node.outputs.size(), " outputs; with ", n, " optimized tensors it produces at most ", n * output_blocks);
  for (size_t i = 0; i < node.inputs.size(); ++i)
    OT_CHECK(!node.inputs[i].empty(), node.describe(), ": input ", i, " is omitted; every input is required");
  return n;
}

inline float required_float_attr(const Node& node, const char* key) {
  OT_CHECK(node.has_attr(key), node.describe(), " requires attribute '", key, "'");
  return node.attr_float(key, 0.0f);
}

// R: a float or double scalar (one element).
inline double learning_rate_input(const KernelContext& ctx, const char* op) {
  const Tensor& r = ctx.input(0);
  OT_CHECK(is_floating(r.dtype()) && r.numel() == 1, op, ": the learning rate R must be a float scalar, got ", r.str());
  return r.item_as_double(0);
}

// T: an int64 scalar.
inline int64_t update_count_input(const KernelContext& ctx, const char* op) {
  const Tensor& t = ctx.input(1);
  OT_CHECK(t.dtype() == DType::Int64 && t.numel() == 1, op, ": the update count T must be an int64 scalar, got ",
           t.str());
  return t.data<int64_t>()[0];
}

// The inputs of optimized tensor i, one per block, after checking they all match X_i.
inline std::vector<const Tensor*> block_inputs(const KernelContext& ctx, int64_t n, int blocks, int64_t i,
                                               const char* op, const char* const* names) {
  std::vector<const Tensor*> out;
  const Tensor& x = ctx.input(static_cast<int>(2 + i));
  OT_CHECK(x.dtype() == DType::Float32 || x.dtype() == DType::Float64, op, ": ", names[0], " #", i,
           " must be float or double, got ", x.str());
  for (int b = 0; b < blocks; ++b) {
    const Tensor& t = ctx.input(static_cast<int>(2 + b * n + i));
    OT_CHECK(t.dtype() == x.dtype() && t.shape() == x.shape(), op, ": ", names[b], " #", i, " is ", t.str(), " but ",
             names[0], " #", i, " is ", x.str(), "; they must match");
    out.push_back(&t);
  }
  return out;
}

// Output `block` of optimized tensor i, or nullptr when the graph does not ask for it.
template <typename T>
T* block_output(KernelContext& ctx, int64_t n, int block, int64_t i, const Tensor& like) {
  const int index = static_cast<int>(block * n + i);
  if (!ctx.output_needed(index)) return nullptr;
  return ctx.allocate_output(index, like.dtype(), like.shape()).data<T>();
}

}  // namespace onnxtrain
