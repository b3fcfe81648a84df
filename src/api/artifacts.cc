// generate_artifacts: from a forward inference model, the training, eval and optimizer models and
// the initial checkpoint (layout in api/internal.h), as ORT's on-device training has them.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <set>

#include "api/model.h"
#include "api/model_state.h"
#include "autodiff/gradient_graph.h"
#include "core/error.h"
#include "onnx/model_io.h"
#include "onnx/shape_inference.h"
#include "ops/training/training_domain.h"
#include "passes/passes.h"
#include "passes/pipeline.h"
#include "session/graph_preparation.h"

namespace onnxtrain {
namespace {

std::string few_names(const std::vector<std::string>& names) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < 5; ++i) s += (i ? ", '" : "'") + names[i] + "'";
  if (names.size() > 5) s += str_cat(" and ", names.size() - 5, " more");
  return names.empty() ? "none" : s;
}

void check_options(const ArtifactOptions& o) {
  auto finite = [](double v) { return std::isfinite(v); };
  OT_CHECK(finite(o.learning_rate) && o.learning_rate >= 0, "the learning rate must be >= 0, got ", o.learning_rate);
  OT_CHECK(finite(o.weight_decay) && o.weight_decay >= 0, "weight_decay must be >= 0, got ", o.weight_decay);
  OT_CHECK(finite(o.momentum) && o.momentum >= 0, "momentum must be >= 0, got ", o.momentum);
  OT_CHECK(finite(o.beta1) && o.beta1 >= 0 && o.beta1 < 1, "beta1 must be in [0, 1), got ", o.beta1);
  OT_CHECK(finite(o.beta2) && o.beta2 >= 0 && o.beta2 < 1, "beta2 must be in [0, 1), got ", o.beta2);
  OT_CHECK(finite(o.epsilon) && o.epsilon >= 0, "epsilon must be >= 0, got ", o.epsilon);
}

// Which parameters train: named ones, or all but the frozen ones; in the model's order.
std::vector<std::string> select_trainable(const Graph& g, const std::vector<std::string>& params,
                                          const std::vector<std::string>& state, const ArtifactOptions& o) {
  OT_CHECK(o.trainable.empty() || o.frozen.empty(),
           "name either the trainable parameters or the frozen ones, not both");
  const std::set<std::string> known(params.begin(), params.end());
  for (const auto* list : {&o.trainable, &o.frozen}) {
    for (const auto& name : *list) {
      if (known.count(name)) continue;
      if (std::count(state.begin(), state.end(), name))
        OT_THROW("'", name, "' is training state (BatchNorm statistics), which the training model updates itself; "
                 "it is not a parameter to train or freeze; parameters are ", few_names(params));
      if (g.is_initializer(name))
        OT_THROW("'", name, "' is an initializer of type ", dtype_name(g.initializers.at(name).dtype()),
                 ", not a floating-point parameter; parameters are ", few_names(params));
      OT_THROW("the model has no parameter '", name, "'; parameters are ", few_names(params));
    }
  }
  const std::vector<std::string> statistics = api::inference_statistics(g);
  std::vector<std::string> trainable;
  for (const auto& p : params) {
    const bool named = std::count(o.trainable.begin(), o.trainable.end(), p) > 0;
    const bool frozen = std::count(o.frozen.begin(), o.frozen.end(), p) > 0 ||
                        std::count(statistics.begin(), statistics.end(), p) > 0;
    if (o.trainable.empty() ? !frozen : named) trainable.push_back(p);
  }
  return trainable;
}

ValueInfo static_info(const Tensor& t) {
  ValueInfo vi;
  vi.dtype = t.dtype();
  std::vector<Dim> dims;
  for (int i = 0; i < t.rank(); ++i) dims.push_back({t.dim(i), ""});
  vi.shape = dims;
  return vi;
}

std::string add_node(Graph& g, const std::string& op, std::vector<std::string> inputs, AttributeMap attrs = {},
                     const std::string& domain = kOnnxDomain, const std::string& base = "") {
  Node n;
  n.op_type = op;
  n.domain = domain;
  n.name = g.unique_name((base.empty() ? op : base) + "_node");
  n.inputs = std::move(inputs);
  n.outputs = {g.unique_name(base.empty() ? op : base)};
  n.attrs = std::move(attrs);
  const std::string out = n.outputs[0];
  g.add_node(std::move(n));
  return out;
}

template <typename T>
std::string constant(Graph& g, const std::string& base, T value) {
  const std::string name = g.unique_name(base);
  g.add_initializer(name, Tensor::scalar<T>(value));
  return name;
}

// The loss nodes after the model's first output; returns the loss and sets `target` (the name of
// the extra input, "" for Loss::None).
std::string append_loss(Graph& g, Loss loss, std::string& target) {
  const std::string& output = g.outputs[0];
  const ValueInfo* out_info = g.info(output);
  target.clear();
  if (loss == Loss::None) {
    OT_CHECK(!out_info || out_info->dtype == DType::Undefined || is_floating(out_info->dtype), "loss 'none': the model's first output '",
             output, "' must be a floating-point scalar loss, it is ", dtype_name(out_info ? out_info->dtype : DType::Undefined));
    if (out_info && out_info->shape)
      for (const Dim& d : *out_info->shape)
        OT_CHECK(d.is_static() && d.value == 1, "loss 'none': the model's first output '", output,
                 "' must be a scalar loss, its shape has ", out_info->shape->size(), " dimensions");
    return output;
  }
  if (loss == Loss::CrossEntropy) {
    OT_CHECK(!out_info || !out_info->shape || out_info->shape->size() >= 2, "loss cross_entropy: the model's output '",
             output, "' must be logits [N, C], it has ", out_info && out_info->shape ? out_info->shape->size() : 0,
             " dimensions");
    target = g.unique_name("labels");
    ValueInfo& ti = g.info_mut(target);
    ti.dtype = DType::Int64;
    if (out_info && out_info->shape) ti.shape = std::vector<Dim>{(*out_info->shape)[0]};
    return add_node(g, "SoftmaxCrossEntropyLoss", {output, target}, {{"reduction", Attribute::of_string("mean")}},
                    kOnnxDomain, "loss");
  }
  target = g.unique_name("target");
  g.info_mut(target) = out_info ? *out_info : ValueInfo{DType::Float32, std::nullopt};
  const std::string diff = add_node(g, "Sub", {output, target}, {}, kOnnxDomain, "mse_diff");
  const std::string square = add_node(g, "Mul", {diff, diff}, {}, kOnnxDomain, "mse_square");
  return add_node(g, "ReduceMean", {square}, {{"keepdims", Attribute::of_int(0)}}, kOnnxDomain, "loss");
}

// The training model: forward, loss, the gradients of `trainable` (those the loss reaches stay in
// it; the others move to `frozen`, as torch leaves their .grad None and the optimizer skips them)
// and the next value of each state tensor.
Graph training_graph(const Graph& with_loss, const std::string& loss, const std::vector<api::BatchNormState>& state,
                     std::vector<std::string>& trainable, std::vector<std::string>& frozen) {
  Graph g = with_loss;
  const std::vector<std::string> next_state = api::update_state_as_pytorch(g, state);
  g.outputs = {loss};
  g.outputs.insert(g.outputs.end(), next_state.begin(), next_state.end());  // kept alive through autodiff
  prepare_for_autodiff(g, -1);
  GradientSpec spec;
  spec.wrt = trainable;
  spec.outputs_with_grad = {loss};
  GradientGraph gg = build_gradient_graph(g, spec);
  OT_CHECK(gg.output_grad_inputs.size() == 1, "the loss '", loss, "' depends on none of the trainable parameters ",
           few_names(trainable));
  Graph& joint = gg.joint;
  // The loss's incoming gradient is the constant 1: d loss / d loss.
  const std::string seed = gg.output_grad_inputs[0];
  joint.inputs.erase(std::find(joint.inputs.begin(), joint.inputs.end(), seed));
  const ValueInfo* loss_info = joint.info(loss);
  std::vector<int64_t> loss_dims;
  if (loss_info && loss_info->shape)
    for (const Dim& d : *loss_info->shape) loss_dims.push_back(d.value);
  const DType loss_dtype = loss_info && loss_info->dtype != DType::Undefined ? loss_info->dtype : DType::Float32;
  Tensor seed_value = Tensor::empty(loss_dtype, TensorShape(loss_dims));  // one element: the loss is a scalar
  if (loss_dtype == DType::Float32) *seed_value.data<float>() = 1.0f;
  else if (loss_dtype == DType::Float64) *seed_value.data<double>() = 1.0;
  else OT_THROW("the loss '", loss, "' is ", dtype_name(loss_dtype), "; training needs a float32 or float64 loss");
  joint.add_initializer(seed, seed_value);

  joint.outputs = {loss};
  std::vector<std::string> kept;
  for (size_t i = 0; i < trainable.size(); ++i) {
    if (gg.wrt_grads[i].empty()) {
      frozen.push_back(trainable[i]);
      continue;
    }
    kept.push_back(trainable[i]);
    const std::string grad = add_node(joint, "Identity", {gg.wrt_grads[i]}, {}, kOnnxDomain, trainable[i] + "_grad");
    joint.info_mut(grad) = *with_loss.info(trainable[i]);  // onnx.checker wants every output's shape
    joint.outputs.push_back(grad);
  }
  OT_CHECK(!kept.empty(), "the loss '", loss, "' depends on none of the trainable parameters ", few_names(trainable));
  trainable = kept;
  const std::vector<std::string> names = api::state_names(state);
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string next = add_node(joint, "Identity", {next_state[i]}, {}, kOnnxDomain, names[i] + "_next");
    joint.info_mut(next) = *with_loss.info(names[i]);
    joint.outputs.push_back(next);
  }
  eliminate_dead_nodes(joint);
  return joint;
}

// Names of the optimizer model's inputs and outputs for one parameter.
struct OptimizerValues {
  std::string param, grad, param_out;
  std::vector<std::string> states, states_out;
};

// SGD as torch.optim.SGD(lr, momentum, dampening=0, weight_decay): d = g + wd * p;
// buf = momentum * buf + d (buf = d at the first step, which a zero buffer gives exactly);
// p = p - lr * buf. That is ONNX's Momentum with alpha = momentum, beta = 1 (so the first-step
// special case changes nothing), norm_coefficient = weight_decay, mode "standard".
void sgd_nodes(Graph& g, const std::string& lr, const std::string& step, std::vector<OptimizerValues>& v,
               const ArtifactOptions& o) {
  const std::string lr_f = add_node(g, "Cast", {lr}, {{"to", Attribute::of_int(1)}}, kOnnxDomain, "lr_float");
  g.opsets[kOnnxPreviewTrainingDomain] = 1;
  Node n;
  n.op_type = "Momentum";
  n.domain = kOnnxPreviewTrainingDomain;
  n.name = "sgd_momentum";
  n.inputs = {lr_f, step};
  for (const auto& p : v) n.inputs.push_back(p.param);
  for (const auto& p : v) n.inputs.push_back(p.grad);
  for (const auto& p : v) n.inputs.push_back(p.states[0]);
  for (const auto& p : v) n.outputs.push_back(p.param_out);
  for (const auto& p : v) n.outputs.push_back(p.states_out[0]);
  n.attrs = {{"alpha", Attribute::of_float(static_cast<float>(o.momentum))},
             {"beta", Attribute::of_float(1.0f)},
             {"mode", Attribute::of_string("standard")},
             {"norm_coefficient", Attribute::of_float(static_cast<float>(o.weight_decay))}};
  g.add_node(std::move(n));
}

// AdamW as torch.optim.AdamW (torch 1.13, _single_tensor_adamw), operation by operation, with the
// step's scalars computed in float64 as Python computes them and rounded to float32 where torch
// rounds them:
//   p = p * (1 - lr * wd);  m = m * b1 + (1 - b1) * g;  v = v * b2 + (1 - b2) * (g * g)
//   denom = sqrt(v) / sqrt(1 - b2^t) + eps;  p = p + (-lr / (1 - b1^t)) * m / denom
// (the last as torch's addcdiv kernel evaluates it: value * t1 / t2, left to right).
// ONNX's preview Adam does not fit: it adds epsilon before the bias correction of the second
// moment, and its weight decay is an L2 term in the gradient rather than torch's decoupled decay.
// Standard ops keep the model runnable by any ONNX runtime.
void adamw_nodes(Graph& g, const std::string& lr, const std::string& step, std::vector<OptimizerValues>& v,
                 const ArtifactOptions& o) {
  const AttributeMap to_double{{"to", Attribute::of_int(11)}}, to_float{{"to", Attribute::of_int(1)}};
  const std::string one = constant(g, "one", 1.0);
  const std::string t = add_node(g, "Add", {add_node(g, "Cast", {step}, to_double), one}, {}, kOnnxDomain, "adamw_t");
  const std::string bc1 = add_node(g, "Sub", {one, add_node(g, "Pow", {constant(g, "beta1", o.beta1), t})}, {},
                                   kOnnxDomain, "bias_correction1");
  const std::string bc2 = add_node(g, "Sub", {one, add_node(g, "Pow", {constant(g, "beta2", o.beta2), t})}, {},
                                   kOnnxDomain, "bias_correction2");
  const std::string neg_step_size = add_node(
      g, "Cast", {add_node(g, "Neg", {add_node(g, "Div", {lr, bc1})})}, to_float, kOnnxDomain, "neg_step_size");
  const std::string bc2_sqrt = add_node(g, "Cast", {add_node(g, "Sqrt", {bc2})}, to_float, kOnnxDomain, "bc2_sqrt");
  const std::string decay = add_node(
      g, "Cast", {add_node(g, "Sub", {one, add_node(g, "Mul", {lr, constant(g, "weight_decay", o.weight_decay)})})},
      to_float, kOnnxDomain, "decay");
  const std::string b1 = constant(g, "beta1_f", static_cast<float>(o.beta1));
  const std::string b2 = constant(g, "beta2_f", static_cast<float>(o.beta2));
  const std::string one_minus_b1 = constant(g, "one_minus_beta1", static_cast<float>(1.0 - o.beta1));
  const std::string one_minus_b2 = constant(g, "one_minus_beta2", static_cast<float>(1.0 - o.beta2));
  const std::string eps = constant(g, "epsilon", static_cast<float>(o.epsilon));
  for (auto& p : v) {
    const std::string decayed = add_node(g, "Mul", {p.param, decay}, {}, kOnnxDomain, "adamw_decayed");
    const std::string m = add_node(g, "Add", {add_node(g, "Mul", {p.states[0], b1}), add_node(g, "Mul", {one_minus_b1, p.grad})});
    const std::string sq = add_node(g, "Mul", {p.grad, p.grad});
    const std::string s = add_node(g, "Add", {add_node(g, "Mul", {p.states[1], b2}), add_node(g, "Mul", {one_minus_b2, sq})});
    g.add_node({g.unique_name("adamw_exp_avg"), "Identity", "", {m}, {p.states_out[0]}, {}});
    g.add_node({g.unique_name("adamw_exp_avg_sq"), "Identity", "", {s}, {p.states_out[1]}, {}});
    const std::string denom = add_node(g, "Add", {add_node(g, "Div", {add_node(g, "Sqrt", {s}), bc2_sqrt}), eps});
    const std::string update = add_node(g, "Div", {add_node(g, "Mul", {neg_step_size, m}), denom});
    g.add_node({g.unique_name("adamw_update"), "Add", "", {decayed, update}, {p.param_out}, {}});
  }
}

Graph optimizer_graph(const Graph& params_source, const std::vector<std::string>& trainable, const ArtifactOptions& o) {
  Graph g;
  g.name = "optimizer";
  g.opsets = {{kOnnxDomain, 17}};
  const std::string lr = "learning_rate", step = "step";
  g.inputs = {lr, step};
  g.info_mut(lr) = {DType::Float64, std::vector<Dim>{}};
  g.info_mut(step) = {DType::Int64, std::vector<Dim>{}};
  const std::vector<std::string> state_names = api::optimizer_state_names(o.optimizer);
  std::vector<OptimizerValues> values(trainable.size());
  for (size_t i = 0; i < trainable.size(); ++i) {
    const Tensor& t = params_source.initializers.at(trainable[i]);
    OT_CHECK(t.dtype() == DType::Float32, "parameter '", trainable[i], "' is ", dtype_name(t.dtype()),
             "; the optimizers train float32 parameters only (freeze it)");
    values[i].param = trainable[i];
    g.inputs.push_back(trainable[i]);
    g.info_mut(trainable[i]) = static_info(t);
  }
  auto declare = [&](const std::string& base, const Tensor& t, bool input) {
    const std::string name = g.unique_name(base);
    (input ? g.inputs : g.outputs).push_back(name);
    g.info_mut(name) = static_info(t);
    return name;
  };
  for (size_t i = 0; i < trainable.size(); ++i)
    values[i].grad = declare(trainable[i] + "_grad", params_source.initializers.at(trainable[i]), true);
  for (const auto& s : state_names)
    for (size_t i = 0; i < trainable.size(); ++i)
      values[i].states.push_back(declare(trainable[i] + "." + s, params_source.initializers.at(trainable[i]), true));
  for (size_t i = 0; i < trainable.size(); ++i)
    values[i].param_out = declare(trainable[i] + ".updated", params_source.initializers.at(trainable[i]), false);
  for (const auto& s : state_names)
    for (size_t i = 0; i < trainable.size(); ++i)
      values[i].states_out.push_back(declare(trainable[i] + "." + s + ".updated", params_source.initializers.at(trainable[i]), false));
  if (o.optimizer == Optimizer::SGD) sgd_nodes(g, lr, step, values, o);
  else adamw_nodes(g, lr, step, values, o);
  return g;
}

std::string number(double v) { return str_cat(std::setprecision(17), v); }

}  // namespace

ArtifactSummary v1::generate_artifacts(const Model& model, const std::string& out_dir, const ArtifactOptions& o) {
  check_options(o);
  const Graph& source = model.impl_->graph;
  const std::vector<api::BatchNormState> batchnorm_state = api::find_batchnorm_state(source);
  const std::vector<std::string> state = api::state_names(batchnorm_state);
  const std::vector<std::string> params = api::parameter_names(source);
  std::vector<std::string> trainable = select_trainable(source, params, state, o);
  OT_CHECK(!trainable.empty(), "no parameter is left to train; the model's parameters are ", few_names(params));
  std::vector<std::string> data_inputs = model.input_names();
  OT_CHECK(!source.outputs.empty(), "the model has no outputs");
  if (o.loss == Loss::None)
    OT_CHECK(data_inputs.size() == 1 || data_inputs.size() == 2, "loss 'none' needs a model with one or two inputs "
             "(x, and optionally the target y), this one has ", data_inputs.size(), ": ", few_names(data_inputs));
  else
    OT_CHECK(data_inputs.size() == 1, "loss '", api::loss_name(o.loss), "' needs a model with one input x, this one has ",
             data_inputs.size(), ": ", few_names(data_inputs));

  // The forward graph with every parameter and state tensor as an input: the checkpoint is the one
  // home of weights and statistics.
  Graph g = source;
  g.inputs = data_inputs;
  for (const auto* names : {&params, &state}) {
    for (const auto& p : *names) {
      g.info_mut(p) = static_info(g.initializers.at(p));
      g.initializers.erase(p);
      g.initializer_order.erase(std::find(g.initializer_order.begin(), g.initializer_order.end(), p));
      g.inputs.push_back(p);
    }
  }
  prepare_graph(g, GraphUse::Training);
  std::string target;
  const std::string model_output = g.outputs[0];
  const std::string loss = append_loss(g, o.loss, target);
  if (!target.empty()) g.inputs.insert(g.inputs.begin() + 1, target);
  infer_shapes(g);

  std::vector<std::string> frozen;
  for (const auto& p : params)
    if (!std::count(trainable.begin(), trainable.end(), p)) frozen.push_back(p);
  Graph training = training_graph(g, loss, batchnorm_state, trainable, frozen);
  training.name = "training";

  Graph eval = g;
  eval.name = "eval";
  api::normalize_with_running_statistics(eval, batchnorm_state);
  eval.outputs = {loss};
  if (o.loss != Loss::None) eval.outputs.push_back(model_output);
  eliminate_dead_nodes(eval);

  const Graph optimizer = optimizer_graph(source, trainable, o);

  const std::filesystem::path dir(out_dir);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  OT_CHECK(!ec && std::filesystem::is_directory(dir), "cannot create the artifacts directory '", out_dir, "': ",
           ec ? ec.message() : "a file of that name exists");
  const ModelMeta meta;
  api::write_file_bytes((dir / api::kTrainingModelFile).string(), save_model(training, meta, true));
  api::write_file_bytes((dir / api::kEvalModelFile).string(), save_model(eval, meta, true));
  api::write_file_bytes((dir / api::kOptimizerModelFile).string(), save_model(optimizer, meta, true));
  api::write_file_bytes((dir / api::kInferenceModelFile).string(),
                        batchnorm_state.empty() ? model.impl_->bytes
                                                : api::normalize_with_running_statistics(model.impl_->bytes, batchnorm_state));

  api::Checkpoint c;
  c.loss = o.loss;
  c.optimizer = o.optimizer;
  c.trainable = trainable;
  c.frozen = frozen;
  for (const auto& p : params) c.parameters[p] = source.initializers.at(p).clone();
  c.state_names = state;
  for (const auto& name : state) c.state[name] = source.initializers.at(name).clone();
  for (size_t s = 0; s < api::optimizer_state_names(o.optimizer).size(); ++s) {
    c.optimizer_states.emplace_back();
    for (const auto& p : trainable) {
      const Tensor& t = source.initializers.at(p);
      c.optimizer_states.back().push_back(Tensor::zeros(t.dtype(), t.shape()));
    }
  }
  c.learning_rate = o.learning_rate;
  c.hyperparameters = {{"weight_decay", number(o.weight_decay)}};
  if (o.optimizer == Optimizer::SGD) {
    c.hyperparameters["momentum"] = number(o.momentum);
  } else {
    c.hyperparameters["beta1"] = number(o.beta1);
    c.hyperparameters["beta2"] = number(o.beta2);
    c.hyperparameters["epsilon"] = number(o.epsilon);
  }
  api::write_checkpoint((dir / api::kCheckpointFile).string(), c);
  return {trainable, frozen, state};
}

}  // namespace onnxtrain
