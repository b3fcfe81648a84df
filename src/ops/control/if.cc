// If, in the closed form of onnx/subgraph_closure.h: inputs are the condition and then the outer
// values the branches read. Its gradient is another If on the same condition whose branches
// recompute their forward from those values and run its gradient: nothing of the branch taken
// is stashed, and either branch may be the one that ran.
#include "autodiff/grad_builder.h"
#include "autodiff/gradient_graph.h"
#include "opdef/op_registry.h"
#include "ops/control/subgraph.h"

namespace onnxtrain {
namespace {

class IfKernel : public Kernel {
 public:
  explicit IfKernel(const KernelInfo& info)
      : then_(info.node, "then_branch"), else_(info.node, "else_branch"), describe_(info.node.describe()) {}

  void compute(KernelContext& ctx) const override {
    const Tensor& cond = ctx.input(0);
    OT_CHECK(cond.numel() == 1, describe_, ": the condition must hold one element, got ", cond.str());
    const bool taken = cond.item_as_double() != 0;
    const CompiledBody& branch = taken ? then_ : else_;
    std::vector<Tensor> outputs = branch.run(inputs_from(ctx, 1), ctx);
    OT_CHECK(static_cast<int>(outputs.size()) == ctx.num_outputs(), describe_, ": its ",
             taken ? "then" : "else", " branch returned ", outputs.size(), " values for ", ctx.num_outputs(),
             " outputs");
    for (int i = 0; i < ctx.num_outputs(); ++i) write_output(ctx, i, outputs[static_cast<size_t>(i)]);
  }

 private:
  CompiledBody then_, else_;
  std::string describe_;
};

// Zeros shaped like body input `value`, appended to `body`; of `value`'s type through CastLike
// when `dtype` is unknown.
std::string zeros_like_in(Graph& body, const std::string& value, DType dtype) {
  Node shape;
  shape.op_type = "Shape";
  shape.inputs = {value};
  shape.outputs = {body.unique_name(value + "_shape")};
  const std::string shape_name = shape.outputs[0];
  body.value_info[shape_name].dtype = DType::Int64;
  body.add_node(std::move(shape));
  Node zeros;
  zeros.op_type = "ConstantOfShape";
  zeros.inputs = {shape_name};
  zeros.outputs = {body.unique_name(value + "_zero_grad")};
  zeros.attrs["value"] = Attribute::of_tensor(Tensor::zeros(dtype == DType::Undefined ? DType::Float32 : dtype, {1}));
  const std::string out = zeros.outputs[0];
  body.value_info[out].dtype = dtype;
  body.add_node(std::move(zeros));
  if (dtype != DType::Undefined) return out;
  Node cast;
  cast.op_type = "CastLike";
  cast.inputs = {out, value};
  cast.outputs = {body.unique_name(value + "_zero_grad_typed")};
  const std::string typed = cast.outputs[0];
  body.add_node(std::move(cast));
  return typed;
}

std::string identity_in(Graph& body, const std::string& value) {
  Node id;
  id.op_type = "Identity";
  id.inputs = {value};
  id.outputs = {body.unique_name(value + "_copy")};
  const std::string out = id.outputs[0];
  if (const ValueInfo* vi = body.info(value)) body.value_info[out] = *vi;
  body.add_node(std::move(id));
  return out;
}

// The backward body of one branch. Inputs: the branch's own inputs, then one gradient per
// entry of `grad_outputs` (branch output positions). Outputs: the gradient of each branch input
// listed in `wrt` (positions), zeros where this branch does not depend on it.
Graph backward_branch(const Graph& branch, const std::vector<int>& wrt, const std::vector<DType>& wrt_dtypes,
                      const std::vector<int>& grad_outputs, const std::vector<DType>& grad_dtypes) {
  GradientSpec spec;
  for (int p : wrt) spec.wrt.push_back(branch.inputs[static_cast<size_t>(p)]);
  for (int j : grad_outputs) spec.outputs_with_grad.push_back(branch.outputs[static_cast<size_t>(j)]);
  GradientGraph gg = build_gradient_graph(branch, spec);
  Graph body = std::move(gg.joint);
  body.inputs = branch.inputs;
  for (size_t k = 0; k < grad_outputs.size(); ++k) {
    std::string name;
    for (size_t d = 0; d < gg.differentiable_output_positions.size(); ++d)
      if (gg.differentiable_output_positions[d] == grad_outputs[k]) name = gg.output_grad_inputs[d];
    if (name.empty()) name = body.unique_name(branch.outputs[static_cast<size_t>(grad_outputs[k])] + "_unused_grad");
    if (grad_dtypes[k] != DType::Undefined) body.value_info[name].dtype = grad_dtypes[k];
    body.inputs.push_back(name);
  }
  body.outputs.clear();
  for (size_t k = 0; k < wrt.size(); ++k) {
    std::string grad = gg.wrt_grads[k];
    if (grad.empty()) {
      grad = zeros_like_in(body, branch.inputs[static_cast<size_t>(wrt[k])], wrt_dtypes[k]);
    } else if (body.is_input(grad) || std::find(body.outputs.begin(), body.outputs.end(), grad) != body.outputs.end()) {
      grad = identity_in(body, grad);  // a gradient passed straight through
    }
    body.outputs.push_back(grad);
  }
  return body;
}

DType declared_dtype(const GradBuilder& g, const std::string& value) {
  const ValueInfo* vi = g.info(value);
  return vi ? vi->dtype : DType::Undefined;
}

void if_gradient(GradBuilder& g) {
  const Node& n = g.node();
  for (const char* key : {"then_branch", "else_branch"})
    if (has_unrepeatable_ops(*n.attrs.at(key).g))
      throw UnsupportedError(str_cat(n.describe(), ": its ", key, " draws random numbers (Dropout, Bernoulli, ...) "
                                     "or runs a PyTorch autograd.Function; its gradient recomputes the branch, "
                                     "which could give other values"));
  std::vector<int> wrt;  // positions among the branch inputs (node input i + 1)
  std::vector<DType> wrt_dtypes;
  for (int i = 1; i < g.num_inputs(); ++i) {
    if (!g.needs_input_grad(i)) continue;
    wrt.push_back(i - 1);
    wrt_dtypes.push_back(declared_dtype(g, g.input(i)));  // may be unknown: see zeros_like_in
  }
  std::vector<std::string> inputs = {g.input(0)};
  for (int i = 1; i < g.num_inputs(); ++i) inputs.push_back(g.input(i));
  std::vector<int> grad_outputs;
  std::vector<DType> grad_dtypes;
  for (int j = 0; j < g.num_outputs(); ++j) {
    if (!g.has_output_grad(j)) continue;
    grad_outputs.push_back(j);
    DType dtype = declared_dtype(g, g.output(j));
    grad_dtypes.push_back(dtype != DType::Undefined ? dtype : declared_dtype(g, g.output_grad(j)));
    inputs.push_back(g.output_grad(j));
  }
  AttributeMap attrs;
  for (const char* key : {"then_branch", "else_branch"}) {
    Attribute a;
    a.kind = Attribute::Kind::Graph;
    a.g = std::make_shared<Graph>(
        backward_branch(*n.attrs.at(key).g, wrt, wrt_dtypes, grad_outputs, grad_dtypes));
    attrs[key] = a;
  }
  attrs["num_captured"] = Attribute::of_int(static_cast<int64_t>(inputs.size() - 1));
  std::vector<std::string> grads =
      g.op_multi("If", inputs, static_cast<int>(wrt.size()), attrs, kOnnxTrainDomain);
  for (size_t k = 0; k < wrt.size(); ++k) {
    if (wrt_dtypes[k] != DType::Undefined) g.set_dtype(grads[k], wrt_dtypes[k]);
    g.set_input_grad(wrt[k] + 1, grads[k]);
  }
}

}  // namespace

ONNXTRAIN_KERNEL(kOnnxTrainDomain, "If", kernel_factory<IfKernel>(), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_GRADIENT(kOnnxTrainDomain, "If", if_gradient);

}  // namespace onnxtrain
