#include "session/training_session.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "onnx/model_io.h"
#include "passes/passes.h"
#include "passes/pipeline.h"
#include "runtime/thread_pool.h"
#include "session/graph_preparation.h"
#include "session/input_check.h"

namespace onnxtrain {
namespace {

// Floating-point MXCSR state for the duration of a run: denormals flush to zero (their
// arithmetic is 25x slower), and the caller's setting comes back afterwards.
class FlushDenormalScope {
 public:
  FlushDenormalScope() : saved_(enable_flush_denormal()) {}
  ~FlushDenormalScope() { restore_mxcsr(saved_); }

 private:
  unsigned saved_;
};

std::vector<int> ids_of(const Program& p, const std::vector<std::string>& names) {
  std::vector<int> ids;
  for (const auto& n : names) ids.push_back(n.empty() ? -1 : p.value_id(n));
  return ids;
}

void take_outputs(RunState& state, const std::vector<int>& ids, const std::vector<bool>& keep,
                  std::vector<Tensor>& out) {
  out.clear();
  for (int id : ids) {
    const Tensor& slot = state.values[static_cast<size_t>(id)];
    OT_CHECK(slot.defined(), "output '", state.program.value_name(id), "' was not computed");
    out.push_back(slot);
  }
  // Released after all are taken: one value may be returned twice.
  for (size_t i = 0; i < ids.size(); ++i)
    if (!keep[i]) state.values[static_cast<size_t>(ids[i])] = Tensor();
}

}  // namespace

bool recompute_cheap_activations(const std::string& memory_optimization) {
  std::string value = memory_optimization, source = "memory_optimization";
  if (value.empty()) {
    const char* env = std::getenv("ONNXTRAIN_MEMORY_OPTIMIZATION");
    value = env && *env ? env : "none";
    source = "ONNXTRAIN_MEMORY_OPTIMIZATION";
  }
  OT_CHECK(value == "none" || value == "recompute", source, " must be 'none' or 'recompute', got '", value, "'");
  return value == "recompute";
}

std::vector<StashReportEntry> ForwardCall::stash_report() const {
  std::vector<StashReportEntry> out;
  for (size_t i = 0; i < stash_ids_.size(); ++i) {
    const StashedValue& s = graph_->stashed[i];
    StashReportEntry e;
    e.name = s.value;
    e.kind = stash_kind_name(s.kind);
    // After backward the stash is freed: the entry then names the value only.
    const Tensor empty;
    const Tensor& t = run_ ? run_->state().values[static_cast<size_t>(stash_ids_[i])] : empty;
    if (t.defined()) {
      e.dtype = t.dtype();
      e.shape = t.shape();
      e.bytes = static_cast<int64_t>(t.nbytes());
    }
    out.push_back(e);
  }
  for (size_t i = 0; i < recomputed_.size(); ++i) {
    StashReportEntry e;
    e.name = graph_->recomputed[i].value;
    e.kind = stash_kind_name(StashedValue::Kind::Recomputed);
    e.dtype = recomputed_[i].first;
    e.shape = recomputed_[i].second;
    if (e.dtype != DType::Undefined) e.bytes = e.shape.numel() * static_cast<int64_t>(dtype_size(e.dtype));
    out.push_back(e);
  }
  return out;
}

int64_t ForwardCall::stashed_bytes(bool include_inputs) const {
  int64_t total = 0;
  for (const auto& e : stash_report())
    if ((include_inputs || e.kind != "input") && e.kind != "recomputed") total += e.bytes;
  return total;
}

int64_t ForwardCall::recomputed_bytes() const {
  int64_t total = 0;
  for (const auto& e : stash_report())
    if (e.kind == "recomputed") total += e.bytes;
  return total;
}

TrainingSession::TrainingSession(Graph forward_graph, TrainingSessionOptions options) {
  const bool recompute_cheap = recompute_cheap_activations(options.memory_optimization);
  prepare_graph(forward_graph, GraphUse::Training);
  GradientSpec spec;
  spec.wrt = options.wrt;
  spec.outputs_with_grad = options.outputs_with_grad;
  if (spec.outputs_with_grad.empty()) {
    for (const auto& out : forward_graph.outputs)
      if (forward_graph.may_be_floating(out)) spec.outputs_with_grad.push_back(out);
  }
  optimize_before_autodiff(forward_graph, options.opt_level);
  prepare_for_autodiff(forward_graph, options.opt_level);
  GradientGraph gradients = build_gradient_graph(forward_graph, spec);
  // Not an optimization: checkpointing and memory_optimization are the user's choice of memory
  // over time, so they hold at every level. Before the fusions, which then fuse the copies too.
  const std::vector<std::string> recomputed = recompute_activations(gradients.joint, recompute_cheap);
  optimize_after_autodiff(gradients.joint, options.opt_level);
  graph_ = std::make_shared<const TrainingGraph>(partition_training_graph(std::move(gradients), spec.wrt, recomputed));
  const TrainingGraph& tg = *graph_;
  runner_ = std::make_shared<PlannedRunner>(tg.graph, tg.forward_outputs, ThreadPool::global());
  runner_->options.check_finite = options.check_finite;
  const Program& p = runner_->program();
  forward_input_ids_ = ids_of(p, tg.forward_inputs);
  forward_output_ids_ = ids_of(p, tg.forward_outputs);
  grad_input_ids_ = ids_of(p, tg.output_grad_inputs);
  wrt_grad_ids_ = ids_of(p, tg.wrt_grads);
  for (const auto& s : tg.stashed) stash_.emplace_back(p.value_id(s.value), s.kind);
  std::vector<std::pair<int, size_t>> recomputed_ids;
  for (size_t i = 0; i < tg.recomputed.size(); ++i) recomputed_ids.emplace_back(p.value_id(tg.recomputed[i].value), i);
  std::sort(recomputed_ids.begin(), recomputed_ids.end());
  for (const auto& [id, i] : recomputed_ids) {
    recomputed_ids_.push_back(id);
    recomputed_at_.push_back(i);
  }
}

std::shared_ptr<ForwardCall> TrainingSession::forward(const std::vector<Tensor>& inputs, uint64_t seed,
                                                      std::vector<Tensor>& outputs,
                                                      std::shared_ptr<NodeObserver> observer) {
  const TrainingGraph& tg = *graph_;
  check_inputs(tg.graph, tg.forward_inputs, inputs);
  auto call = std::make_shared<ForwardCall>();
  call->graph_ = graph_;
  call->run_ = std::make_unique<Run>(runner_, shape_signature(inputs), seed);
  RunState& state = call->run_->state();
  state.observer = std::move(observer);
  for (size_t i = 0; i < inputs.size(); ++i) state.values[static_cast<size_t>(forward_input_ids_[i])] = inputs[i];
  if (!recomputed_ids_.empty()) {  // their shapes, for the report, as the forward releases them
    state.noted_ids = recomputed_ids_;
    state.noted.assign(recomputed_ids_.size(), {DType::Undefined, TensorShape()});
  }
  {
    FlushDenormalScope ftz;
    execute(state, 0, tg.yield_index, "forward");
  }
  if (!recomputed_ids_.empty()) {
    call->recomputed_.resize(recomputed_ids_.size());
    for (size_t j = 0; j < recomputed_ids_.size(); ++j) call->recomputed_[recomputed_at_[j]] = state.noted[j];
    state.noted_ids.clear();
  }
  std::vector<bool> keep(forward_output_ids_.size(), false);
  for (const auto& s : stash_)
    for (size_t i = 0; i < forward_output_ids_.size(); ++i)
      if (forward_output_ids_[i] == s.first) keep[i] = true;
  take_outputs(state, forward_output_ids_, keep, outputs);
  // Forward inputs not stashed are no longer needed: let the caller's memory go.
  std::vector<bool> stashed(state.values.size(), false);
  for (const auto& s : stash_) stashed[static_cast<size_t>(s.first)] = true;
  for (int id : forward_input_ids_)
    if (!stashed[static_cast<size_t>(id)]) state.values[static_cast<size_t>(id)] = Tensor();
  for (int pos : tg.differentiable_output_positions) {
    call->output_dtypes_.push_back(outputs[static_cast<size_t>(pos)].dtype());
    call->output_shapes_.push_back(outputs[static_cast<size_t>(pos)].shape());
  }
  for (const auto& s : stash_) call->stash_ids_.push_back(s.first);
  return call;
}

std::vector<Tensor> TrainingSession::backward(ForwardCall& call, const std::vector<Tensor>& output_grads) {
  OT_CHECK(call.graph_ == graph_, "this forward call belongs to another session");
  const TrainingGraph& tg = *graph_;
  OT_CHECK(!call.backward_done_, "backward was already run for this forward call; run forward again "
                                 "(like PyTorch, the saved state is freed by the first backward)");
  OT_CHECK(output_grads.size() == grad_input_ids_.size(), "backward takes ", grad_input_ids_.size(),
           " output gradients, got ", output_grads.size());
  call.backward_done_ = true;
  RunState& state = call.run_->state();
  for (size_t i = 0; i < output_grads.size(); ++i) {
    const Tensor& g = output_grads[i];
    const std::string& name = tg.differentiable_outputs[i];
    Tensor value = g.defined() ? g : Tensor::zeros(call.output_dtypes_[i], call.output_shapes_[i]);
    OT_CHECK(value.dtype() == call.output_dtypes_[i] && value.shape() == call.output_shapes_[i],
             "the gradient of output '", name, "' must be ", dtype_name(call.output_dtypes_[i]),
             call.output_shapes_[i].str(), " like the output, got ", value.str());
    state.values[static_cast<size_t>(grad_input_ids_[i])] = value;
  }
  {
    FlushDenormalScope ftz;
    execute(state, tg.yield_index, runner_->program().nodes().size(), "backward");
  }
  std::vector<Tensor> grads;
  for (int id : wrt_grad_ids_) grads.push_back(id < 0 ? Tensor() : state.values[static_cast<size_t>(id)]);
  call.run_->finish();
  call.run_.reset();  // frees the stash and returns the arena
  return grads;
}

void TrainingSession::save_graphs(const std::string& prefix) const {
  save_model_file(graph_->graph, prefix + "training.onnx");
  save_model_file(graph_->forward_graph(), prefix + "forward.onnx");
  save_model_file(graph_->backward_graph(), prefix + "backward.onnx");
}

InferenceSession::InferenceSession(Graph graph, bool check_finite, int opt_level) {
  prepare_graph(graph, GraphUse::Inference);
  optimize_before_autodiff(graph, opt_level);
  optimize_after_autodiff(graph, opt_level);
  runner_ = std::make_shared<PlannedRunner>(std::move(graph), std::vector<std::string>{}, ThreadPool::global());
  runner_->options.check_finite = check_finite;
  input_ids_ = ids_of(runner_->program(), runner_->program().graph().inputs);
  output_ids_ = ids_of(runner_->program(), runner_->program().graph().outputs);
}

std::vector<Tensor> InferenceSession::run(const std::vector<Tensor>& inputs, uint64_t seed,
                                          std::shared_ptr<NodeObserver> observer) {
  const Graph& g = runner_->program().graph();
  check_inputs(g, g.inputs, inputs);
  Run run(runner_, shape_signature(inputs), seed);
  RunState& state = run.state();
  state.observer = std::move(observer);
  for (size_t i = 0; i < inputs.size(); ++i) state.values[static_cast<size_t>(input_ids_[i])] = inputs[i];
  {
    FlushDenormalScope ftz;
    execute(state, 0, runner_->program().nodes().size(), "inference");
  }
  std::vector<Tensor> outputs;
  take_outputs(state, output_ids_, std::vector<bool>(output_ids_.size(), false), outputs);
  run.finish();
  return outputs;
}

}  // namespace onnxtrain
