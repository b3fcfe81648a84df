#pragma once
// Splits a joint training graph at its yield point. Forward runs nodes [0, yield_index), keeps the
// stashed values, and backward resumes from them. The stash is an explicit list computed from
// the graph's edges: every value defined before the yield and read after it.
#include <string>
#include <vector>

#include "autodiff/gradient_graph.h"

namespace onnxtrain {

struct StashedValue {
  enum class Kind {
    Input,          // a forward graph input (parameter or user input), held zero-copy
    ForwardOutput,  // also returned to the caller; the caller must not modify it before backward
    Activation,     // an intermediate the caller never sees
    Recomputed,     // not kept: backward recomputes it (TrainingGraph::recomputed, for reports)
  };
  std::string value;
  Kind kind;
  ValueInfo info;
};

const char* stash_kind_name(StashedValue::Kind kind);

struct TrainingGraph {
  Graph graph;  // nodes ordered: forward part, then backward part
  size_t yield_index = 0;
  std::vector<std::string> forward_inputs;   // what the caller feeds the forward
  std::vector<std::string> forward_outputs;  // what the forward returns
  std::vector<std::string> differentiable_outputs;
  std::vector<int> differentiable_output_positions;  // index into forward_outputs
  std::vector<std::string> output_grad_inputs;       // parallel to differentiable_outputs
  std::vector<std::string> wrt;
  std::vector<std::string> wrt_grads;  // parallel to wrt; "" when no gradient reaches it
  std::vector<std::vector<int>> wrt_output_dependencies;  // parallel to wrt: see GradientGraph
  std::vector<StashedValue> stashed;
  // Forward values that backward recomputes instead of reading from the stash (passes/recompute.cc),
  // of kind Recomputed; those that later passes fused away are absent.
  std::vector<StashedValue> recomputed;

  Graph forward_graph() const;   // forward part alone: outputs plus stash
  Graph backward_graph() const;  // backward part alone: stash and output grads in, gradients out
};

// Orders the joint graph into forward and backward parts, removes nodes that nothing needs,
// and derives the stash. Shape and Size of forward values move into the forward part so that
// backward keeps a few int64 values instead of whole activations.
// `recomputed` names the forward values that backward recomputes (passes/recompute.cc).
TrainingGraph partition_training_graph(GradientGraph gradient_graph, const std::vector<std::string>& wrt,
                                       const std::vector<std::string>& recomputed = {});

}  // namespace onnxtrain
