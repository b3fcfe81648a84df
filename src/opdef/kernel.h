#pragma once
// What a kernel sees: its node (attributes, parsed once when the program is built) and, on each
// run, a KernelContext with the input tensors and an allocator for its outputs.
#include <functional>
#include <memory>

#include "ir/graph.h"

namespace onnxtrain {

class ThreadPool;
struct RunState;
struct CompiledNode;

struct KernelInfo {
  const Node& node;
  int opset;           // version of the node's domain in its graph
  const Graph& graph;  // declared dtypes and shapes, when a kernel wants them

  // Declared element type of input/output i, Undefined when unknown or omitted.
  DType input_dtype(size_t i) const;
  DType output_dtype(size_t i) const;
};

class KernelContext {
 public:
  KernelContext(RunState& state, const CompiledNode& node, int node_index)
      : state_(state), node_(node), node_index_(node_index) {}

  int num_inputs() const;
  bool has_input(int i) const;
  const Tensor& input(int i) const;  // throws naming the node when absent
  int num_outputs() const;
  // False for an optional output the graph does not use: kernels may skip computing it.
  bool output_needed(int i) const;

  // Memory for output i: planned arena space when a plan exists, else a fresh buffer.
  Tensor& allocate_output(int i, DType dtype, const TensorShape& shape);
  // Output i shares input j's memory under another shape (Reshape, Identity, ...).
  void alias_input(int out_index, int in_index, const TensorShape& shape);
  // Output i is `value` itself: for sequence and optional values (Tensor::list), which own their
  // tensors and take no arena memory.
  void set_list_output(int i, Tensor value);
  // Output i is `value`, a tensor owning its memory (its holder), taking no arena memory: for
  // tensors made outside the engine (a PyTorch Function's outputs), adopted without a copy.
  void adopt_output(int i, Tensor value);
  // Temporary memory valid until the kernel returns.
  void* scratch(size_t bytes);

  ThreadPool& threads() const;
  // A seed that differs per run and per node, derived from the seed the caller gave the run.
  uint64_t random_seed() const;

 private:
  RunState& state_;
  const CompiledNode& node_;
  int node_index_;
};

class Kernel {
 public:
  virtual ~Kernel() = default;
  // Const: one kernel object serves every concurrent run of its program.
  virtual void compute(KernelContext& ctx) const = 0;
};

using KernelFactory = std::function<std::unique_ptr<Kernel>(const KernelInfo&)>;

// A kernel with no attributes to parse: a plain function.
class FunctionKernel final : public Kernel {
 public:
  using Fn = void (*)(KernelContext&);
  explicit FunctionKernel(Fn fn) : fn_(fn) {}
  void compute(KernelContext& ctx) const override { fn_(ctx); }

 private:
  Fn fn_;
};

}  // namespace onnxtrain
