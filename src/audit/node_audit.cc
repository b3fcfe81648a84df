#include "audit/node_audit.h"

#include <algorithm>
#include <limits>

#include "audit/audit_compare.h"
#include "audit/batch_norm_terms.h"
#include "opdef/op_registry.h"
#include "runtime/program.h"
#include "runtime/thread_pool.h"

namespace onnxtrain::audit {
namespace {

ValueInfo declared_as_float64(const Graph& context, const std::string& value) {
  const ValueInfo* vi = context.info(value);
  ValueInfo out = vi ? *vi : ValueInfo{};
  if (is_floating(out.dtype)) out.dtype = DType::Float64;
  return out;
}

// `node` as the only node of a graph whose inputs are its inputs and whose outputs are its outputs.
Graph single_node_graph(const Node& node, const Graph& context) {
  Graph g;
  g.name = "float64 twin of " + node.describe();
  g.opsets = context.opsets;
  for (const auto& in : node.inputs) {
    if (in.empty() || std::find(g.inputs.begin(), g.inputs.end(), in) != g.inputs.end()) continue;
    g.inputs.push_back(in);
    g.value_info[in] = declared_as_float64(context, in);
  }
  for (const auto& out : node.outputs) {
    if (out.empty()) continue;
    g.outputs.push_back(out);
    g.value_info[out] = declared_as_float64(context, out);
  }
  g.nodes.push_back(node);
  return g;
}

// Why `node` cannot be recomputed alone, or "" when it can.
std::string why_no_twin(const Node& node) {
  for (const auto& kv : node.attrs)
    if (kv.second.kind == Attribute::Kind::Graph)
      return "has a subgraph (attribute '" + kv.first + "'): its body is not one node, so it has no single-node "
             "float64 twin";
  if (node.domain == kOnnxTrainDomain && (node.op_type == "PythonOp" || node.op_type == "PythonOpGrad"))
    return "runs user code (a PyTorch autograd.Function), which has no float64 twin";
  return "";
}

bool has_sum_of_terms_output(const Node& node, const std::vector<Tensor>& outputs) {
  for (size_t o = 0; o < outputs.size(); ++o)
    if (outputs[o].defined() && !outputs[o].is_list() &&
        error_scale_of(node, o, outputs[o].dtype()) == ErrorScale::SumOfTerms)
      return true;
  return false;
}

// Outputs whose absolute terms the absolute-input run does not give: their own formula.
void add_own_formula_terms(const Node& node, const std::vector<Tensor>& outputs, const std::vector<Tensor>& wide,
                           std::vector<Tensor>& terms) {
  for (size_t o = 0; o < outputs.size(); ++o) {
    if (!outputs[o].defined() || !has_batch_norm_terms(node, o)) continue;
    terms.resize(std::max(terms.size(), o + 1));
    terms[o] = batch_norm_terms(node, o, wide);
  }
}

// The axis an index output of a decision op indexes along (-1: MaxPool's flat indices).
int indexed_axis(const Node& node, const Tensor& x) {
  if (node.op_type == "MaxPool") return -1;
  int64_t axis = node.attr_int("axis", node.op_type == "TopK" ? -1 : 0);
  if (axis < 0) axis += x.rank();
  return static_cast<int>(axis);
}

struct OutputJudgement {
  double error = 0.0;
  std::string normalization;
};

OutputJudgement judge_output(const Node& node, size_t o, const Tensor& engine, const Tensor& twin, const Tensor& terms,
                             const std::vector<Tensor>& wide_inputs) {
  const ErrorScale scale = error_scale_of(node, o, engine.dtype());
  OutputJudgement j{0.0, error_scale_name(scale)};
  OT_CHECK(twin.defined(), "the float64 twin did not produce output '", node.outputs[o], "'");
  if (scale == ErrorScale::SelectedValue) {
    const Tensor& x = wide_inputs.at(0);
    j.error = output_error(scale, engine, twin, Tensor(), x, indexed_axis(node, x));
  } else {
    j.error = output_error(scale, engine, twin, terms);
  }
  return j;
}

// The float type an output's error is counted in: its own, or for an integer output (indices, a
// mask) the first float input's, whose values it selects or is computed from.
DType computed_in(DType output, const std::vector<Tensor>& inputs) {
  if (rounding_step(output) > 0) return output;
  for (const Tensor& t : inputs)
    if (t.defined() && !t.is_list() && rounding_step(t.dtype()) > 0) return t.dtype();
  return DType::Undefined;
}

void compare_outputs(NodeAudit& row, const Node& node, const std::vector<Tensor>& outputs,
                     const std::vector<Tensor>& twin, const std::vector<Tensor>& terms,
                     const std::vector<Tensor>& inputs, const std::vector<Tensor>& wide_inputs) {
  double worst = 0.0, worst_steps = 0.0;
  DType worst_type = DType::Undefined;
  for (size_t o = 0; o < outputs.size() && o < node.outputs.size(); ++o) {
    if (!outputs[o].defined() || node.outputs[o].empty()) continue;
    if (outputs[o].is_list()) {
      row.reason = "output '" + node.outputs[o] + "' is a sequence, not compared";
      continue;
    }
    const OutputJudgement j =
        judge_output(node, o, outputs[o], twin.at(o), o < terms.size() ? terms[o] : Tensor(), wide_inputs);
    const DType type = computed_in(outputs[o].dtype(), inputs);
    const double step = rounding_step(type);
    const double steps = step > 0 ? j.error / step : j.error;
    if (row.worst_output.empty() || steps > worst_steps) {
      worst = j.error;
      worst_steps = steps;
      worst_type = type;
      row.worst_output = node.outputs[o];
      row.normalization = j.normalization;
    }
  }
  row.rel_error = worst;
  if (rounding_step(worst_type) > 0) {
    row.rounding_steps = worst_steps;
    row.computed_in = dtype_name(worst_type);
  }
}

}  // namespace

std::vector<Tensor> run_node_alone(const Node& node, const Graph& context, const std::vector<Tensor>& inputs,
                                   uint64_t run_seed) {
  OT_CHECK(inputs.size() == node.inputs.size(), node.describe(), " takes ", node.inputs.size(), " inputs, got ",
           inputs.size());
  const Program program(single_node_graph(node, context));
  RunState state(program, run_seed, ThreadPool::global());  // no plan, no record: every value on the heap
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (node.inputs[i].empty()) continue;
    OT_CHECK(inputs[i].defined(), node.describe(), ": input '", node.inputs[i], "' has no value");
    state.values[static_cast<size_t>(program.value_id(node.inputs[i]))] = inputs[i];
  }
  execute(state, 0, 1, "audit");
  std::vector<Tensor> outputs;
  for (int id : program.nodes().front().outputs) outputs.push_back(state.values[static_cast<size_t>(id)]);
  return outputs;
}

NodeAudit audit_node(const Node& node, const Graph& context, const std::vector<Tensor>& inputs,
                     const std::vector<Tensor>& outputs, uint64_t run_seed) {
  NodeAudit row;
  row.node = node.name.empty() ? node.outputs.at(0) : node.name;
  row.op_type = node.op_type;
  row.domain = node.domain;
  for (const Tensor& t : outputs) row.output_shapes.push_back(t.defined() ? t.shape() : TensorShape());
  row.reason = why_no_twin(node);
  if (!row.reason.empty()) return row;
  std::vector<Tensor> wide;
  for (const Tensor& t : inputs) wide.push_back(widen_to_float64(t));
  std::vector<Tensor> twin, terms;
  try {
    twin = run_node_alone(node, context, wide, run_seed);
    if (has_sum_of_terms_output(node, outputs)) {
      std::vector<Tensor> magnitudes;
      for (const Tensor& t : wide) magnitudes.push_back(absolute(t));
      terms = run_node_alone(node, context, magnitudes, run_seed);
    }
    add_own_formula_terms(node, outputs, wide, terms);
  } catch (const std::exception& e) {
    row.reason = std::string("no float64 twin: ") + e.what();
    return row;
  }
  try {
    compare_outputs(row, node, outputs, twin, terms, inputs, wide);
  } catch (const std::exception& e) {  // the twin disagrees on shapes or outputs: a failure
    row.rel_error = std::numeric_limits<double>::infinity();
    row.reason = e.what();
  }
  if (is_random_op(node) && row.reason.empty())
    row.reason = "random: recomputed with the seed of the engine's run, so the same draws";
  return row;
}

void AuditObserver::node_ran(const RunState& state, size_t node_index) {
  const CompiledNode& cn = state.program.nodes()[node_index];
  auto gather = [&state](const std::vector<int>& ids) {
    std::vector<Tensor> out;
    for (int id : ids) out.push_back(id < 0 ? Tensor() : state.values[static_cast<size_t>(id)]);
    return out;
  };
  NodeAudit row = audit_node(*cn.node, state.program.graph(), gather(cn.inputs), gather(cn.outputs),
                             single_node_run_seed(state.seed, static_cast<int>(node_index)));
  row.phase = !phase_.empty() ? phase_ : cn.node->in_backward ? "backward" : "forward";
  rows_.push_back(std::move(row));
}

}  // namespace onnxtrain::audit
