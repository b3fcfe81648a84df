// BatchNormalization (ONNX opsets 7-15) and ai.onnxtrain::BatchNormTraining (PyTorch's training-mode
// batch norm, which the front end substitutes for torch's exported training BatchNormalization),
// with their gradient rules. The fused backward kernel BatchNormGrad is in batch_norm_grad.cc.
#include "ops/nn/batch_norm.h"

#include "autodiff/grad_builder.h"
#include "onnx/custom_schema.h"
#include "opdef/op_registry.h"
#include "ops/nn/norm_common.h"

namespace onnxtrain {
namespace {

using norm::ChannelLayout;

ChannelLayout bn_layout(const Tensor& x, bool spatial) {
  OT_CHECK(x.rank() >= 1, "X must have rank >= 1, got ", x.str());
  ChannelLayout l = norm::channel_layout(x.shape());
  if (!spatial) {  // opset 7 spatial=0: statistics per activation, i.e. per (C, D1, ..., Dn)
    l.c *= l.s;
    l.s = 1;
  }
  return l;
}

enum class Flavor { Onnx, TorchTraining };

class BatchNormKernel final : public Kernel {
 public:
  BatchNormKernel(const KernelInfo& info, Flavor flavor)
      : flavor_(flavor),
        epsilon_(info.node.attr_float("epsilon", 1e-5f)),
        momentum_(info.node.attr_float("momentum", 0.9f)) {
    if (flavor == Flavor::TorchTraining) {
      training_ = true;
      return;
    }
    if (info.opset < 7)
      throw UnsupportedError("BatchNormalization before opset 7 (with the is_test attribute) is not supported");
    training_ = batchnorm_trains(info.node, info.opset);
    if (info.opset < 9) spatial_ = info.node.attr_int("spatial", 1) != 0;
    if (info.opset >= 14 && !training_)
      for (size_t i = 1; i < info.node.outputs.size(); ++i)
        OT_CHECK(info.node.outputs[i].empty(), "running_mean and running_var outputs are only defined with training_mode=1");
  }

  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    norm::dispatch_storage(x.dtype(), "BatchNormalization", [&](auto tag) { run<typename decltype(tag)::type>(ctx); });
  }

 private:
  // X and Y stored as S; the parameters and statistics in their own type (X's, or float32 beside
  // a 16-bit X, as autocast keeps them), each output in its input's type.
  template <typename S>
  void run(KernelContext& ctx) const {
    using T = ComputeType<S>;
    const Tensor& x = ctx.input(0);
    const ChannelLayout l = bn_layout(x, spatial_);
    const int64_t C = l.c;
    const auto scratch = norm::channel_scratch<T, 6, 2>(ctx, C);
    double *scale = scratch.doubles[0], *bias = scratch.doubles[1], *in_mean = scratch.doubles[2],
           *in_var = scratch.doubles[3], *mean = scratch.doubles[4], *var = scratch.doubles[5];
    T *a = scratch.values[0], *d = scratch.values[1];
    const bool onnx = flavor_ == Flavor::Onnx;
    norm::read_channel_param_for(ctx.input(1), x.dtype(), C, "scale", scale);
    norm::read_channel_param_for(ctx.input(2), x.dtype(), C, "B", bias);
    norm::read_channel_param_for(ctx.input(3), x.dtype(), C, onnx ? "input_mean" : "running_mean", in_mean);
    norm::read_channel_param_for(ctx.input(4), x.dtype(), C, onnx ? "input_var" : "running_var", in_var);

    const int64_t count = l.per_channel();
    // An empty batch normalizes nothing and, as in PyTorch, leaves the running statistics alone.
    const bool empty = count == 0;
    if (training_ && empty) {
      std::fill(mean, mean + C, 0.0);
      std::fill(var, var + C, 0.0);
    } else if (training_) {
      // PyTorch refuses this too ("Expected more than 1 value per channel when training"): the
      // unbiased variance of its running statistics would divide by zero.
      if (flavor_ == Flavor::TorchTraining)
        OT_CHECK(count > 1, "X ", x.str(), " has ", count, " value(s) per channel; training needs more than 1");
      norm::channel_moments(ctx.threads(), x.data<S>(), l, mean, var);
    } else {
      std::copy(in_mean, in_mean + C, mean);
      std::copy(in_var, in_var + C, var);
    }
    for (int64_t c = 0; c < C; ++c) {
      const double inv_std = 1.0 / std::sqrt(var[c] + static_cast<double>(epsilon_));
      a[c] = static_cast<T>(scale[c] * inv_std);
      d[c] = static_cast<T>(bias[c] - mean[c] * scale[c] * inv_std);
    }
    Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
    norm::channel_affine<S>(ctx.threads(), l, x.data<S>(), nullptr, nullptr, a, nullptr, d, y.data<S>());
    if (!training_) return;

    // Running statistics: ONNX's convention, running * momentum + batch * (1 - momentum). ONNX
    // updates the variance with the batch (population) variance; PyTorch with the unbiased one.
    const double mom = empty ? 1.0 : momentum_;
    const double unbias =
        flavor_ == Flavor::TorchTraining && !empty ? static_cast<double>(count) / static_cast<double>(count - 1) : 1.0;
    auto write = [&](int i, auto value_of) {
      if (!ctx.output_needed(i)) return;
      const Tensor& like = ctx.input(i == 1 || i == 3 ? 3 : 4);
      norm::write_channel_values(ctx.allocate_output(i, like.dtype(), like.shape()), C, value_of);
    };
    write(1, [&](int64_t c) { return in_mean[c] * mom + mean[c] * (1 - mom); });
    write(2, [&](int64_t c) { return in_var[c] * mom + var[c] * unbias * (1 - mom); });
    if (flavor_ == Flavor::TorchTraining) {
      write(3, [&](int64_t c) { return mean[c]; });
      write(4, [&](int64_t c) { return 1.0 / std::sqrt(var[c] + static_cast<double>(epsilon_)); });
    } else {
      // Opsets 7-13: saved_mean and saved_var, the batch statistics.
      write(3, [&](int64_t c) { return mean[c]; });
      write(4, [&](int64_t c) { return var[c]; });
    }
  }

  Flavor flavor_;
  float epsilon_, momentum_;
  bool training_ = false;
  bool spatial_ = true;
};

void set_grads(GradBuilder& g, const std::vector<std::string>& grads) {
  for (int i = 0; i < static_cast<int>(grads.size()); ++i)
    if (g.needs_input_grad(i)) g.set_input_grad(i, grads[static_cast<size_t>(i)]);
}

bool has_output(const Node& n, size_t i) { return i < n.outputs.size() && !n.outputs[i].empty(); }

// Both flavors in training mode: dX, dscale, dB from BatchNormGrad; with the batch statistics
// when the forward kept them (saved_mean, saved_inv_std), else recomputed from X in backward.
// The running-statistics outputs carry no gradient: ONNX marks them non-differentiable and
// PyTorch updates its buffers outside autograd. So running mean/var inputs get zeros (they only
// feed those outputs).
void training_gradient(GradBuilder& g, bool use_saved) {
  const Node& n = g.node();
  AttributeMap attrs{{"epsilon", Attribute::of_float(n.attr_float("epsilon", 1e-5f))},
                     {"training_mode", Attribute::of_int(1)}};
  std::vector<std::string> inputs{g.output_grad(0), g.input(0), g.input(1)};
  if (use_saved) {
    inputs.push_back(g.output(3));
    inputs.push_back(g.output(4));
  }
  std::vector<std::string> d = g.op_multi("BatchNormGrad", inputs, 3, attrs, kOnnxTrainDomain);
  for (int i = 3; i < 5; ++i)
    if (g.needs_input_grad(i)) d.push_back(g.zeros_like(g.input(i)));
    else d.push_back("");
  set_grads(g, d);
}

void batch_norm_gradient(GradBuilder& g) {
  const Node& n = g.node();
  if (g.opset() < 9 && n.attr_int("spatial", 1) == 0)
    throw UnsupportedError("the gradient of BatchNormalization with spatial=0 is not implemented");
  if (batchnorm_trains(n, g.opset())) {
    training_gradient(g, false);
    return;
  }
  // Inference mode is an affine map per channel; it is differentiable in every input, mean and
  // variance included (fine-tuning with frozen statistics uses dscale and dB).
  AttributeMap attrs{{"epsilon", Attribute::of_float(n.attr_float("epsilon", 1e-5f))},
                     {"training_mode", Attribute::of_int(0)}};
  set_grads(g, g.op_multi("BatchNormGrad", {g.output_grad(0), g.input(0), g.input(1), g.input(3), g.input(4)}, 5,
                          attrs, kOnnxTrainDomain));
}

void batch_norm_training_gradient(GradBuilder& g) {
  const Node& n = g.node();
  training_gradient(g, has_output(n, 3) && has_output(n, 4));
}

}  // namespace

bool batchnorm_trains(const Node& node, int opset) {
  if (opset >= 14) return node.attr_int("training_mode", 0) != 0;
  for (size_t i = 1; i < node.outputs.size(); ++i)
    if (!node.outputs[i].empty()) return true;
  return false;
}

void use_pytorch_batchnorm(Graph& graph, Node& node) {
  node.domain = kOnnxTrainDomain;
  node.op_type = "BatchNormTraining";
  AttributeMap kept;  // training_mode and spatial have no meaning here: it always trains per channel
  for (const char* name : {"epsilon", "momentum"})
    if (node.has_attr(name)) kept[name] = node.attrs.at(name);
  node.attrs = std::move(kept);
  const std::string base = node.outputs[0];
  // The statistics it adds are of the running statistics' type: float32 beside autocast's 16-bit X.
  const ValueInfo* running = node.has_input(3) ? graph.info(node.inputs[3]) : nullptr;
  const ValueInfo* y = graph.info(base);
  const DType dtype = running ? running->dtype : y ? y->dtype : DType::Undefined;
  node.outputs.resize(3);
  const char* suffixes[] = {"", "_running_mean", "_running_var", "_saved_mean", "_saved_inv_std"};
  for (size_t i = 1; i < 5; ++i) {
    if (i < node.outputs.size() && !node.outputs[i].empty()) continue;
    const std::string name = graph.unique_name(base + suffixes[i]);
    graph.value_info[name].dtype = dtype;
    if (i < node.outputs.size()) node.outputs[i] = name;
    else node.outputs.push_back(name);
  }
  if (!graph.opsets.count(kOnnxTrainDomain)) graph.opsets[kOnnxTrainDomain] = 1;
}

ONNXTRAIN_KERNEL("", "BatchNormalization", [](const KernelInfo& info) -> std::unique_ptr<Kernel> {
  return std::make_unique<BatchNormKernel>(info, Flavor::Onnx);
}, Recompute::Costly, Rounding::PerValue);
// The front end writes BatchNormTraining into exported graphs: give shape inference its rule.
onnx::OpSchema batch_norm_training_schema() {
  onnx::OpSchema schema;
  schema.SetName("BatchNormTraining")
      .SetDomain(kOnnxTrainDomain)
      .SinceVersion(1)
      .SetDoc("Training-mode batch normalization with PyTorch's semantics (running_var from the unbiased "
              "variance); outputs Y, the new running statistics and the saved batch statistics.")
      .Attr("epsilon", "added to the variance", onnx::AttributeProto::FLOAT, 1e-5f)
      .Attr("momentum", "running = running * momentum + batch * (1 - momentum)", onnx::AttributeProto::FLOAT, 0.9f)
      .Input(0, "X", "N x C x ...", "T")
      .Input(1, "scale", "C", "U")
      .Input(2, "B", "C", "U")
      .Input(3, "input_mean", "C", "U", onnx::OpSchema::Single, true, 1, onnx::OpSchema::NonDifferentiable)
      .Input(4, "input_var", "C", "U", onnx::OpSchema::Single, true, 1, onnx::OpSchema::NonDifferentiable)
      .Output(0, "Y", "like X", "T")
      .Output(1, "running_mean", "C", "U", onnx::OpSchema::Optional, true, 1, onnx::OpSchema::NonDifferentiable)
      .Output(2, "running_var", "C", "U", onnx::OpSchema::Optional, true, 1, onnx::OpSchema::NonDifferentiable)
      .Output(3, "saved_mean", "C", "U", onnx::OpSchema::Optional, true, 1, onnx::OpSchema::NonDifferentiable)
      .Output(4, "saved_inv_std", "C", "U", onnx::OpSchema::Optional, true, 1, onnx::OpSchema::NonDifferentiable)
      .TypeConstraint("T", {"tensor(float)", "tensor(double)", "tensor(float16)", "tensor(bfloat16)"},
                      "X's type: the kernel reads and writes 16-bit X itself, computing in float32")
      .TypeConstraint("U", {"tensor(float)", "tensor(double)", "tensor(float16)", "tensor(bfloat16)"},
                      "the parameters' and statistics' type: X's, or float32 beside a 16-bit X (autocast)")
      .TypeAndShapeInferenceFunction([](onnx::InferenceContext& ctx) {
        onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0);
        onnx::propagateShapeFromInputToOutput(ctx, 0, 0);
        for (size_t o = 1; o < ctx.getNumOutputs(); ++o) {
          onnx::propagateElemTypeFromInputToOutput(ctx, 3, o);
          onnx::propagateShapeFromInputToOutput(ctx, 3, o);
        }
      });
  return schema;
}

ONNXTRAIN_SCHEMA(batch_norm_training_schema());
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "BatchNormTraining", [](const KernelInfo& info) -> std::unique_ptr<Kernel> {
  return std::make_unique<BatchNormKernel>(info, Flavor::TorchTraining);
}, Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_NATIVE_16BIT_FLOATS("", "BatchNormalization", kBothHalfFloats);
ONNXTRAIN_NATIVE_16BIT_FLOATS(kOnnxTrainDomain, "BatchNormTraining", kBothHalfFloats);
ONNXTRAIN_GRADIENT("", "BatchNormalization", batch_norm_gradient);
ONNXTRAIN_GRADIENT(kOnnxTrainDomain, "BatchNormTraining", batch_norm_training_gradient);

// The batch means, running and saved, are per-channel sums for the audit.
static AuditedOutput batch_norm_audited_output(const Node&, size_t index) {
  return index == 1 || index == 3 ? AuditedOutput::ChannelSums : AuditedOutput::Value;
}
ONNXTRAIN_AUDITED_OUTPUTS("", "BatchNormalization", batch_norm_audited_output);
ONNXTRAIN_AUDITED_OUTPUTS(kOnnxTrainDomain, "BatchNormTraining", batch_norm_audited_output);

}  // namespace onnxtrain
