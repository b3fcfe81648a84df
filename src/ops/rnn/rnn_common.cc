#include "ops/rnn/rnn_common.h"

#include "autodiff/grad_builder.h"

namespace onnxtrain::rnn {
namespace {

Activation activation_named(const Spec& spec, const std::string& name) {
  std::string lower;
  for (char c : name) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "sigmoid") return Activation::Sigmoid;
  if (lower == "tanh") return Activation::Tanh;
  if (lower == "relu") return Activation::Relu;
  throw UnsupportedError(str_cat(spec.node, ": activation '", name,
                                 "' is not supported (Sigmoid, Tanh and Relu are)"));
}

}  // namespace

Spec parse_spec(const Node& node, int gates, const std::vector<Activation>& defaults) {
  Spec spec;
  spec.node = node.describe();
  spec.gates = gates;
  spec.acts_per_direction = static_cast<int>(defaults.size());
  spec.hidden_size = node.attr_int("hidden_size", 0);
  OT_CHECK(spec.hidden_size >= 0, spec.node, ": hidden_size must be positive, got ", spec.hidden_size);
  const std::string direction = node.attr_string("direction", "forward");
  if (direction == "bidirectional") spec.num_directions = 2;
  else if (direction == "reverse") spec.reverse = true;
  else OT_CHECK(direction == "forward", spec.node, ": direction must be forward, reverse or bidirectional, got '", direction, "'");
  spec.layout = static_cast<int>(node.attr_int("layout", 0));
  OT_CHECK(spec.layout == 0 || spec.layout == 1, spec.node, ": layout must be 0 or 1, got ", spec.layout);
  if (node.has_attr("clip")) {
    spec.has_clip = true;
    spec.clip = node.attr_float("clip", 0);
    OT_CHECK(spec.clip > 0, spec.node, ": clip must be positive, got ", spec.clip);
  }
  if (node.attr_int("input_forget", 0) != 0)
    throw UnsupportedError(str_cat(spec.node, ": input_forget=1 (coupled input and forget gates) is not supported"));
  if (node.attr_int("output_sequence", 0) != 0)
    throw UnsupportedError(str_cat(spec.node, ": the opset-1 output_sequence attribute is not supported"));
  spec.linear_before_reset = node.attr_int("linear_before_reset", 0) != 0;
  auto it = node.attrs.find("activations");
  if (it == node.attrs.end()) {
    for (int d = 0; d < spec.num_directions; ++d) spec.activations.insert(spec.activations.end(), defaults.begin(), defaults.end());
  } else {
    const std::vector<std::string>& names = it->second.strings;
    const size_t expected = defaults.size() * static_cast<size_t>(spec.num_directions);
    OT_CHECK(names.size() == expected, spec.node, ": activations lists ", names.size(), " functions, ", direction,
             " needs ", expected);
    for (const std::string& name : names) spec.activations.push_back(activation_named(spec, name));
    // Sigmoid, Tanh and Relu take no alpha or beta, so activation_alpha/beta have nothing to set.
  }
  return spec;
}

Dims check_inputs(const KernelContext& ctx, const Spec& spec, bool lstm) {
  const Tensor& x = ctx.input(kX);
  const Tensor& w = ctx.input(kW);
  const Tensor& r = ctx.input(kR);
  OT_CHECK(x.rank() == 3, spec.node, ": X must be 3-D (", spec.layout == 0 ? "[seq, batch, input]" : "[batch, seq, input]",
           "), got ", x.str());
  Dims d;
  d.layout = spec.layout;
  d.D = spec.num_directions;
  d.T = spec.layout == 0 ? x.dim(0) : x.dim(1);
  d.B = spec.layout == 0 ? x.dim(1) : x.dim(0);
  d.I = x.dim(2);
  OT_CHECK(r.rank() == 3, spec.node, ": R must be 3-D [num_directions, ", spec.gates, "*hidden_size, hidden_size], got ", r.str());
  d.H = spec.hidden_size > 0 ? spec.hidden_size : r.dim(2);
  const int64_t gh = spec.gates * d.H;
  auto same_type = [&](const Tensor& t, const char* name) {
    OT_CHECK(t.dtype() == x.dtype(), spec.node, ": ", name, " has element type ", dtype_name(t.dtype()), ", X has ",
             dtype_name(x.dtype()));
  };
  auto expect = [&](const Tensor& t, const char* name, const TensorShape& shape) {
    same_type(t, name);
    OT_CHECK(t.shape() == shape, spec.node, ": ", name, " must have shape ", shape.str(), " (num_directions ", d.D,
             ", hidden_size ", d.H, ", X ", x.str(), "), got ", t.str());
  };
  expect(w, "W", {d.D, gh, d.I});
  expect(r, "R", {d.D, gh, d.H});
  if (ctx.has_input(kB)) expect(ctx.input(kB), "B", {d.D, 2 * gh});
  if (ctx.has_input(kSequenceLens)) {
    const Tensor& s = ctx.input(kSequenceLens);
    OT_CHECK(s.dtype() == DType::Int32 || s.dtype() == DType::Int64, spec.node, ": sequence_lens must be int32, got ",
             s.str());
    OT_CHECK(s.shape() == TensorShape{d.B}, spec.node, ": sequence_lens must have shape [", d.B, "] (the batch size), got ",
             s.str());
  }
  if (ctx.has_input(kInitialH)) expect(ctx.input(kInitialH), "initial_h", d.state_shape());
  if (lstm) {
    if (ctx.has_input(kInitialC)) expect(ctx.input(kInitialC), "initial_c", d.state_shape());
    if (ctx.has_input(kP)) expect(ctx.input(kP), "P", {d.D, 3 * d.H});
  }
  return d;
}

std::vector<int64_t> sequence_lengths(const KernelContext& ctx, const Spec& spec, const Dims& dims) {
  std::vector<int64_t> lens(static_cast<size_t>(dims.B), dims.T);
  if (!ctx.has_input(kSequenceLens)) return lens;
  const Tensor& s = ctx.input(kSequenceLens);
  for (int64_t b = 0; b < dims.B; ++b) {
    lens[static_cast<size_t>(b)] = s.item_as_int(b);
    OT_CHECK(lens[static_cast<size_t>(b)] >= 0 && lens[static_cast<size_t>(b)] <= dims.T, spec.node,
             ": sequence_lens[", b, "] = ", lens[static_cast<size_t>(b)], " is outside [0, ", dims.T,
             "] (the sequence length of X)");
  }
  return lens;
}

template <>
void activate<float>(Activation a, float* x, int64_t n) {
  auto run = [&](auto f) { fast::map_span(x, x, n, f); };
  switch (a) {
    case Activation::Sigmoid: return run([](fast::VF v) { return fast::sigmoid(v); });
    case Activation::Tanh: return run([](fast::VF v) { return fast::tanh(v); });
    case Activation::Relu:
      for (int64_t i = 0; i < n; ++i) x[i] = x[i] > 0.0f ? x[i] : (x[i] != x[i] ? x[i] : 0.0f);
      return;
  }
}

template <>
void activate<double>(Activation a, double* x, int64_t n) {
  switch (a) {
    case Activation::Sigmoid:
      for (int64_t i = 0; i < n; ++i) {
        const double e = std::exp(-std::abs(x[i]));
        x[i] = (x[i] >= 0 ? 1.0 : e) / (1.0 + e);
      }
      return;
    case Activation::Tanh:
      for (int64_t i = 0; i < n; ++i) x[i] = std::tanh(x[i]);
      return;
    case Activation::Relu:
      for (int64_t i = 0; i < n; ++i) x[i] = x[i] > 0.0 ? x[i] : (x[i] != x[i] ? x[i] : 0.0);
      return;
  }
}

template <typename T>
void column_sums(const T* g, int64_t rows, int64_t n, int64_t ld, T* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* row = g + r * ld;
    for (int64_t j = 0; j < n; ++j) out[j] += row[j];
  }
}

template <typename T>
void previous_states(const Dims& dims, const std::vector<int64_t>& lens, int d, bool reverse, const T* y,
                     const T* initial, T* out) {
  const int64_t H = dims.H;
  for (int64_t b = 0; b < dims.B; ++b) {
    const int64_t len = lens[static_cast<size_t>(b)];
    for (int64_t t = 0; t < dims.T; ++t) {
      T* dst = out + dims.x_row(t, b) * H;
      if (t >= len) {
        std::fill(dst, dst + H, T(0));
        continue;
      }
      const bool first = reverse ? t == len - 1 : t == 0;
      if (first) {
        if (initial) std::copy(initial + dims.state_offset(d, b), initial + dims.state_offset(d, b) + H, dst);
        else std::fill(dst, dst + H, T(0));
      } else {
        const T* src = y + dims.y_offset(reverse ? t + 1 : t - 1, d, b);
        std::copy(src, src + H, dst);
      }
    }
  }
}

template void column_sums<float>(const float*, int64_t, int64_t, int64_t, float*);
template void column_sums<double>(const double*, int64_t, int64_t, int64_t, double*);
template void previous_states<float>(const Dims&, const std::vector<int64_t>&, int, bool, const float*, const float*,
                                     float*);
template void previous_states<double>(const Dims&, const std::vector<int64_t>&, int, bool, const double*,
                                      const double*, double*);

void emit_rnn_gradient(GradBuilder& g, const std::string& grad_op, int num_forward_inputs, int num_outputs,
                       const std::vector<std::string>& stash) {
  const Node& n = g.node();
  std::vector<std::string> inputs;
  for (int i = 0; i < num_forward_inputs; ++i) inputs.push_back(g.has_input(i) ? g.input(i) : std::string());
  const bool have_y = !n.outputs.empty() && !n.outputs[0].empty();
  inputs.push_back(have_y ? g.output(0) : std::string());
  for (int o = 0; o < num_outputs; ++o) inputs.push_back(g.has_output_grad(o) ? g.output_grad(o) : std::string());
  inputs.insert(inputs.end(), stash.begin(), stash.end());
  const int num_grads = num_forward_inputs == 8 ? 7 : 5;
  std::vector<std::string> d = g.op_multi(grad_op, inputs, num_grads, n.attrs, kOnnxTrainDomain);
  for (int i = 0; i < num_forward_inputs; ++i) {
    const int o = grad_output_of_input(i);
    if (o < 0 || o >= num_grads || !g.has_input(i) || !g.needs_input_grad(i)) continue;
    g.set_input_grad(i, d[static_cast<size_t>(o)]);
  }
}

void emit_plain_rnn_gradient(GradBuilder& g) { emit_rnn_gradient(g, g.node().op_type + "Grad", kPlainGradY, 2); }

}  // namespace onnxtrain::rnn
