#include "ops/python/python_op.h"

#include <algorithm>
#include <cstring>
#include <mutex>

#include "autodiff/grad_builder.h"
#include "onnx/custom_schema.h"
#include "opdef/op_registry.h"

namespace onnxtrain {
namespace {

std::mutex bridge_mutex;
std::shared_ptr<PythonOpBridge>& bridge_slot() {
  static std::shared_ptr<PythonOpBridge> bridge;
  return bridge;
}

std::shared_ptr<PythonOpBridge> current_bridge(const Node& node) {
  std::lock_guard<std::mutex> lock(bridge_mutex);
  std::shared_ptr<PythonOpBridge> bridge = bridge_slot();
  if (!bridge)
    throw UnsupportedError(str_cat(node.describe(), " runs the PyTorch autograd.Function ",
                                   node.attr_string("class_name", "?"),
                                   ", which needs onnxtrain's Python package loaded in this process"));
  return bridge;
}

std::vector<bool> flags(const std::vector<int64_t>& indices_or_mask, size_t n, bool is_mask) {
  std::vector<bool> out(n, false);
  for (size_t k = 0; k < indices_or_mask.size(); ++k) {
    if (is_mask) {
      if (k < n) out[k] = indices_or_mask[k] != 0;
    } else if (indices_or_mask[k] >= 0 && static_cast<size_t>(indices_or_mask[k]) < n) {
      out[static_cast<size_t>(indices_or_mask[k])] = true;
    }
  }
  return out;
}

bool overlaps(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined() || a.is_list() || b.is_list() || a.nbytes() == 0 || b.nbytes() == 0) return false;
  auto a0 = reinterpret_cast<uintptr_t>(a.raw_data()), b0 = reinterpret_cast<uintptr_t>(b.raw_data());
  return a0 < b0 + b.nbytes() && b0 < a0 + a.nbytes();
}

// Output i is `value` from Python: adopted without a copy, unless it shares memory with one of the
// node's inputs (a Function returning a view of its input), whose engine memory is reused later.
void set_python_output(KernelContext& ctx, int i, const Tensor& value) {
  for (int k = 0; k < ctx.num_inputs(); ++k) {
    if (ctx.has_input(k) && overlaps(value, ctx.input(k))) {
      ctx.allocate_output(i, value.dtype(), value.shape()).copy_from(value);
      return;
    }
  }
  ctx.adopt_output(i, value);
}

// The ctx of one forward call: an int64 scalar whose holder forgets the ctx when the value dies.
Tensor context_value(std::shared_ptr<PythonOpBridge> bridge, int64_t context) {
  struct Owner {
    Owner(std::shared_ptr<PythonOpBridge> b, int64_t c) : bridge(std::move(b)), context(c) {}
    Owner(const Owner&) = delete;
    Owner& operator=(const Owner&) = delete;
    ~Owner() { bridge->release(context); }
    std::shared_ptr<PythonOpBridge> bridge;
    int64_t context;
  };
  auto owner = std::make_shared<Owner>(std::move(bridge), context);
  return Tensor(DType::Int64, TensorShape{}, &owner->context, owner);
}

class PythonOpKernel final : public Kernel {
 public:
  explicit PythonOpKernel(const KernelInfo& info)
      : node_(&info.node), key_(info.node.attr_string("function_key", "")),
        num_outputs_(info.node.outputs.empty() ? 0 : info.node.outputs.size() - 1) {
    OT_CHECK(!key_.empty(), info.node.describe(), " has no function_key attribute");
    OT_CHECK(info.node.outputs.size() >= 2, info.node.describe(), " needs its outputs and a context output");
    for (int64_t t : info.node.attr_ints("output_dtypes")) output_dtypes_.push_back(dtype_from_onnx(static_cast<int32_t>(t)));
    OT_CHECK(output_dtypes_.empty() || output_dtypes_.size() == num_outputs_, info.node.describe(), " declares ",
             output_dtypes_.size(), " output types for ", num_outputs_, " outputs");
    const size_t n = info.node.inputs.size();
    requires_grad_ = flags(info.node.attr_ints("input_requires_grad"), n, true);
    dirty_ = flags(info.node.attr_ints("dirty_inputs"), n, false);
  }

  void compute(KernelContext& ctx) const override {
    std::shared_ptr<PythonOpBridge> bridge = current_bridge(*node_);
    std::vector<Tensor> inputs;
    for (int i = 0; i < ctx.num_inputs(); ++i) inputs.push_back(ctx.has_input(i) ? ctx.input(i) : Tensor());
    int64_t context = -1;
    std::vector<Tensor> outputs = bridge->forward(key_, inputs, requires_grad_, dirty_, &context);
    Tensor context_tensor = context_value(bridge, context);  // released on any error below
    OT_CHECK(outputs.size() == num_outputs_, "the Function returned ", outputs.size(), " tensors, ",
             num_outputs_, " when the model was exported");
    for (size_t o = 0; o < num_outputs_; ++o) {
      OT_CHECK(output_dtypes_.empty() || outputs[o].dtype() == output_dtypes_[o], "the Function's output ", o, " is ",
               dtype_name(outputs[o].dtype()), ", ", dtype_name(output_dtypes_[o]), " when the model was exported");
      set_python_output(ctx, static_cast<int>(o), outputs[o]);
    }
    ctx.adopt_output(static_cast<int>(num_outputs_), std::move(context_tensor));
  }


 private:
  const Node* node_;
  std::string key_;
  size_t num_outputs_;
  std::vector<DType> output_dtypes_;
  std::vector<bool> requires_grad_, dirty_;
};

class PythonOpGradKernel final : public Kernel {
 public:
  explicit PythonOpGradKernel(const KernelInfo& info)
      : node_(&info.node), num_output_grads_(static_cast<int>(info.node.attr_int("num_output_grads", -1))) {
    OT_CHECK(num_output_grads_ >= 0 && static_cast<size_t>(num_output_grads_) + 1 <= info.node.inputs.size(),
             info.node.describe(), " has a wrong num_output_grads attribute");
    OT_CHECK(info.node.inputs.size() - 1 - static_cast<size_t>(num_output_grads_) == info.node.outputs.size(),
             info.node.describe(), " must have one output per forward input");
    no_gradient_ = flags(info.node.attr_ints("no_gradient_inputs"), info.node.outputs.size(), false);
  }

  void compute(KernelContext& ctx) const override {
    std::shared_ptr<PythonOpBridge> bridge = current_bridge(*node_);
    const int64_t context = *ctx.input(0).data<int64_t>();
    std::vector<Tensor> grads;
    for (int o = 0; o < num_output_grads_; ++o) grads.push_back(ctx.has_input(1 + o) ? ctx.input(1 + o) : Tensor());
    std::vector<Tensor> input_grads = bridge->backward(context, grads);
    OT_CHECK(input_grads.size() == static_cast<size_t>(ctx.num_outputs()), "the Function's backward gave ",
             input_grads.size(), " gradients for ", ctx.num_outputs(), " inputs");
    for (int i = 0; i < ctx.num_outputs(); ++i) {
      OT_CHECK(!input_grads[static_cast<size_t>(i)].defined() || !no_gradient_[static_cast<size_t>(i)],
               "the Function's backward returned a gradient for input ", i,
               ", for which it returned None when the model was exported");
      if (!ctx.output_needed(i)) continue;
      const int forward_input = 1 + num_output_grads_ + i;
      const Tensor& x = ctx.input(forward_input);
      const Tensor& g = input_grads[static_cast<size_t>(i)];
      if (!g.defined()) {  // None: no gradient through this path, which is zeros to the sum
        Tensor& zeros = ctx.allocate_output(i, x.dtype(), x.shape());
        std::memset(zeros.raw_data(), 0, zeros.nbytes());
        continue;
      }
      OT_CHECK(g.dtype() == x.dtype() && g.shape() == x.shape(), "the Function's backward returned ", g.str(),
               " as the gradient of input ", i, ", which is ", x.str());
      set_python_output(ctx, i, g);
    }
  }

 private:
  const Node* node_;
  int num_output_grads_;
  std::vector<bool> no_gradient_;
};

bool python_op_output_differentiable(const Node& node, size_t index) {
  if (index + 1 >= node.outputs.size()) return false;  // the context
  for (int64_t o : node.attr_ints("non_differentiable_outputs"))
    if (o == static_cast<int64_t>(index)) return false;
  return true;
}

// The user's backward is the rule. It reads the context (which keeps ctx alive until then), the
// output gradients that exist, and every forward input, so that the views ctx may hold of them
// stay valid.
void python_op_gradient(GradBuilder& g) {
  OT_CHECK(g.num_outputs() >= 2 && g.node().has_attr("function_key"), g.node().describe(),
           " needs a function_key attribute, its outputs and a context output");
  const int num_outputs = g.num_outputs() - 1;
  std::vector<std::string> inputs{g.output(num_outputs)};
  for (int o = 0; o < num_outputs; ++o)
    inputs.push_back(python_op_output_differentiable(g.node(), static_cast<size_t>(o)) && g.has_output_grad(o)
                         ? g.output_grad(o)
                         : std::string());
  for (int i = 0; i < g.num_inputs(); ++i) inputs.push_back(g.input(i));
  AttributeMap attrs;
  attrs["function_key"] = g.node().attrs.at("function_key");
  attrs["class_name"] = Attribute::of_string(g.node().attr_string("class_name", "?"));
  attrs["num_output_grads"] = Attribute::of_int(num_outputs);
  if (g.node().has_attr("no_gradient_inputs")) attrs["no_gradient_inputs"] = g.node().attrs.at("no_gradient_inputs");
  // Only the gradients autodiff asks for, minus those the backward returns None for, are outputs.
  const std::vector<bool> none = flags(g.node().attr_ints("no_gradient_inputs"), static_cast<size_t>(g.num_inputs()), false);
  std::vector<bool> produced(static_cast<size_t>(g.num_inputs()));
  for (int i = 0; i < g.num_inputs(); ++i) produced[static_cast<size_t>(i)] = g.needs_input_grad(i) && !none[static_cast<size_t>(i)];
  std::vector<std::string> grads =
      g.op_multi("PythonOpGrad", inputs, g.num_inputs(), attrs, kOnnxTrainDomain, produced);
  for (int i = 0; i < g.num_inputs(); ++i) {
    if (!g.needs_input_grad(i)) continue;
    if (none[static_cast<size_t>(i)]) {
      g.set_no_input_grad(i);
      continue;
    }
    g.set_dtype(grads[static_cast<size_t>(i)], g.dtype_of(g.input(i)));
    g.set_input_grad(i, grads[static_cast<size_t>(i)]);
  }
}

void infer_python_op_types(onnx::InferenceContext& ctx) {
  const auto* dtypes = ctx.getAttribute("output_dtypes");
  const size_t n = ctx.getNumOutputs();
  for (size_t o = 0; o + 1 < n; ++o) {
    if (dtypes && static_cast<int>(o) < dtypes->ints_size())
      ctx.getOutputType(o)->mutable_tensor_type()->set_elem_type(static_cast<int32_t>(dtypes->ints(static_cast<int>(o))));
  }
  if (n > 0) {
    auto* context = ctx.getOutputType(n - 1)->mutable_tensor_type();
    context->set_elem_type(onnx::TensorProto::INT64);
    context->mutable_shape();
  }
}

void infer_python_op_grad_types(onnx::InferenceContext& ctx) {
  const auto* num_grads = ctx.getAttribute("num_output_grads");
  if (!num_grads) return;
  const size_t first = 1 + static_cast<size_t>(num_grads->i());
  for (size_t i = 0; i < ctx.getNumOutputs() && first + i < ctx.getNumInputs(); ++i) {
    if (!ctx.getInputType(first + i)) continue;
    onnx::propagateElemTypeFromInputToOutput(ctx, first + i, i);
    if (onnx::hasInputShape(ctx, first + i)) onnx::propagateShapeFromInputToOutput(ctx, first + i, i);
  }
}

onnx::OpSchema python_op_schema() {
  onnx::OpSchema schema;
  schema.SetName("PythonOp")
      .SetDomain(kOnnxTrainDomain)
      .SinceVersion(1)
      .SetDoc("A torch.autograd.Function: its forward, run by onnxtrain's Python package.")
      .Attr("function_key", "the Function application, registered by the Python package", onnx::AttributeProto::STRING)
      .Attr("class_name", "the Function's class, for messages", onnx::AttributeProto::STRING, std::string("?"))
      .Attr("output_dtypes", "ONNX element type of each output but the context", onnx::AttributeProto::INTS)
      .Attr("non_differentiable_outputs", "outputs marked non-differentiable", onnx::AttributeProto::INTS, false)
      .Attr("dirty_inputs", "inputs the Function modifies in place", onnx::AttributeProto::INTS, false)
      .Attr("input_requires_grad", "per input: ctx.needs_input_grad (autodiff)", onnx::AttributeProto::INTS, false)
      .Attr("no_gradient_inputs", "inputs the Function's backward returns None for", onnx::AttributeProto::INTS, false)
      .Input(0, "inputs", "the tensor arguments", "T", onnx::OpSchema::Variadic, false, 0, onnx::OpSchema::Differentiable)
      .Output(0, "outputs", "the Function's outputs, then its context", "T", onnx::OpSchema::Variadic, false, 1)
      .TypeConstraint("T", onnx::OpSchema::all_tensor_types(), "any tensor")
      .TypeAndShapeInferenceFunction(infer_python_op_types);
  return schema;
}

onnx::OpSchema python_op_grad_schema() {
  onnx::OpSchema schema;
  schema.SetName("PythonOpGrad")
      .SetDomain(kOnnxTrainDomain)
      .SinceVersion(1)
      .SetDoc("The backward of a torch.autograd.Function: its user-written backward.")
      .Attr("function_key", "the Function application", onnx::AttributeProto::STRING)
      .Attr("class_name", "the Function's class, for messages", onnx::AttributeProto::STRING, std::string("?"))
      .Attr("num_output_grads", "number of output-gradient inputs after the context", onnx::AttributeProto::INT)
      .Attr("no_gradient_inputs", "inputs the Function's backward returns None for", onnx::AttributeProto::INTS, false)
      .Input(0, "inputs", "context, output gradients, forward inputs", "T", onnx::OpSchema::Variadic, false, 1)
      .Output(0, "input_grads", "one per forward input", "T", onnx::OpSchema::Variadic, false, 0)
      .TypeConstraint("T", onnx::OpSchema::all_tensor_types(), "any tensor")
      .TypeAndShapeInferenceFunction(infer_python_op_grad_types);
  return schema;
}

}  // namespace

void install_python_op_bridge(std::shared_ptr<PythonOpBridge> bridge) {
  std::lock_guard<std::mutex> lock(bridge_mutex);
  bridge_slot() = std::move(bridge);
}

ONNXTRAIN_SCHEMA(python_op_schema());
ONNXTRAIN_SCHEMA(python_op_grad_schema());
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "PythonOp", kernel_factory<PythonOpKernel>(), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_RUNS_USER_CODE(kOnnxTrainDomain, "PythonOp");
ONNXTRAIN_NATIVE_16BIT_FLOATS(kOnnxTrainDomain, "PythonOp", kBothHalfFloats);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "PythonOpGrad", kernel_factory<PythonOpGradKernel>(),
                 Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_NATIVE_16BIT_FLOATS(kOnnxTrainDomain, "PythonOpGrad", kBothHalfFloats);
ONNXTRAIN_GRADIENT(kOnnxTrainDomain, "PythonOp", python_op_gradient);
ONNXTRAIN_OUTPUT_DIFFERENTIABILITY(kOnnxTrainDomain, "PythonOp", python_op_output_differentiable);
ONNXTRAIN_RECORDS_REQUIRES_GRAD(kOnnxTrainDomain, "PythonOp");

}  // namespace onnxtrain
