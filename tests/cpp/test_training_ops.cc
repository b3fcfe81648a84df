// ONNX's training ops (ai.onnx.preview.training): the optimizers Adam, Adagrad and Momentum
// against their spec's pseudo code written out in float64, and the Gradient op against hand
// derivatives and central differences.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "ops/training/training_domain.h"
#include "session/training_session.h"
#include "tests/cpp/gradient_check.h"

namespace onnxtrain::testing {
namespace {

constexpr DType F32 = DType::Float32;
constexpr DType F64 = DType::Float64;
const char* const kTraining = kOnnxPreviewTrainingDomain;

void declare(Graph& g, const std::string& name, const Tensor& t) {
  std::vector<Dim> dims;
  for (int64_t d : t.shape()) dims.push_back(Dim{d, ""});
  g.value_info[name] = {t.dtype(), dims};
}

Graph graph_with_inputs(const std::vector<std::string>& names, const std::vector<Tensor>& feeds) {
  Graph g;
  g.opsets[kTraining] = 1;
  g.inputs = names;
  for (size_t i = 0; i < names.size(); ++i) declare(g, names[i], feeds[i]);
  return g;
}

std::vector<Tensor> run(Graph g, const std::vector<Tensor>& feeds) {
  InferenceSession session(std::move(g));
  return session.run(feeds, 0);
}

std::vector<double> values(const Tensor& t) {
  std::vector<double> out;
  for (int64_t i = 0; i < t.numel(); ++i) out.push_back(t.item_as_double(i));
  return out;
}

void expect_close(const Tensor& actual, const std::vector<double>& expected, double rtol, double atol,
                  const std::string& what) {
  ASSERT_EQ(actual.numel(), static_cast<int64_t>(expected.size())) << what;
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_NEAR(actual.item_as_double(static_cast<int64_t>(i)), expected[i], atol + rtol * std::abs(expected[i]))
        << what << " element " << i;
}

Tensor scalar_rate(DType dt, double r) { return dt == F64 ? Tensor::scalar<double>(r) : Tensor::scalar<float>(float(r)); }
Tensor count(int64_t t) { return Tensor::scalar<int64_t>(t); }

// Names "X0", "X1", ... per block letter, in the ops' block order.
std::vector<std::string> block_names(const std::string& letters, int n, const std::string& suffix = "") {
  std::vector<std::string> out;
  for (char c : letters)
    for (int i = 0; i < n; ++i) out.push_back(std::string(1, c) + std::to_string(i) + suffix);
  return out;
}

// One optimizer node over n tensors of the given shapes; returns its outputs.
std::vector<Tensor> run_optimizer(const std::string& op, const AttributeMap& attrs, const std::string& in_blocks,
                                  const std::string& out_blocks, double r, int64_t t,
                                  const std::vector<std::vector<Tensor>>& blocks) {
  const int n = static_cast<int>(blocks[0].size());
  std::vector<std::string> names = {"R", "T"};
  for (const auto& b : block_names(in_blocks, n)) names.push_back(b);
  std::vector<Tensor> feeds = {scalar_rate(blocks[0][0].dtype(), r), count(t)};
  for (const auto& block : blocks)
    for (const auto& x : block) feeds.push_back(x);
  Graph g = graph_with_inputs(names, feeds);
  g.outputs = block_names(out_blocks, n, "_new");
  g.add_node({"opt", op, kTraining, names, g.outputs, attrs});
  return run(std::move(g), feeds);
}

AttributeMap floats(std::initializer_list<std::pair<const char*, float>> kv) {
  AttributeMap m;
  for (const auto& [k, v] : kv) m[k] = Attribute::of_float(v);
  return m;
}

// --- Adam ------------------------------------------------------------------------------------

struct AdamAttrs {
  float alpha = 0.9f, beta = 0.999f, epsilon = 1e-6f, norm = 0, post = 0;
};

void adam_reference(double r, int64_t t, const AdamAttrs& a, const Tensor& X, const Tensor& G, const Tensor& V,
                    const Tensor& H, std::vector<double>& x_new, std::vector<double>& v_new,
                    std::vector<double>& h_new) {
  const double alpha = a.alpha, beta = a.beta;
  const double r_adjusted = t > 0 ? r * std::sqrt(1 - std::pow(beta, t)) / (1 - std::pow(alpha, t)) : r;
  x_new.clear(), v_new.clear(), h_new.clear();
  for (int64_t k = 0; k < X.numel(); ++k) {
    const double x = X.item_as_double(k), g = double(a.norm) * x + G.item_as_double(k);
    const double v = alpha * V.item_as_double(k) + (1 - alpha) * g;
    const double h = beta * H.item_as_double(k) + (1 - beta) * g * g;
    x_new.push_back((1 - double(a.post)) * (x - r_adjusted * v / (std::sqrt(h) + double(a.epsilon))));
    v_new.push_back(v);
    h_new.push_back(h);
  }
}

void check_adam(DType dt, const AdamAttrs& a, bool default_attrs, int64_t t, double rtol, double atol) {
  const std::vector<TensorShape> shapes = {{3, 4}, {5}};
  std::vector<std::vector<Tensor>> blocks(4);
  for (size_t i = 0; i < shapes.size(); ++i) {
    blocks[0].push_back(random_tensor(dt, shapes[i], 10 + i));
    blocks[1].push_back(random_tensor(dt, shapes[i], 20 + i));
    blocks[2].push_back(random_tensor(dt, shapes[i], 30 + i, -0.5, 0.5));
    blocks[3].push_back(random_tensor(dt, shapes[i], 40 + i, 0, 0.5));
  }
  AttributeMap attrs;
  if (!default_attrs)
    attrs = floats({{"alpha", a.alpha}, {"beta", a.beta}, {"epsilon", a.epsilon}, {"norm_coefficient", a.norm},
                    {"norm_coefficient_post", a.post}});
  const double r = 0.05;
  auto out = run_optimizer("Adam", attrs, "XGVH", "XVH", r, t, blocks);
  ASSERT_EQ(out.size(), 6u);
  for (size_t i = 0; i < shapes.size(); ++i) {
    std::vector<double> x, v, h;
    adam_reference(r, t, a, blocks[0][i], blocks[1][i], blocks[2][i], blocks[3][i], x, v, h);
    EXPECT_EQ(out[i].shape(), shapes[i]);
    expect_close(out[i], x, rtol, atol, "X_new #" + std::to_string(i));
    expect_close(out[2 + i], v, rtol, atol, "V_new #" + std::to_string(i));
    expect_close(out[4 + i], h, rtol, atol, "H_new #" + std::to_string(i));
  }
}

TEST(TrainingOps, AdamMatchesTheSpecWithAndWithoutBiasCorrection) {
  const AdamAttrs a{0.85f, 0.95f, 1e-7f, 0.01f, 0.02f};
  for (int64_t t : {0, 1, 3}) check_adam(F64, a, false, t, 1e-12, 1e-14);
  check_adam(F32, a, false, 3, 2e-6, 1e-6);
}

TEST(TrainingOps, AdamDefaultAttributesAreTheSpecs) {
  check_adam(F64, AdamAttrs{}, true, 2, 1e-12, 1e-14);
}

TEST(TrainingOps, AdamComputesOnlyTheOutputsAsked) {
  Tensor x = random_tensor(F64, {4}, 1), g = random_tensor(F64, {4}, 2), v = random_tensor(F64, {4}, 3);
  Tensor h = random_tensor(F64, {4}, 4, 0, 1);
  std::vector<Tensor> feeds = {scalar_rate(F64, 0.1), count(1), x, g, v, h};
  Graph graph = graph_with_inputs({"R", "T", "X", "G", "V", "H"}, feeds);
  graph.outputs = {"X_new"};
  graph.add_node({"adam", "Adam", kTraining, graph.inputs, {"X_new"}, {}});
  auto out = run(std::move(graph), feeds);
  std::vector<double> xr, vr, hr;
  adam_reference(0.1, 1, AdamAttrs{}, x, g, v, h, xr, vr, hr);
  ASSERT_EQ(out.size(), 1u);
  expect_close(out[0], xr, 1e-12, 1e-14, "X_new");
}

// --- Adagrad ---------------------------------------------------------------------------------

TEST(TrainingOps, AdagradMatchesTheSpec) {
  const float decay = 0.1f, eps = 1e-5f, norm = 0.003f;
  for (DType dt : {F64, F32}) {
    for (int64_t t : {0, 5}) {
      const std::vector<TensorShape> shapes = {{2, 3}, {1}, {7}};
      std::vector<std::vector<Tensor>> blocks(3);
      for (size_t i = 0; i < shapes.size(); ++i) {
        blocks[0].push_back(random_tensor(dt, shapes[i], 50 + i));
        blocks[1].push_back(random_tensor(dt, shapes[i], 60 + i));
        blocks[2].push_back(random_tensor(dt, shapes[i], 70 + i, 0, 2));
      }
      const double r = 0.2;
      auto out = run_optimizer("Adagrad", floats({{"decay_factor", decay}, {"epsilon", eps}, {"norm_coefficient", norm}}),
                               "XGH", "XH", r, t, blocks);
      ASSERT_EQ(out.size(), 6u);
      const double rate = r / (1 + double(t) * double(decay));
      const double rtol = dt == F64 ? 1e-12 : 2e-6, atol = dt == F64 ? 1e-14 : 1e-6;
      for (size_t i = 0; i < shapes.size(); ++i) {
        std::vector<double> x, h;
        for (int64_t k = 0; k < shapes[i].numel(); ++k) {
          const double xk = blocks[0][i].item_as_double(k);
          const double g = double(norm) * xk + blocks[1][i].item_as_double(k);
          const double hk = blocks[2][i].item_as_double(k) + g * g;
          x.push_back(xk - rate * g / (std::sqrt(hk) + double(eps)));
          h.push_back(hk);
        }
        expect_close(out[i], x, rtol, atol, "X_new #" + std::to_string(i) + " T=" + std::to_string(t));
        expect_close(out[3 + i], h, rtol, atol, "H_new #" + std::to_string(i) + " T=" + std::to_string(t));
      }
    }
  }
}

// --- Momentum --------------------------------------------------------------------------------

AttributeMap momentum_attrs(float alpha, float beta, float norm, const std::string& mode) {
  AttributeMap m = floats({{"alpha", alpha}, {"beta", beta}, {"norm_coefficient", norm}});
  m["mode"] = Attribute::of_string(mode);
  return m;
}

TEST(TrainingOps, MomentumStandardAndNesterovMatchTheSpec) {
  const float alpha = 0.8f, beta = 0.3f, norm = 0.01f;
  for (const std::string mode : {"standard", "nesterov"}) {
    for (DType dt : {F64, F32}) {
      for (int64_t t : {0, 2}) {
        const std::vector<TensorShape> shapes = {{4, 2}, {3}};
        std::vector<std::vector<Tensor>> blocks(3);
        for (size_t i = 0; i < shapes.size(); ++i)
          for (int b = 0; b < 3; ++b) blocks[b].push_back(random_tensor(dt, shapes[i], 100 + 10 * b + i));
        const double r = 0.1;
        auto out = run_optimizer("Momentum", momentum_attrs(alpha, beta, norm, mode), "XGV", "XV", r, t, blocks);
        ASSERT_EQ(out.size(), 4u);
        const double b_adj = t > 0 ? double(beta) : 1.0;
        const double rtol = dt == F64 ? 1e-12 : 2e-6, atol = dt == F64 ? 1e-14 : 1e-6;
        for (size_t i = 0; i < shapes.size(); ++i) {
          std::vector<double> x, v;
          for (int64_t k = 0; k < shapes[i].numel(); ++k) {
            const double xk = blocks[0][i].item_as_double(k);
            const double g = double(norm) * xk + blocks[1][i].item_as_double(k);
            const double vk = double(alpha) * blocks[2][i].item_as_double(k) + b_adj * g;
            x.push_back(mode == "nesterov" ? xk - r * (g + double(alpha) * vk) : xk - r * vk);
            v.push_back(vk);
          }
          const std::string what = mode + " T=" + std::to_string(t) + " #" + std::to_string(i);
          expect_close(out[i], x, rtol, atol, "X_new " + what);
          expect_close(out[2 + i], v, rtol, atol, "V_new " + what);
        }
      }
    }
  }
}

// torch.optim.SGD(lr, momentum, dampening, weight_decay, nesterov) is Momentum with alpha =
// momentum, beta = 1 - dampening, norm_coefficient = weight_decay, V = 0 and T = 0 at the first
// step (where torch sets the buffer to the gradient, undamped). Written as torch's loop.
TEST(TrainingOps, MomentumRepeatsTorchSgdStepByStep) {
  const double lr = 0.05;
  const float momentum = 0.9f, weight_decay = 0.01f;
  for (bool nesterov : {false, true}) {
    const float dampening = nesterov ? 0.0f : 0.25f;  // torch's Nesterov requires dampening 0
    Tensor x = random_tensor(F64, {6}, 7), v = Tensor::zeros(F64, {6});
    std::vector<double> p = values(x), buf;
    for (int64_t step = 0; step < 4; ++step) {
      Tensor g = random_tensor(F64, {6}, 200 + step);
      for (int64_t k = 0; k < 6; ++k) {  // torch.optim.SGD's step
        double d_p = g.item_as_double(k) + double(weight_decay) * p[k];
        if (step == 0) buf.push_back(d_p);
        else buf[k] = double(momentum) * buf[k] + (1 - double(dampening)) * d_p;
        p[k] -= lr * (nesterov ? d_p + double(momentum) * buf[k] : buf[k]);
      }
      auto out = run_optimizer("Momentum",
                               momentum_attrs(momentum, 1 - dampening, weight_decay, nesterov ? "nesterov" : "standard"),
                               "XGV", "XV", lr, step, {{x}, {g}, {v}});
      expect_close(out[0], p, 1e-12, 1e-14, "parameter after step " + std::to_string(step));
      expect_close(out[1], buf, 1e-12, 1e-14, "momentum buffer after step " + std::to_string(step));
      x = out[0], v = out[1];
    }
  }
}

TEST(TrainingOps, OptimizerErrorsNameTheNodeAndTheProblem) {
  auto expect_error = [](const std::function<void()>& f, const std::vector<std::string>& parts) {
    try {
      f();
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
    }
  };
  Tensor a = random_tensor(F64, {3}, 1), b = random_tensor(F64, {4}, 2);
  // Five tensors after R and T cannot be blocks of four.
  expect_error([&] { run_optimizer("Adam", {}, "XGVHW", "X", 0.1, 0, {{a}, {a}, {a}, {a}, {a}}); },
               {"Adam node 'opt'", "7 inputs"});
  expect_error([&] { run_optimizer("Momentum", momentum_attrs(0.9f, 1, 0, "heavy_ball"), "XGV", "XV", 0.1, 0, {{a}, {a}, {a}}); },
               {"Momentum node 'opt'", "heavy_ball"});
  expect_error([&] { run_optimizer("Momentum", floats({{"alpha", 0.9f}, {"beta", 1}}), "XGV", "XV", 0.1, 0, {{a}, {a}, {a}}); },
               {"Momentum node 'opt'", "norm_coefficient"});
  expect_error([&] { run_optimizer("Adagrad", {}, "XGH", "XH", 0.1, 0, {{a}, {b}, {a}}); }, {"Adagrad", "G #0"});
}

TEST(TrainingOps, DifferentiatingThroughAnOptimizerIsRefused) {
  for (const char* op : {"Adam", "Adagrad", "Momentum"}) {
    const std::string op_type = op;
    const bool adam = op_type == "Adam";
    std::vector<std::string> names = {"R", "T", "X", "G", op_type == "Adagrad" ? "H" : "V"};
    if (adam) names.push_back("H");
    std::vector<Tensor> feeds = {scalar_rate(F32, 0.1), count(0)};
    for (size_t i = 2; i < names.size(); ++i) feeds.push_back(random_tensor(F32, {3}, i, 0, 1));
    Graph g = graph_with_inputs(names, feeds);
    AttributeMap attrs = op_type == "Momentum" ? momentum_attrs(0.9f, 1, 0, "standard") : AttributeMap{};
    g.add_node({"update", op_type, kTraining, names, {"X_new"}, attrs});
    g.add_node({"sum", "ReduceSum", "", {"X_new"}, {"loss"}, {{"keepdims", Attribute::of_int(0)}}});
    g.outputs = {"loss"};
    try {
      TrainingSession session(g, {{"X"}, {}, false});
      ADD_FAILURE() << op << ": no error";
    } catch (const UnsupportedError& e) {
      EXPECT_NE(std::string(e.what()).find("optimizer update"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("'update'"), std::string::npos) << e.what();
    }
  }
}

// --- Gradient --------------------------------------------------------------------------------

Node gradient_node(const std::string& name, const std::vector<std::string>& xs, const std::vector<std::string>& zs,
                   const std::string& y, const std::vector<std::string>& inputs,
                   const std::vector<std::string>& outputs) {
  AttributeMap attrs;
  attrs["xs"].kind = Attribute::Kind::Strings;
  attrs["xs"].strings = xs;
  if (!zs.empty()) {
    attrs["zs"].kind = Attribute::Kind::Strings;
    attrs["zs"].strings = zs;
  }
  attrs["y"] = Attribute::of_string(y);
  return Node{name, "Gradient", kTraining, inputs, outputs, attrs};
}

const AttributeMap kScalarSum{{"keepdims", Attribute::of_int(0)}};

TEST(GradientOp, ProductSumHasTheOtherFactorAsGradient) {
  Tensor a = random_tensor(F64, {4}, 1), b = random_tensor(F64, {4}, 2);
  Graph g = graph_with_inputs({"a", "b"}, {a, b});
  // Placed before the nodes computing y, as a valid ONNX order allows: its inputs are a and b.
  g.add_node(gradient_node("grad", {"a", "b"}, {}, "y", {"a", "b"}, {"da", "db"}));
  g.add_node({"mul", "Mul", "", {"a", "b"}, {"c"}, {}});
  g.add_node({"sum", "ReduceSum", "", {"c"}, {"y"}, kScalarSum});
  g.outputs = {"y", "da", "db"};
  auto out = run(std::move(g), {a, b});
  expect_close(out[1], values(b), 0, 0, "dy/da");
  expect_close(out[2], values(a), 0, 0, "dy/db");
}

// y = sum(tanh(x W + bias)^2): x, W in xs, bias in zs.
Graph tanh_model(const std::vector<Tensor>& feeds, bool with_gradient) {
  Graph g = graph_with_inputs({"x", "W", "bias"}, feeds);
  g.add_node({"mm", "MatMul", "", {"x", "W"}, {"h"}, {}});
  g.add_node({"add", "Add", "", {"h", "bias"}, {"s"}, {}});
  g.add_node({"tanh", "Tanh", "", {"s"}, {"t"}, {}});
  g.add_node({"square", "Mul", "", {"t", "t"}, {"t2"}, {}});
  g.add_node({"sum", "ReduceSum", "", {"t2"}, {"y"}, kScalarSum});
  g.outputs = {"y"};
  if (with_gradient) {
    g.add_node(gradient_node("grad", {"x", "W"}, {"bias"}, "y", {"x", "W", "bias"}, {"dx", "dW"}));
    g.outputs = {"y", "dx", "dW"};
  }
  return g;
}

std::vector<Tensor> tanh_feeds(DType dt) {
  return {random_tensor(dt, {2, 3}, 11), random_tensor(dt, {3, 4}, 12), random_tensor(dt, {4}, 13)};
}

TEST(GradientOp, MatchesCentralDifferencesInFloat64) {
  std::vector<Tensor> feeds = tanh_feeds(F64);
  auto out = run(tanh_model(feeds, true), feeds);
  ASSERT_EQ(out.size(), 3u);
  const double eps = 1e-6;
  for (int which = 0; which < 2; ++which) {
    std::vector<double> fd;
    for (int64_t k = 0; k < feeds[which].numel(); ++k) {
      double y[2];
      for (int side = 0; side < 2; ++side) {
        std::vector<Tensor> moved = feeds;
        moved[which] = feeds[which].clone();
        moved[which].data<double>()[k] += side ? -eps : eps;
        y[side] = run(tanh_model(moved, false), moved)[0].item_as_double(0);
      }
      fd.push_back((y[0] - y[1]) / (2 * eps));
    }
    expect_close(out[1 + which], fd, 1e-6, 1e-8, which ? "dy/dW" : "dy/dx");
  }
}

TEST(GradientOp, Float32AgreesWithFloat64) {
  std::vector<Tensor> f64 = tanh_feeds(F64), f32 = tanh_feeds(F32);
  for (size_t i = 0; i < f64.size(); ++i)  // the float32 values, exactly
    for (int64_t k = 0; k < f64[i].numel(); ++k) f64[i].data<double>()[k] = f32[i].item_as_double(k);
  auto ref = run(tanh_model(f64, true), f64);
  auto out = run(tanh_model(f32, true), f32);
  for (size_t i = 0; i < ref.size(); ++i) {
    EXPECT_EQ(out[i].dtype(), F32);
    expect_close(out[i], values(ref[i]), 1e-5, 1e-6, "output " + std::to_string(i));
  }
}

// d/ds sum(tanh(s)^2) = 2 tanh(s) (1 - tanh(s)^2), at the graph's s or at another value s1.
std::vector<double> tanh_square_derivative(const Tensor& s) {
  std::vector<double> out;
  for (double v : values(s)) out.push_back(2 * std::tanh(v) * (1 - std::tanh(v) * std::tanh(v)));
  return out;
}

TEST(GradientOp, WithRespectToAnIntermediateValue) {
  std::vector<Tensor> feeds = tanh_feeds(F64);
  Graph g = tanh_model(feeds, false);
  g.add_node(gradient_node("grad_s", {"s"}, {}, "y", {"s"}, {"ds"}));
  g.outputs = {"y", "s", "ds"};
  auto out = run(std::move(g), feeds);
  expect_close(out[2], tanh_square_derivative(out[1]), 1e-12, 1e-14, "dy/ds");
}

TEST(GradientOp, AtAnotherPointThanTheNamedValue) {
  std::vector<Tensor> feeds = tanh_feeds(F64);
  Tensor s1 = random_tensor(F64, {2, 4}, 99, -2, 2);
  feeds.push_back(s1);
  Graph g = tanh_model(feeds, false);
  g.inputs.push_back("s1");
  declare(g, "s1", s1);
  g.add_node(gradient_node("grad_s1", {"s"}, {}, "y", {"s1"}, {"ds1"}));
  g.outputs = {"y", "ds1"};
  auto out = run(std::move(g), feeds);
  expect_close(out[1], tanh_square_derivative(s1), 1e-12, 1e-14, "dy/ds at s1");
  // The graph's own y is still computed from its own s.
  auto plain = run(tanh_model({feeds[0], feeds[1], feeds[2]}, false), {feeds[0], feeds[1], feeds[2]});
  EXPECT_EQ(out[0].item_as_double(0), plain[0].item_as_double(0));
}

TEST(GradientOp, NonScalarYIsDifferentiatedAsTheSumOfItsElements) {
  Tensor a = random_tensor(F64, {2, 3}, 5);
  Graph g = graph_with_inputs({"a"}, {a});
  g.add_node({"sq", "Mul", "", {"a", "a"}, {"y"}, {}});
  g.add_node(gradient_node("grad", {"a"}, {}, "y", {"a"}, {"da"}));
  g.outputs = {"da"};
  auto out = run(std::move(g), {a});
  std::vector<double> expected;
  for (double v : values(a)) expected.push_back(2 * v);
  expect_close(out[0], expected, 1e-15, 0, "d sum(a*a)/da");
}

TEST(GradientOp, AnXThatYDoesNotDependOnGetsZeros) {
  Tensor a = random_tensor(F64, {3}, 5), b = random_tensor(F64, {2, 2}, 6);
  Graph g = graph_with_inputs({"a", "b"}, {a, b});
  g.add_node({"sum", "ReduceSum", "", {"a"}, {"y"}, kScalarSum});
  g.add_node(gradient_node("grad", {"a", "b"}, {}, "y", {"a", "b"}, {"da", "db"}));
  g.outputs = {"da", "db"};
  auto out = run(std::move(g), {a, b});
  expect_close(out[0], {1, 1, 1}, 0, 0, "da");
  EXPECT_EQ(out[1].shape(), b.shape());
  EXPECT_EQ(out[1].dtype(), F64);
  expect_close(out[1], {0, 0, 0, 0}, 0, 0, "db");
}

// y = sum(a * StopGradient(a)): the forward is sum(a^2), the gradient a alone (torch's
// (a * a.detach()).sum()), not 2a; StopGradient's output is a itself.
TEST(GradientOp, StopGradientPassesTheValueAndNoGradient) {
  Tensor a = random_tensor(F64, {4}, 7);
  Graph g = graph_with_inputs({"a"}, {a});
  g.opsets[kOnnxTrainDomain] = 1;  // so that shape inference reads StopGradient's schema
  g.add_node({"stop", "StopGradient", kOnnxTrainDomain, {"a"}, {"a_stopped"}, {}});
  g.add_node({"mul", "Mul", "", {"a", "a_stopped"}, {"c"}, {}});
  g.add_node({"sum", "ReduceSum", "", {"c"}, {"y"}, kScalarSum});
  g.add_node(gradient_node("grad", {"a"}, {}, "y", {"a"}, {"da"}));
  g.outputs = {"a_stopped", "y", "da"};
  auto out = run(std::move(g), {a});
  expect_close(out[0], values(a), 0, 0, "StopGradient(a)");
  double sum_of_squares = 0;
  for (double v : values(a)) sum_of_squares += v * v;
  expect_close(out[1], {sum_of_squares}, 1e-15, 0, "y");
  expect_close(out[2], values(a), 0, 0, "dy/da");
}

TEST(GradientOp, SecondOrderThroughAnotherGradient) {
  Tensor x = random_tensor(F64, {5}, 8);
  Graph g = graph_with_inputs({"x"}, {x});
  // The second Gradient comes first: it must wait for the first one's expansion.
  g.add_node(gradient_node("second", {"x"}, {}, "dy", {"x"}, {"d2y"}));
  g.add_node({"sq", "Mul", "", {"x", "x"}, {"x2"}, {}});
  g.add_node({"cube", "Mul", "", {"x2", "x"}, {"y"}, {}});
  g.add_node(gradient_node("first", {"x"}, {}, "y", {"x"}, {"dy"}));
  g.outputs = {"dy", "d2y"};
  auto out = run(std::move(g), {x});
  std::vector<double> first, second;
  for (double v : values(x)) first.push_back(3 * v * v), second.push_back(6 * v);
  expect_close(out[0], first, 1e-14, 1e-15, "d x^3/dx");
  expect_close(out[1], second, 1e-14, 1e-15, "d2 x^3/dx2");
}

TEST(GradientOp, RefusesWhatItCannotDoNamingTheNode) {
  Tensor a = random_tensor(F64, {3}, 5);
  Tensor idx = Tensor::from_vector(std::vector<int64_t>{0, 2}, {2});
  auto attempt = [&](Node gradient, const std::vector<std::string>& parts) {
    Graph g = graph_with_inputs({"a", "idx"}, {a, idx});
    g.add_node({"gather", "Gather", "", {"a", "idx"}, {"picked"}, {}});
    g.add_node({"sum", "ReduceSum", "", {"picked"}, {"y"}, kScalarSum});
    g.add_node(std::move(gradient));
    g.outputs = {"y", "out"};
    try {
      run(std::move(g), {a, idx});
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("Gradient node 'bad'"), std::string::npos) << what;
      for (const auto& p : parts) EXPECT_NE(what.find(p), std::string::npos) << what;
    }
  };
  attempt(gradient_node("bad", {"missing"}, {}, "y", {"a"}, {"out"}), {"'missing'", "not a value"});
  attempt(gradient_node("bad", {"a"}, {}, "nowhere", {"a"}, {"out"}), {"'nowhere'"});
  attempt(gradient_node("bad", {"idx"}, {}, "y", {"idx"}, {"out"}), {"int64", "floating"});
  attempt(gradient_node("bad", {"a"}, {"idx"}, "y", {"a"}, {"out"}), {"1 inputs", "xs and zs"});
  attempt(gradient_node("bad", {"a", "a"}, {}, "y", {"a", "a"}, {"out"}), {"named twice"});
}

}  // namespace
}  // namespace onnxtrain::testing
