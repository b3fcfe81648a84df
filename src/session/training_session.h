#pragma once
// Training on one graph: build the joint gradient graph, partition it at the yield point, and run
// forward and backward as two calls that share the state of one ForwardCall.
#include <memory>
#include <string>
#include <vector>

#include "passes/partition.h"
#include "runtime/planned_runner.h"

namespace onnxtrain {

struct TrainingSessionOptions {
  std::vector<std::string> wrt;                // inputs to differentiate (parameters, inputs)
  std::vector<std::string> outputs_with_grad;  // empty: every floating-point output
  bool check_finite = false;
  int opt_level = -1;  // graph optimizer level (passes/pipeline.h); -1: ONNXTRAIN_OPT_LEVEL, default 1
  // "none", or "recompute": backward recomputes cheap activations (elementwise ops, activation
  // functions, normalizations) instead of stashing them (passes/recompute.cc). Empty:
  // ONNXTRAIN_MEMORY_OPTIMIZATION, default "none". Checkpointed segments recompute either way.
  std::string memory_optimization;
};

// The memory_optimization option resolved against ONNXTRAIN_MEMORY_OPTIMIZATION; true for
// "recompute". Throws naming the option on any other value than "none" or "recompute".
bool recompute_cheap_activations(const std::string& memory_optimization);

struct StashReportEntry {
  std::string name;
  std::string kind;  // input, forward_output, activation; recomputed: not kept, backward recomputes it
  DType dtype = DType::Undefined;
  TensorShape shape;
  int64_t bytes = 0;
};

// The opaque handle of one forward call: everything backward needs, held in C++.
class ForwardCall {
 public:
  std::vector<StashReportEntry> stash_report() const;
  // Bytes the call keeps for backward; inputs are shared with the caller, so excluded by default.
  int64_t stashed_bytes(bool include_inputs = false) const;
  // Bytes the stash would hold on top of stashed_bytes() if backward did not recompute the
  // activations of kind "recomputed".
  int64_t recomputed_bytes() const;
  bool backward_done() const { return backward_done_; }

 private:
  friend class TrainingSession;
  std::shared_ptr<const TrainingGraph> graph_;  // shared: the call may outlive its session
  std::unique_ptr<Run> run_;
  std::vector<int> stash_ids_;
  std::vector<std::pair<DType, TensorShape>> recomputed_;  // parallel to graph_->recomputed
  std::vector<DType> output_dtypes_;
  std::vector<TensorShape> output_shapes_;  // of differentiable outputs, for zero gradients
  bool backward_done_ = false;
};

class TrainingSession {
 public:
  TrainingSession(Graph forward_graph, TrainingSessionOptions options);

  const TrainingGraph& training_graph() const { return *graph_; }
  const Program& program() const { return runner_->program(); }
  const PlannedRunner& runner() const { return *runner_; }

  // Runs the forward part. Outputs follow training_graph().forward_outputs. An `observer` sees
  // every node of this call, forward and then backward (the numerics audit).
  std::shared_ptr<ForwardCall> forward(const std::vector<Tensor>& inputs, uint64_t seed, std::vector<Tensor>& outputs,
                                       std::shared_ptr<NodeObserver> observer = nullptr);
  // Runs the backward part of `call`. Gradients follow training_graph().differentiable_outputs;
  // an undefined tensor stands for zeros. Returns gradients parallel to training_graph().wrt,
  // undefined where no gradient reaches.
  std::vector<Tensor> backward(ForwardCall& call, const std::vector<Tensor>& output_grads);

  // Writes <prefix>training.onnx, <prefix>forward.onnx and <prefix>backward.onnx.
  void save_graphs(const std::string& prefix) const;

 private:
  std::shared_ptr<const TrainingGraph> graph_;
  std::shared_ptr<PlannedRunner> runner_;
  std::vector<int> forward_input_ids_, forward_output_ids_, grad_input_ids_, wrt_grad_ids_;
  std::vector<std::pair<int, StashedValue::Kind>> stash_;
  std::vector<int> recomputed_ids_;    // of graph_->recomputed, sorted
  std::vector<size_t> recomputed_at_;  // parallel to recomputed_ids_: index into graph_->recomputed
};

class InferenceSession {
 public:
  explicit InferenceSession(Graph graph, bool check_finite = false, int opt_level = -1);
  const Program& program() const { return runner_->program(); }
  std::vector<Tensor> run(const std::vector<Tensor>& inputs, uint64_t seed,
                          std::shared_ptr<NodeObserver> observer = nullptr);

 private:
  std::shared_ptr<PlannedRunner> runner_;
  std::vector<int> input_ids_, output_ids_;
};

}  // namespace onnxtrain
