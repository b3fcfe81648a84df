#pragma once
// The numerics audit (README, "Numerics audit"): every node of one run recomputed alone in float64,
// on the node's own inputs as the engine computed them, by the same registered kernels at T =
// double (dgemm, the im2col convolution, the scalar loops: not oneDNN, not the float32 SIMD
// paths), and its outputs measured against that twin (audit/audit_compare.h). Since each node is
// judged on its own inputs, no rounding decision upstream (a max-pool near-tie, a bias whose
// gradient is rounding noise) can move its error: a large error names the kernel that made it.
#include <optional>
#include <string>
#include <vector>

#include "runtime/executor.h"

namespace onnxtrain::audit {

struct NodeAudit {
  std::string node, op_type, domain;
  std::string phase;                // "forward", "backward", or the label the observer was given
  std::optional<double> rel_error;  // nullopt: the node has no float64 twin; `reason` says why
  std::string reason;               // why rel_error is missing, or a note on how it was judged
  std::string worst_output;         // the output with the largest error
  std::string normalization;        // how that output's error is scaled (error_scale_name)
  // rel_error in rounding steps of the type the worst output was computed in (its own dtype, or
  // for an integer output the node's first float input's): float32 and 16-bit nodes on one scale.
  // The worst output is the one with the most steps.
  std::optional<double> rounding_steps;
  std::string computed_in;          // that type's name
  std::vector<TensorShape> output_shapes;
};

// Runs `node` alone on `inputs` (parallel to node.inputs, undefined where one is omitted) through
// its registered kernel, with `context`'s declared types (floating ones declared float64) and
// opsets. `run_seed` seeds its random draws (single_node_run_seed reproduces a run's). Returns the
// outputs parallel to node.outputs. Throws naming the node when the kernel refuses the inputs.
std::vector<Tensor> run_node_alone(const Node& node, const Graph& context, const std::vector<Tensor>& inputs,
                                   uint64_t run_seed);

// Judges one node on the float32 (or any) `inputs` it read and the `outputs` it wrote.
NodeAudit audit_node(const Node& node, const Graph& context, const std::vector<Tensor>& inputs,
                     const std::vector<Tensor>& outputs, uint64_t run_seed);

// Audits every node a run executes, as it runs (the inputs and outputs are live then, so nothing is
// copied). `phase` labels the rows; empty: "forward" or "backward" after the node's in_backward.
class AuditObserver final : public NodeObserver {
 public:
  explicit AuditObserver(std::string phase = "") : phase_(std::move(phase)) {}
  void node_ran(const RunState& state, size_t node_index) override;
  const std::vector<NodeAudit>& rows() const { return rows_; }

 private:
  std::string phase_;
  std::vector<NodeAudit> rows_;
};

}  // namespace onnxtrain::audit
