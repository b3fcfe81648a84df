#include "tests/cpp/gradient_check.h"

#include <cmath>
#include <random>
#include <sstream>

#include "ops/registry.h"
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

std::string check_gradient(const GradCase& c) {
  Graph g;
  g.name = c.name;
  g.opsets = {{"", c.opset}};
  if (!c.domain.empty()) g.opsets[c.domain] = 1;
  Node n{c.name, c.op_type, c.domain, {}, {}, c.attrs};
  std::vector<std::string> wrt;
  std::vector<Tensor> feeds;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    if (!c.inputs[i].defined()) {
      n.inputs.push_back("");
      continue;
    }
    std::string name = "in" + std::to_string(i);
    n.inputs.push_back(name);
    g.inputs.push_back(name);
    std::vector<Dim> dims;
    for (int64_t d : c.inputs[i].shape()) dims.push_back({d, ""});
    g.value_info[name] = {c.inputs[i].dtype(), dims};
    feeds.push_back(c.inputs[i]);
    bool diff = i < c.differentiable.size() ? c.differentiable[i] : is_floating(c.inputs[i].dtype());
    if (diff) wrt.push_back(name);
  }
  for (int o = 0; o < c.num_outputs; ++o) {
    n.outputs.push_back("out" + std::to_string(o));
    g.outputs.push_back(n.outputs.back());
  }
  g.add_node(n);

  TrainingSession session(g, {wrt, {}, false});
  const TrainingGraph& tg = session.training_graph();
  std::vector<Tensor> outputs;
  auto call = session.forward(feeds, 7, outputs);
  // Fixed random weights per differentiable output define the scalar L.
  std::vector<Tensor> weights;
  for (size_t k = 0; k < tg.differentiable_outputs.size(); ++k) {
    size_t pos = static_cast<size_t>(tg.differentiable_output_positions[k]);
    weights.push_back(random_tensor(outputs[pos].dtype(), outputs[pos].shape(), 1000 + k));
  }
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
