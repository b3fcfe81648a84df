#include "autodiff/gradient_graph.h"

#include <algorithm>
#include <unordered_map>

#include "autodiff/grad_builder.h"
#include "onnx/op_schema.h"
#include "opdef/op_registry.h"

namespace onnxtrain {
namespace {

// Element type of a node's output when the rule does not say: most backward ops keep the type
// of their first typed input.
DType infer_output_dtype(const Graph& g, const std::string& op_type, const std::vector<std::string>& inputs,
                         const AttributeMap& attrs) {
  if (op_type == "Shape" || op_type == "Size") return DType::Int64;
  if (op_type == "Cast") return static_cast<DType>(attrs.at("to").i);
  if (op_type == "Equal" || op_type == "Less" || op_type == "Greater" || op_type == "Not" ||
      op_type == "And" || op_type == "Or" || op_type == "LessOrEqual" || op_type == "GreaterOrEqual")
    return DType::Bool;
  for (const auto& v : inputs) {
    const ValueInfo* vi = g.info(v);
    if (vi && is_floating(vi->dtype)) return vi->dtype;
  }
  for (const auto& v : inputs) {
    const ValueInfo* vi = g.info(v);
    if (vi && vi->dtype != DType::Undefined) return vi->dtype;
  }
  return DType::Undefined;
}

bool input_is_differentiable(const Graph& g, const Node& n, size_t i) {
  if (!n.has_input(i) || !g.may_be_floating(n.inputs[i])) return false;
  if (const OpRecord* record = OpRegistry::instance().find(n)) {
    if (record->not_differentiable) return false;
    if (record->zero_gradient) return true;
    const auto& extra = record->differentiable_inputs;
    if (std::find(extra.begin(), extra.end(), static_cast<int>(i)) != extra.end()) return true;
  }
  return input_differentiability(n.domain, n.op_type, g.opset(n.domain), static_cast<int>(i)) !=
         Differentiability::NonDifferentiable;
}

// For each of `wrt`, the indices of the outputs it reaches through differentiable edges of the
// forward nodes [0, num_forward).
std::vector<std::vector<int>> output_dependencies(const Graph& g, size_t num_forward,
                                                  const std::vector<std::vector<bool>>& needs_grad,
                                                  const std::vector<std::string>& wrt,
                                                  const std::vector<std::string>& outputs) {
  std::vector<std::vector<int>> deps(wrt.size());
  for (size_t o = 0; o < outputs.size(); ++o) {
    std::unordered_set<std::string> reaches{outputs[o]};
    for (size_t k = num_forward; k-- > 0;) {
      const Node& n = g.nodes[k];
      bool feeds = false;
      for (const auto& out : n.outputs) feeds = feeds || (!out.empty() && reaches.count(out));
      if (!feeds) continue;
      for (size_t i = 0; i < n.inputs.size(); ++i)
        if (needs_grad[k][i]) reaches.insert(n.inputs[i]);
    }
    for (size_t w = 0; w < wrt.size(); ++w)
      if (reaches.count(wrt[w])) deps[w].push_back(static_cast<int>(o));
  }
  return deps;
}

}  // namespace

std::vector<std::string> GradientGraphBuilder::emit(const std::string& op_type, const std::string& domain,
                                                    const std::vector<std::string>& inputs, int num_outputs,
                                                    const AttributeMap& attrs, const std::string& base,
                                                    const std::vector<bool>& produced) {
  std::string prefix = origin_ ? (origin_->name.empty() ? origin_->op_type : origin_->name) + "_grad/" : "grad/";
  Node n;
  n.op_type = op_type;
  n.domain = domain;
  n.inputs = inputs;
  n.attrs = attrs;
  n.in_backward = true;
  n.name = graph_.unique_name(prefix + base);
  DType dt = infer_output_dtype(graph_, op_type, inputs, attrs);
  for (int i = 0; i < num_outputs; ++i) {
    if (!produced.empty() && !produced[static_cast<size_t>(i)]) {
      n.outputs.emplace_back();
      continue;
    }
    std::string out = graph_.unique_name(n.name + (num_outputs > 1 ? "_out" + std::to_string(i) : "_out"));
    n.outputs.push_back(out);
    if (dt != DType::Undefined) graph_.info_mut(out).dtype = dt;
  }
  if (!domain.empty() && !graph_.opsets.count(domain)) graph_.opsets[domain] = 1;
  std::vector<std::string> outs = n.outputs;
  graph_.add_node(std::move(n));
  return outs;
}

std::string GradientGraphBuilder::add_constant(const std::string& base, Tensor value) {
  std::string name = graph_.unique_name(base);
  graph_.add_initializer(name, std::move(value));
  return name;
}

std::string GradientGraphBuilder::accumulate(const std::vector<std::string>& contributions, const std::string& base) {
  OT_CHECK(!contributions.empty(), "accumulate: no gradient contributions for '", base, "'");
  if (contributions.size() == 1) return contributions[0];
  set_origin(nullptr);
  std::string sum = emit("Sum", kOnnxDomain, contributions, 1, {}, base + "_accumulate")[0];
  if (const ValueInfo* vi = graph_.info(base)) graph_.info_mut(sum) = *vi;
  return sum;
}

namespace {
// A node of a refused op (OpRecord::gradient_refused) with an input that needs a gradient, whose outputs feed an
// output being differentiated through any edge: its gradient would silently be missing.
void refuse_gradients_that_would_end_silently(const Graph& g, size_t num_forward_nodes,
                                              const std::unordered_set<std::string>& requires_grad,
                                              const std::vector<std::string>& outputs_with_grad) {
  const auto& registry = OpRegistry::instance();
  std::vector<size_t> refused;
  for (size_t k = 0; k < num_forward_nodes; ++k) {
    bool any = false;
    for (const auto& in : g.nodes[k].inputs) any = any || (!in.empty() && requires_grad.count(in));
    const OpRecord* record = registry.find(g.nodes[k]);
    if (any && record && !record->gradient_refused.empty()) refused.push_back(k);
  }
  if (refused.empty()) return;
  std::unordered_set<std::string> feeds(outputs_with_grad.begin(), outputs_with_grad.end());
  for (size_t k = num_forward_nodes; k-- > 0;) {
    const Node& n = g.nodes[k];
    bool used = false;
    for (const auto& out : n.outputs) used = used || (!out.empty() && feeds.count(out));
    if (used)
      for (const auto& in : n.inputs) feeds.insert(in);
  }
  for (size_t k : refused) {
    const Node& n = g.nodes[k];
    for (const auto& out : n.outputs)
      if (!out.empty() && feeds.count(out))
        throw UnsupportedError(str_cat(n.describe(), ": ", registry.find(n)->gradient_refused));
  }
}
}  // namespace

GradientGraph build_gradient_graph(const Graph& forward, const GradientSpec& spec) {
  // Gradient rules emit opset-13+ forms (axes as inputs, not attributes).
  OT_CHECK(forward.opset() >= 13, "training needs a model at ONNX opset 13 or newer, this one is opset ",
           forward.opset(), "; export it with opset_version >= 13");
  GradientGraph result;
  result.joint = forward;
  Graph& g = result.joint;
  result.num_forward_nodes = g.nodes.size();
  const auto& registry = OpRegistry::instance();

  // Forward pass: which values depend on `wrt` through differentiable edges.
  std::unordered_set<std::string> requires_grad;
  for (const auto& v : spec.wrt) {
    OT_CHECK(g.is_input(v), "cannot differentiate with respect to '", v, "': it is not a graph input");
    if (g.may_be_floating(v)) requires_grad.insert(v);
  }
  std::vector<std::vector<bool>> needs_grad(g.nodes.size());
  for (size_t k = 0; k < result.num_forward_nodes; ++k) {
    const Node& n = g.nodes[k];
    needs_grad[k].assign(n.inputs.size(), false);
    bool any = false;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      if (requires_grad.count(n.inputs[i]) && input_is_differentiable(g, n, i)) needs_grad[k][i] = any = true;
    }
    const OpRecord* record = registry.find(n);
    if (record && record->records_requires_grad)
      g.nodes[k].attrs["input_requires_grad"] =
          Attribute::of_ints(std::vector<int64_t>(needs_grad[k].begin(), needs_grad[k].end()));
    if (!any) continue;
    const OutputDifferentiability differentiable = record ? record->output_differentiability : nullptr;
    for (size_t o = 0; o < n.outputs.size(); ++o) {
      const std::string& out = n.outputs[o];
      if (!out.empty() && g.may_be_floating(out) && (!differentiable || differentiable(n, o)))
        requires_grad.insert(out);
    }
  }

  refuse_gradients_that_would_end_silently(g, result.num_forward_nodes, requires_grad, spec.outputs_with_grad);

  // Gradient inputs for the outputs that carry gradient, by position: one value may be returned
  // twice, and each return gets its own incoming gradient.
  std::unordered_map<std::string, std::vector<std::string>> contributions;
  std::unordered_set<std::string> with_grad(spec.outputs_with_grad.begin(), spec.outputs_with_grad.end());
  for (const auto& out : spec.outputs_with_grad)
    OT_CHECK(std::find(g.outputs.begin(), g.outputs.end(), out) != g.outputs.end(),
             "'", out, "' is not a graph output, so no gradient can be fed into it");
  const std::vector<std::string> forward_outputs = g.outputs;
  for (size_t pos = 0; pos < forward_outputs.size(); ++pos) {
    const std::string& out = forward_outputs[pos];
    if (!with_grad.count(out) || !requires_grad.count(out)) continue;
    std::string grad_in = g.unique_name(out + "_grad");
    g.inputs.push_back(grad_in);
    if (const ValueInfo* vi = g.info(out)) g.info_mut(grad_in) = *vi;
    result.differentiable_outputs.push_back(out);
    result.differentiable_output_positions.push_back(static_cast<int>(pos));
    result.output_grad_inputs.push_back(grad_in);
    contributions[out].push_back(grad_in);
  }

  // Reverse walk over the forward nodes.
  GradientGraphBuilder builder(g);
  for (size_t k = result.num_forward_nodes; k-- > 0;) {
    // Copy: emitting backward nodes grows g.nodes and would invalidate a reference.
    const Node node = g.nodes[k];
    std::vector<std::string> output_grads(node.outputs.size());
    bool has_grad = false;
    for (size_t o = 0; o < node.outputs.size(); ++o) {
      auto it = contributions.find(node.outputs[o]);
      if (it == contributions.end() || node.outputs[o].empty()) continue;
      output_grads[o] = builder.accumulate(it->second, node.outputs[o]);
      has_grad = true;
    }
    bool needs_any = false;
    for (bool b : needs_grad[k]) needs_any = needs_any || b;
    if (!has_grad || !needs_any) continue;

    GradientRule rule = registry.gradient(node.domain, node.op_type);
    if (!rule) {
      std::string target;
      for (size_t i = 0; i < node.inputs.size(); ++i)
        if (needs_grad[k][i]) target = node.inputs[i];
      throw UnsupportedError(str_cat(node.describe(), " (opset ", g.opset(node.domain),
                                     ") has no gradient rule in onnxtrain; it is needed to differentiate "
                                     "through its input '", target, "'"));
    }
    GradBuilder gb(builder, node, output_grads, needs_grad[k]);
    builder.set_origin(&node);
    try {
      rule(gb);
    } catch (const UnsupportedError&) {
      throw;
    } catch (const Error& e) {
      OT_THROW("building the gradient of ", node.describe(), ": ", e.what());
    }
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      if (!needs_grad[k][i] || gb.has_no_input_grad(static_cast<int>(i))) continue;
      const std::string& grad = gb.input_grads()[i];
      OT_CHECK(!grad.empty(), "the gradient rule of ", node.describe(), " produced no gradient for input ", i,
               " ('", node.inputs[i], "')");
      if (const ValueInfo* vi = g.info(node.inputs[i])) {
        ValueInfo& gi = g.info_mut(grad);
        if (gi.dtype == DType::Undefined) gi.dtype = vi->dtype;
      }
      contributions[node.inputs[i]].push_back(grad);
    }
  }

  result.wrt_output_dependencies = output_dependencies(g, result.num_forward_nodes, needs_grad, spec.wrt,
                                                       result.differentiable_outputs);
  for (const auto& v : spec.wrt) {
    auto it = contributions.find(v);
    if (it == contributions.end()) {
      result.wrt_grads.push_back("");
      continue;
    }
    builder.set_origin(nullptr);
    std::string grad = builder.accumulate(it->second, v);
    if (const ValueInfo* vi = g.info(v)) g.info_mut(grad) = *vi;
    result.wrt_grads.push_back(grad);
    if (std::find(g.outputs.begin(), g.outputs.end(), grad) == g.outputs.end()) g.outputs.push_back(grad);
  }
  return result;
}

}  // namespace onnxtrain
