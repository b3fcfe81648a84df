#include "tests/cpp/gradient_check.h"

#include <cmath>
#include <limits>
#include <random>
#include <sstream>

#include "opdef/op_registry.h"
#include "runtime/thread_pool.h"
#include "session/training_session.h"

namespace onnxtrain::testing {

std::vector<GradCase>& grad_cases() {
  static std::vector<GradCase> cases;
  return cases;
}

bool add_grad_cases(std::vector<GradCase> cases) {
  for (auto& c : cases) grad_cases().push_back(std::move(c));
  return true;
}

Tensor random_tensor(DType dtype, const TensorShape& shape, uint64_t seed, double lo, double hi, double min_abs) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  Tensor t = Tensor::empty(dtype, shape);
  for (int64_t i = 0; i < t.numel(); ++i) {
    double v = dist(rng);
    while (std::abs(v) < min_abs) v = dist(rng);
    if (dtype == DType::Float64) t.data<double>()[i] = v;
    else t.data<float>()[i] = static_cast<float>(v);
  }
  return t;
}

Tensor post_relu_tensor(DType dtype, const TensorShape& shape, uint64_t seed) {
  Tensor t = random_tensor(dtype, shape, seed);
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (dtype == DType::Float64) t.data<double>()[i] = std::max(0.0, t.data<double>()[i]);
    else t.data<float>()[i] = std::max(0.0f, t.data<float>()[i]);
  }
  return t;
}

Tensor int64_tensor(const std::vector<int64_t>& values, const TensorShape& shape) {
  return Tensor::from_vector(values, shape);
}
Tensor int64_tensor(const std::vector<int64_t>& values) {
  return Tensor::from_vector(values, {static_cast<int64_t>(values.size())});
}

namespace {

double dot(const Tensor& a, const Tensor& b) {
  double s = 0;
  for (int64_t i = 0; i < a.numel(); ++i) s += a.item_as_double(i) * b.item_as_double(i);
  return s;
}

void set_element(Tensor& t, int64_t i, double v) {
  if (t.dtype() == DType::Float64) t.data<double>()[i] = v;
  else t.data<float>()[i] = static_cast<float>(v);
}

}  // namespace

namespace {

// The node of a case as a one-node graph, its feeds, and which inputs it differentiates.
struct CaseGraph {
  Graph graph;
  std::vector<std::string> wrt;
  std::vector<Tensor> feeds;
};

CaseGraph case_graph(const GradCase& c, const std::vector<Tensor>& inputs) {
  CaseGraph cg;
  Graph& g = cg.graph;
  g.name = c.name;
  g.opsets = {{"", c.opset}};
  if (!c.domain.empty()) g.opsets[c.domain] = 1;
  Node n{c.name, c.op_type, c.domain, {}, {}, c.attrs};
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) {
      n.inputs.push_back("");
      continue;
    }
    std::string name = "in" + std::to_string(i);
    n.inputs.push_back(name);
    g.inputs.push_back(name);
    std::vector<Dim> dims;
    for (int64_t d : inputs[i].shape()) dims.push_back({d, ""});
    g.value_info[name] = {inputs[i].dtype(), dims};
    cg.feeds.push_back(inputs[i]);
    bool diff = i < c.differentiable.size() ? c.differentiable[i] : is_floating(inputs[i].dtype());
    if (diff) cg.wrt.push_back(name);
  }
  for (int o = 0; o < c.num_outputs; ++o) {
    n.outputs.push_back("out" + std::to_string(o));
    g.outputs.push_back(n.outputs.back());
  }
  g.add_node(n);
  return cg;
}

// Fixed random weights, one per differentiable output, define the scalar L = sum(r * output).
std::vector<Tensor> output_weights(const GradCase& c, const TrainingGraph& tg, const std::vector<Tensor>& outputs) {
  std::vector<Tensor> weights;
  for (size_t k = 0; k < tg.differentiable_outputs.size(); ++k) {
    size_t pos = static_cast<size_t>(tg.differentiable_output_positions[k]);
    Tensor w = random_tensor(outputs[pos].dtype(), outputs[pos].shape(), 1000 + k);
    if (c.output_weight_zeros > 0) {
      std::mt19937_64 rng(2000 + k);
      std::uniform_real_distribution<double> u(0, 1);
      for (int64_t i = 0; i < w.numel(); ++i)
        if (u(rng) < c.output_weight_zeros) set_element(w, i, 0.0);
    }
    weights.push_back(w);
  }
  return weights;
}

Tensor to_dtype(const Tensor& t, DType dtype) {
  if (!t.defined() || !is_floating(t.dtype()) || t.dtype() == dtype) return t;
  Tensor out = Tensor::empty(dtype, t.shape());
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double v = t.item_as_double(i);
    if (dtype == DType::Float64) out.data<double>()[i] = v;
    else out.data<float>()[i] = static_cast<float>(v);
  }
  return out;
}

// max |a - b| / max |b| (0 when b is all zeros and a equals it); NaN and Inf must sit in the
// same places with the same values.
double relative_difference(const Tensor& a, const Tensor& b, std::string& where) {
  double worst = 0, scale = 0;
  for (int64_t i = 0; i < b.numel(); ++i) {
    const double y = b.item_as_double(i);
    if (std::isfinite(y)) scale = std::max(scale, std::abs(y));
  }
  for (int64_t i = 0; i < b.numel(); ++i) {
    const double x = a.item_as_double(i), y = b.item_as_double(i);
    if (!std::isfinite(x) || !std::isfinite(y)) {
      const bool same = (std::isnan(x) && std::isnan(y)) || x == y;
      if (!same) {
        where = "[" + std::to_string(i) + "] " + std::to_string(x) + " vs " + std::to_string(y);
        return std::numeric_limits<double>::infinity();
      }
      continue;
    }
    const double d = std::abs(x - y) / (scale > 0 ? scale : 1.0);
    if (d > worst) {
      worst = d;
      where = "[" + std::to_string(i) + "] " + std::to_string(x) + " vs " + std::to_string(y);
    }
  }
  return worst;
}

struct RunResult {
  std::vector<Tensor> outputs, grads;
};

RunResult run_case(const GradCase& c, const std::vector<Tensor>& inputs, const std::vector<Tensor>* weights_in,
                   std::vector<Tensor>* weights_out) {
  CaseGraph cg = case_graph(c, inputs);
  TrainingSession session(cg.graph, {cg.wrt, {}, false});
  RunResult r;
  auto call = session.forward(cg.feeds, 7, r.outputs);
  std::vector<Tensor> weights = weights_in ? *weights_in : output_weights(c, session.training_graph(), r.outputs);
  if (weights_out) *weights_out = weights;
  std::vector<Tensor> typed;
  for (size_t k = 0; k < weights.size(); ++k) {
    size_t pos = static_cast<size_t>(session.training_graph().differentiable_output_positions[k]);
    typed.push_back(to_dtype(weights[k], r.outputs[pos].dtype()));
  }
  r.grads = session.backward(*call, typed);
  return r;
}

}  // namespace

std::vector<GradCase>& production_cases() {
  static std::vector<GradCase> cases;
  return cases;
}

bool add_production_cases(std::vector<GradCase> cases) {
  for (auto& c : cases) {
    c.finite_differences = false;
    production_cases().push_back(std::move(c));
  }
  return true;
}

std::string check_float32_against_float64(const GradCase& c, int threads) {
  ThreadPool::set_num_threads(threads);
  // Both runs see the same values: float32 ones, widened for the float64 run.
  std::vector<Tensor> in32, in64;
  for (const Tensor& t : c.inputs) {
    in32.push_back(to_dtype(to_dtype(t, DType::Float32), DType::Float32));
    in64.push_back(to_dtype(in32.back(), DType::Float64));
  }
  std::vector<Tensor> weights;
  RunResult ref = run_case(c, in64, nullptr, &weights);
  for (auto& w : weights) w = to_dtype(to_dtype(w, DType::Float32), DType::Float64);
  ref = run_case(c, in64, &weights, nullptr);
  RunResult got = run_case(c, in32, &weights, nullptr);
  std::ostringstream report;
  auto compare = [&](const std::vector<Tensor>& a, const std::vector<Tensor>& b, const char* what) {
    for (size_t i = 0; i < b.size(); ++i) {
      if (!a[i].defined() || !b[i].defined()) {
        if (a[i].defined() != b[i].defined()) report << what << " " << i << " defined in one run only; ";
        continue;
      }
      if (!is_floating(b[i].dtype())) continue;
      if (a[i].shape() != b[i].shape()) {
        report << what << " " << i << ": shape " << a[i].shape().str() << " vs " << b[i].shape().str() << "; ";
        continue;
      }
      std::string where;
      const double d = relative_difference(a[i], b[i], where);
      if (d > c.float32_tolerance)
        report << what << " " << i << " (" << threads << " threads): float32 differs from float64 by " << d
               << " of the largest magnitude at " << where << "; ";
    }
  };
  compare(got.outputs, ref.outputs, "output");
  compare(got.grads, ref.grads, "gradient");
  return report.str();
}

std::string check_gradient(const GradCase& c) {
  CaseGraph cg = case_graph(c, c.inputs);
  Graph& g = cg.graph;
  std::vector<std::string>& wrt = cg.wrt;
  std::vector<Tensor>& feeds = cg.feeds;
  TrainingSession session(g, {wrt, {}, false});
  const TrainingGraph& tg = session.training_graph();
  std::vector<Tensor> outputs;
  auto call = session.forward(feeds, 7, outputs);
  std::vector<Tensor> weights = output_weights(c, tg, outputs);
  std::vector<Tensor> grads = session.backward(*call, weights);

  InferenceSession forward_only(g);
  auto loss = [&](const std::vector<Tensor>& in) {
    std::vector<Tensor> outs = forward_only.run(in, 7);
    double l = 0;
    for (size_t k = 0; k < tg.differentiable_outputs.size(); ++k) {
      size_t pos = static_cast<size_t>(tg.differentiable_output_positions[k]);
      l += dot(outs[pos], weights[k]);
    }
    return l;
  };

  std::ostringstream report;
  for (size_t w = 0; w < wrt.size(); ++w) {
    size_t feed = static_cast<size_t>(std::find(g.inputs.begin(), g.inputs.end(), wrt[w]) - g.inputs.begin());
    const Tensor& analytic = grads[w];
    if (!analytic.defined()) {
      report << "no gradient for " << wrt[w] << "; ";
      continue;
    }
    if (analytic.shape() != feeds[feed].shape()) {
      report << "gradient of " << wrt[w] << " has shape " << analytic.shape().str() << ", input has "
             << feeds[feed].shape().str() << "; ";
      continue;
    }
    for (int64_t i = 0; i < feeds[feed].numel(); ++i) {
      std::vector<Tensor> in = feeds;
      in[feed] = feeds[feed].clone();
      double x = feeds[feed].item_as_double(i);
      set_element(in[feed], i, x + c.eps);
      double up = loss(in);
      set_element(in[feed], i, x - c.eps);
      double down = loss(in);
      double numeric = (up - down) / (2 * c.eps);
      double got = analytic.item_as_double(i);
      if (std::abs(got - numeric) > c.atol + c.rtol * std::abs(numeric)) {
        report << wrt[w] << "[" << i << "]: analytic " << got << " vs numeric " << numeric << "; ";
        break;
      }
    }
  }
  return report.str();
}

}  // namespace onnxtrain::testing
