// Expansion of ONNX's Gradient op into the backward nodes of the piece of graph it names; see
// gradient_op.h for the semantics and the choices where the spec is silent.
#include "ops/training/gradient_op.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "autodiff/gradient_graph.h"
#include "core/half.h"
#include "onnx/shape_inference.h"
#include "ops/training/training_domain.h"

namespace onnxtrain {
namespace {

bool is_gradient_node(const Node& n) { return n.domain == kOnnxPreviewTrainingDomain && n.op_type == "Gradient"; }

bool has_gradient_node_inside(const Graph& g) {
  for (const Node& n : g.nodes) {
    if (is_gradient_node(n)) return true;
    for (const auto& kv : n.attrs)
      if (kv.second.kind == Attribute::Kind::Graph && kv.second.g && has_gradient_node_inside(*kv.second.g))
        return true;
  }
  return false;
}

// A one-element tensor of `dtype` holding `value`: the fill of ConstantOfShape.
Tensor filled_value(DType dtype, double value, const Node& gradient, const std::string& what) {
  Tensor t = Tensor::empty(dtype, {1});
  switch (dtype) {
    case DType::Float32: t.data<float>()[0] = static_cast<float>(value); break;
    case DType::Float64: t.data<double>()[0] = value; break;
    case DType::Float16: *static_cast<uint16_t*>(t.raw_data()) = double_to_half(value).bits; break;
    case DType::BFloat16: *static_cast<uint16_t*>(t.raw_data()) = double_to_bfloat16(value).bits; break;
    default:
      OT_THROW(gradient.describe(), ": ", what, " has element type ", dtype_name(dtype),
               "; Gradient differentiates floating tensors only");
  }
  return t;
}

// The attributes of one Gradient node, checked against the graph.
struct GradientRequest {
  std::vector<std::string> xs, zs;
  std::string y;
  std::vector<std::string> independent;  // xs then zs
};

GradientRequest read_request(const Graph& g, const Node& node) {
  GradientRequest r;
  auto xs = node.attrs.find("xs");
  OT_CHECK(xs != node.attrs.end() && xs->second.kind == Attribute::Kind::Strings && !xs->second.strings.empty(),
           node.describe(), " requires attribute 'xs', the names of the values to differentiate with respect to");
  r.xs = xs->second.strings;
  auto zs = node.attrs.find("zs");
  if (zs != node.attrs.end()) {
    OT_CHECK(zs->second.kind == Attribute::Kind::Strings, node.describe(), ": attribute 'zs' must be a list of names");
    r.zs = zs->second.strings;
  }
  OT_CHECK(node.has_attr("y"), node.describe(), " requires attribute 'y', the name of the value to differentiate");
  r.y = node.attr_string("y", "");
  r.independent = r.xs;
  r.independent.insert(r.independent.end(), r.zs.begin(), r.zs.end());
  OT_CHECK(node.inputs.size() == r.independent.size(), node.describe(), " has ", node.inputs.size(),
           " inputs; it takes one per name of xs and zs (", r.independent.size(), ")");
  OT_CHECK(node.outputs.size() <= r.xs.size(), node.describe(), " has ", node.outputs.size(),
           " outputs; it produces one gradient per name of xs (", r.xs.size(), ")");
  auto producers = g.producers();
  auto defined = [&](const std::string& v) {
    return !v.empty() && (g.is_input(v) || g.is_initializer(v) || producers.count(v));
  };
  std::unordered_set<std::string> seen;
  for (size_t i = 0; i < r.independent.size(); ++i) {
    const std::string& v = r.independent[i];
    const char* list = i < r.xs.size() ? "xs" : "zs";
    OT_CHECK(defined(v), node.describe(), ": '", v, "' (in ", list, ") is not a value of the graph");
    OT_CHECK(seen.insert(v).second, node.describe(), ": '", v, "' is named twice in xs and zs");
    OT_CHECK(!node.inputs[i].empty(), node.describe(), ": input ", i, " (the value of '", v, "') is omitted");
  }
  OT_CHECK(defined(r.y), node.describe(), ": y '", r.y, "' is not a value of the graph");
  for (size_t i = 0; i < r.xs.size(); ++i) {
    const ValueInfo* vi = g.info(node.inputs[i]);
    if (vi && vi->dtype != DType::Undefined && !is_floating(vi->dtype))
      OT_THROW(node.describe(), ": '", r.xs[i], "' (in xs) is ", dtype_name(vi->dtype),
               "; Gradient differentiates with respect to floating tensors only");
  }
  const ValueInfo* yi = g.info(r.y);
  OT_CHECK(!yi || yi->dtype == DType::Undefined || is_floating(yi->dtype), node.describe(), ": y '", r.y, "' is ",
           dtype_name(yi ? yi->dtype : DType::Undefined), "; only a floating value has a gradient");
  return r;
}

// Indices (in node order) of the nodes that compute y from the independent values: the walk
// back from y stops at them.
std::vector<size_t> piece_nodes(const Graph& g, const GradientRequest& r) {
  auto producers = g.producers();
  std::unordered_set<std::string> stop(r.independent.begin(), r.independent.end());
  std::vector<bool> in_piece(g.nodes.size(), false);
  std::vector<std::string> pending{r.y};
  std::unordered_set<std::string> visited;
  while (!pending.empty()) {
    std::string v = pending.back();
    pending.pop_back();
    if (v.empty() || stop.count(v) || !visited.insert(v).second) continue;
    auto it = producers.find(v);
    if (it == producers.end() || in_piece[it->second]) continue;
    in_piece[it->second] = true;
    for (const auto& in : g.nodes[it->second].inputs) pending.push_back(in);
  }
  std::vector<size_t> out;
  for (size_t k = 0; k < g.nodes.size(); ++k)
    if (in_piece[k]) out.push_back(k);
  return out;
}

class Expansion {
 public:
  Expansion(Graph& g, size_t index) : g_(g), node_(g.nodes[index]), index_(index) {}

  void run(const GradientRequest& r, const std::vector<size_t>& piece) {
    reuse_ = true;
    for (size_t i = 0; i < r.independent.size(); ++i) reuse_ = reuse_ && node_.inputs[i] == r.independent[i];
    Graph sub = piece_graph(r, piece);
    GradientSpec spec;
    spec.outputs_with_grad = {r.y};
    for (const auto& x : r.xs)
      if (sub.may_be_floating(x)) spec.wrt.push_back(x);
    GradientGraph gg;
    try {
      gg = build_gradient_graph(sub, spec);
    } catch (const UnsupportedError& e) {
      throw UnsupportedError(str_cat("expanding ", node_.describe(), " (the gradient of '", r.y, "'): ", e.what()));
    } catch (const Error& e) {
      OT_THROW("expanding ", node_.describe(), " (the gradient of '", r.y, "'): ", e.what());
    }
    splice(r, sub, gg, spec);
  }

 private:
  // The piece as a graph of its own: the independent values are its inputs (typed like the
  // Gradient node's inputs), y its output; the values it reads besides are inputs or
  // initializers, as in the whole graph.
  Graph piece_graph(const GradientRequest& r, const std::vector<size_t>& piece) {
    Graph sub;
    sub.name = g_.name + "/" + prefix();
    sub.opsets = g_.opsets;
    std::unordered_set<std::string> produced, independent(r.independent.begin(), r.independent.end());
    for (size_t k : piece) {
      sub.nodes.push_back(g_.nodes[k]);
      sub.nodes.back().in_backward = false;
      for (const auto& out : g_.nodes[k].outputs)
        if (!out.empty()) produced.insert(out);
    }
    for (size_t i = 0; i < r.independent.size(); ++i) {
      sub.inputs.push_back(r.independent[i]);
      if (const ValueInfo* vi = g_.info(node_.inputs[i])) sub.value_info[r.independent[i]] = *vi;
    }
    std::unordered_set<std::string> listed(sub.inputs.begin(), sub.inputs.end());
    for (const Node& n : sub.nodes)
      for (const auto& in : n.inputs) {
        if (in.empty() || produced.count(in) || !listed.insert(in).second) continue;
        if (g_.is_initializer(in)) {
          sub.add_initializer(in, g_.initializers.at(in));
        } else {
          sub.inputs.push_back(in);
          if (const ValueInfo* vi = g_.info(in)) sub.value_info[in] = *vi;
        }
      }
    if (!produced.count(r.y) && !listed.count(r.y)) {  // y is a constant of the graph
      if (g_.is_initializer(r.y)) sub.add_initializer(r.y, g_.initializers.at(r.y));
      else sub.inputs.push_back(r.y);
      if (const ValueInfo* vi = g_.info(r.y)) sub.value_info[r.y] = *vi;
    }
    sub.outputs = {r.y};
    if (reuse_) {
      for (const auto& v : produced)
        if (const ValueInfo* vi = g_.info(v)) sub.value_info[v] = *vi;
    } else {
      // Inputs of other shapes than the named values: the piece's shapes are inferred afresh.
      infer_shapes(sub);
    }
    return sub;
  }

  const std::string& mapped(const std::string& v) const {
    auto it = rename_.find(v);
    return it == rename_.end() ? v : it->second;
  }

  // Names of what the expansion adds start with the Gradient node's name.
  std::string prefix() const { return (node_.name.empty() ? std::string("Gradient") : node_.name) + "/"; }

  std::string fresh(const std::string& v) {
    std::string name = g_.unique_name(prefix() + v);
    rename_[v] = name;
    return name;
  }

  void add(Node n) {
    n.in_backward = false;
    n.name = g_.unique_name(prefix() + (n.name.empty() ? n.op_type : n.name));
    added_.push_back(std::move(n));
  }

  // Copies a node of the joint graph into the whole graph under fresh value names.
  void copy_node(const Node& src, const Graph& joint) {
    Node n = src;
    for (auto& in : n.inputs)
      if (!in.empty()) in = mapped(in);
    for (auto& out : n.outputs) {
      if (out.empty()) continue;
      const std::string old = out;
      out = fresh(old);
      if (const ValueInfo* vi = joint.info(old)) g_.value_info[out] = *vi;
    }
    add(std::move(n));
  }

  // ConstantOfShape(Shape(like)) filled with `value`, of `dtype`.
  std::string filled_like(const std::string& like, DType dtype, double value, const std::string& what) {
    Tensor fill = filled_value(dtype, value, node_, what);
    std::string shape = g_.unique_name(prefix() + what + "_shape");
    add(Node{"", "Shape", kOnnxDomain, {like}, {shape}, {}});
    g_.value_info[shape].dtype = DType::Int64;
    std::string out = g_.unique_name(prefix() + what);
    add(Node{"", "ConstantOfShape", kOnnxDomain, {shape}, {out}, {{"value", Attribute::of_tensor(fill)}}});
    ValueInfo& vi = g_.value_info[out];
    vi.dtype = dtype;
    if (const ValueInfo* li = g_.info(like)) vi.shape = li->shape;
    return out;
  }

  DType known_dtype(const std::string& value, const std::string& what) const {
    const ValueInfo* vi = g_.info(value);
    OT_CHECK(vi && vi->dtype != DType::Undefined, node_.describe(), ": the element type of ", what, " '", value,
             "' is unknown, so its gradient cannot be built");
    return vi->dtype;
  }

  void splice(const GradientRequest& r, const Graph& sub, const GradientGraph& gg, const GradientSpec& spec) {
    for (size_t i = 0; i < r.independent.size(); ++i)
      if (node_.inputs[i] != r.independent[i]) rename_[r.independent[i]] = node_.inputs[i];
    for (const auto& [domain, version] : gg.joint.opsets)
      if (!g_.opsets.count(domain)) g_.opsets[domain] = version;
    // Constants the gradient rules added.
    for (const auto& name : gg.joint.initializer_order) {
      if (sub.is_initializer(name)) continue;
      std::string fresh_name = fresh(name);
      g_.add_initializer(fresh_name, gg.joint.initializers.at(name));
    }
    for (size_t k = 0; k < gg.num_forward_nodes; ++k)
      if (!reuse_) copy_node(gg.joint.nodes[k], gg.joint);
    if (!gg.output_grad_inputs.empty()) {
      const std::string& y = mapped(r.y);
      rename_[gg.output_grad_inputs[0]] = filled_like(y, known_dtype(y, "y"), 1.0, "seed");
    }
    for (size_t k = gg.num_forward_nodes; k < gg.joint.nodes.size(); ++k) copy_node(gg.joint.nodes[k], gg.joint);
    for (size_t i = 0; i < node_.outputs.size(); ++i) {
      if (node_.outputs[i].empty()) continue;
      auto w = std::find(spec.wrt.begin(), spec.wrt.end(), r.xs[i]);
      std::string grad = w == spec.wrt.end() ? "" : gg.wrt_grads[static_cast<size_t>(w - spec.wrt.begin())];
      const std::string& x = node_.inputs[i];
      if (grad.empty()) grad = filled_like(x, known_dtype(x, "x"), 0.0, "zeros_" + std::to_string(i));
      else grad = mapped(grad);
      add(Node{"", "Identity", kOnnxDomain, {grad}, {node_.outputs[i]}, {}});
      if (const ValueInfo* vi = g_.info(x)) {
        ValueInfo& oi = g_.value_info[node_.outputs[i]];
        if (oi.dtype == DType::Undefined) oi.dtype = vi->dtype;
        if (!oi.shape) oi.shape = vi->shape;
      }
    }
    std::vector<Node> nodes;
    nodes.reserve(g_.nodes.size() + added_.size());
    for (size_t k = 0; k < g_.nodes.size(); ++k) {
      if (k != index_) {
        nodes.push_back(std::move(g_.nodes[k]));
        continue;
      }
      for (auto& n : added_) nodes.push_back(std::move(n));
    }
    g_.nodes = std::move(nodes);
    // The gradient may read forward values computed after the Gradient node's place.
    g_.sort_topologically();
  }

  Graph& g_;
  const Node node_;  // a copy: the node list is rebuilt
  size_t index_;
  bool reuse_ = true;
  std::unordered_map<std::string, std::string> rename_;
  std::vector<Node> added_;
};

}  // namespace

int expand_gradient_ops(Graph& graph) {
  bool any = false;
  for (const Node& n : graph.nodes) any = any || is_gradient_node(n);
  for (const Node& n : graph.nodes)
    for (const auto& kv : n.attrs)
      if (kv.second.kind == Attribute::Kind::Graph && kv.second.g && has_gradient_node_inside(*kv.second.g))
        throw UnsupportedError(str_cat(n.describe(), " has a Gradient node (", kOnnxPreviewTrainingDomain,
                                       ") in its body; Gradient is only expanded in the main graph"));
  if (!any) return 0;
  graph.sort_topologically();
  infer_shapes(graph);
  int expanded = 0;
  for (;;) {
    // A Gradient whose piece holds another Gradient differentiates through that one's expansion.
    bool found = false, pending = false;
    for (size_t k = 0; k < graph.nodes.size() && !found; ++k) {
      if (!is_gradient_node(graph.nodes[k])) continue;
      pending = true;
      const Node& node = graph.nodes[k];
      GradientRequest r = read_request(graph, node);
      std::vector<size_t> piece = piece_nodes(graph, r);
      bool waits = false;
      for (size_t p : piece) {
        OT_CHECK(p != k, node.describe(), ": y '", r.y, "' depends on this node's own outputs");
        waits = waits || is_gradient_node(graph.nodes[p]);
      }
      if (waits) continue;
      Expansion(graph, k).run(r, piece);
      found = true;
      ++expanded;
    }
    if (!pending) break;
    OT_CHECK(found, "the graph's Gradient nodes (", kOnnxPreviewTrainingDomain,
             ") each differentiate through another's outputs in a cycle");
  }
  infer_shapes(graph);
  return expanded;
}

}  // namespace onnxtrain
