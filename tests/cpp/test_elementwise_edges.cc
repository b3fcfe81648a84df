// Gradients of the elementwise family at their ties and kinks, where finite differences say
// nothing: each expected value is what PyTorch 1.13 computes (float64, upstream gradient 1).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "session/training_session.h"

namespace onnxtrain {
namespace {

using Values = std::vector<double>;
const double kNaN = std::nan("");

Tensor vec(const Values& v) { return Tensor::from_vector(v, {static_cast<int64_t>(v.size())}); }

// Runs one node on 1-D float64 inputs and returns the gradient of sum(output) for each input.
std::vector<Values> grads_of(const std::string& op, const std::vector<Values>& inputs, AttributeMap attrs = {},
                             const std::string& domain = "") {
  Graph g;
  if (!domain.empty()) g.opsets[domain] = 1;
  Node n{"node", op, domain, {}, {"y"}, std::move(attrs)};
  std::vector<Tensor> feeds;
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::string name = "x" + std::to_string(i);
    n.inputs.push_back(name);
    g.inputs.push_back(name);
    g.value_info[name] = {DType::Float64, std::vector<Dim>{{static_cast<int64_t>(inputs[i].size()), ""}}};
    feeds.push_back(vec(inputs[i]));
  }
  g.outputs = {"y"};
  g.add_node(n);
  TrainingSession session(g, {g.inputs, {}, false});
  std::vector<Tensor> outputs;
  auto call = session.forward(feeds, 0, outputs);
  Tensor ones = Tensor::empty(DType::Float64, outputs[0].shape());
  for (int64_t i = 0; i < ones.numel(); ++i) ones.data<double>()[i] = 1;
  std::vector<Values> out;
  for (const Tensor& t : session.backward(*call, {ones})) {
    Values v;
    for (int64_t i = 0; i < t.numel(); ++i) v.push_back(t.item_as_double(i));
    out.push_back(v);
  }
  return out;
}

void expect_values(const Values& got, const Values& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) EXPECT_TRUE(std::isnan(got[i])) << what << "[" << i << "] is " << got[i];
    else EXPECT_NEAR(got[i], want[i], 1e-12 + 1e-6 * std::abs(want[i])) << what << "[" << i << "]";
  }
}

TEST(ElementwiseEdges, MaximumAndMinimumSplitTiesAndPassNaN) {
  Values a{1, 2, 3, kNaN, 5}, b{1, 1, 4, 1, kNaN};
  auto mx = grads_of("Max", {a, b});
  expect_values(mx[0], {0.5, 1, 0, 1, 1}, "Max dA");
  expect_values(mx[1], {0.5, 0, 1, 1, 1}, "Max dB");
  auto mn = grads_of("Min", {a, b});
  expect_values(mn[0], {0.5, 0, 1, 1, 1}, "Min dA");
  expect_values(mn[1], {0.5, 1, 0, 1, 1}, "Min dB");
}

TEST(ElementwiseEdges, NaryMinMaxGiveAllToTheFirstExtreme) {
  std::vector<Values> xs{{1, 2, 5, 1}, {1, 2, 3, kNaN}, {0.5, 2, 5, kNaN}};
  auto mx = grads_of("Max", xs);
  expect_values(mx[0], {1, 1, 1, 0}, "Max d0");
  expect_values(mx[1], {0, 0, 0, 1}, "Max d1");
  expect_values(mx[2], {0, 0, 0, 0}, "Max d2");
  auto mn = grads_of("Min", xs);
  expect_values(mn[0], {0, 1, 0, 0}, "Min d0");
  expect_values(mn[1], {0, 0, 1, 1}, "Min d1");
  expect_values(mn[2], {1, 0, 0, 0}, "Min d2");
}

TEST(ElementwiseEdges, ClipPassesGradientAtItsBounds) {
  // The bounds are 0-d initializers, as torch.clamp's scalars export.
  Graph g;
  Node n{"clip", "Clip", "", {"x", "lo", "hi"}, {"y"}, {}};
  g.inputs = {"x"};
  g.value_info["x"] = {DType::Float64, std::vector<Dim>{{5, ""}}};
  g.add_initializer("lo", Tensor::scalar<double>(0.0));
  g.add_initializer("hi", Tensor::scalar<double>(2.0));
  g.outputs = {"y"};
  g.add_node(n);
  TrainingSession session(g, {{"x"}, {}, false});
  std::vector<Tensor> outputs;
  auto call = session.forward({vec({-1, 0, 1, 2, 3})}, 0, outputs);
  Tensor grad = session.backward(*call, {vec({1, 1, 1, 1, 1})})[0];
  Values got;
  for (int64_t i = 0; i < grad.numel(); ++i) got.push_back(grad.item_as_double(i));
  expect_values(got, {0, 1, 1, 1, 0}, "Clip dX");
}

TEST(ElementwiseEdges, HardTanhHasNoGradientAtItsBoundsNorAtNaN) {
  // torch: hardtanh(x, -1, 2) and relu6 give 0 at both bounds and for NaN (its vectorized
  // kernel, which tensors of 8 or more elements take), 1 inside.
  AttributeMap bounds{{"min_val", Attribute::of_float(-1.0f)}, {"max_val", Attribute::of_float(2.0f)}};
  expect_values(grads_of("HardTanh", {{-1, 2, -3, 0.5, 5, kNaN}}, bounds, kOnnxTrainDomain)[0], {0, 0, 0, 1, 0, 0},
                "HardTanh");
  AttributeMap relu6{{"min_val", Attribute::of_float(0.0f)}, {"max_val", Attribute::of_float(6.0f)}};
  expect_values(grads_of("HardTanh", {{0, 6, 3}}, relu6, kOnnxTrainDomain)[0], {0, 0, 1}, "relu6");
}

TEST(ElementwiseEdges, HardTanhFloat32VectorsKeepTheBoundsAndNaNInEveryLane) {
  // float32 runs 8-lane vectors with a padded tail: 19 values put edges in full vectors and in
  // the tail. Forward: clamped, NaN kept; gradient: 1 strictly inside, else 0.
  const float nan = std::nanf("");
  const std::vector<float> x{0, 6, -1, 7, 3, nan, 0.5f, 6.5f, -0.0f, 5.999f, 1e-7f, 6, 0, nan, 2, 8, -3, 6, 0.25f};
  Graph g;
  g.opsets[kOnnxTrainDomain] = 1;
  Node n{"relu6", "HardTanh", kOnnxTrainDomain, {"x"}, {"y"},
         {{"min_val", Attribute::of_float(0.0f)}, {"max_val", Attribute::of_float(6.0f)}}};
  g.inputs = {"x"};
  g.value_info["x"] = {DType::Float32, std::vector<Dim>{{static_cast<int64_t>(x.size()), ""}}};
  g.outputs = {"y"};
  g.add_node(n);
  TrainingSession session(g, {g.inputs, {}, false});
  std::vector<Tensor> outputs;
  auto call = session.forward({Tensor::from_vector(x, {static_cast<int64_t>(x.size())})}, 0, outputs);
  Tensor ones = Tensor::empty(DType::Float32, outputs[0].shape());
  for (int64_t i = 0; i < ones.numel(); ++i) ones.data<float>()[i] = 1;
  const Tensor dx = session.backward(*call, {ones})[0];
  for (size_t i = 0; i < x.size(); ++i) {
    const float y = outputs[0].data<float>()[i], d = dx.data<float>()[i];
    if (std::isnan(x[i])) {
      EXPECT_TRUE(std::isnan(y)) << "y[" << i << "]";
    } else {
      EXPECT_EQ(y, std::min(std::max(x[i], 0.0f), 6.0f)) << "y[" << i << "]";
    }
    EXPECT_EQ(d, x[i] > 0 && x[i] < 6 ? 1.0f : 0.0f) << "dx[" << i << "] at x = " << x[i];
  }
}

TEST(ElementwiseEdges, SiluGradientAtZeroInItsTailsAndAtInfinity) {
  const double inf = std::numeric_limits<double>::infinity();
  expect_values(grads_of("Silu", {{0, -30, 30, inf, -inf, kNaN, -100}}, {}, kOnnxTrainDomain)[0],
                {0.5, -2.713710660963134e-12, 1.000000000002711, kNaN, kNaN, kNaN, -3.682875216260627e-42}, "Silu");
}

TEST(ElementwiseEdges, KinksTakeTorchsSide) {
  expect_values(grads_of("Abs", {{-1, 0, 2}})[0], {-1, 0, 1}, "Abs");
  expect_values(grads_of("HardSwish", {{-3, 0, 3, -4, 4}})[0], {-0.5, 0.5, 1.5, 0, 1}, "HardSwish");
  AttributeMap torch_hardsigmoid{{"alpha", Attribute::of_float(1.0f / 6)}, {"beta", Attribute::of_float(0.5f)}};
  auto hs = grads_of("HardSigmoid", {{-3, -1.0 / 3, 0, 3}}, torch_hardsigmoid)[0];
  expect_values({hs[0], hs[3]}, {0, 0}, "HardSigmoid corners");
  expect_values(grads_of("LeakyRelu", {{0, -1, 2}}, {{"alpha", Attribute::of_float(0.1f)}})[0], {0.1f, 0.1f, 1},
                "LeakyRelu");
  expect_values(grads_of("Elu", {{0, -1, 2}}, {{"alpha", Attribute::of_float(2.0f)}})[0], {2, 2 * std::exp(-1.0), 1},
                "Elu");
  expect_values(grads_of("Celu", {{0, -1, 2}}, {{"alpha", Attribute::of_float(2.0f)}})[0], {1, std::exp(-0.5), 1},
                "Celu");
  expect_values(grads_of("Selu", {{0}})[0], {1.7580993408473766}, "Selu");
  auto prelu = grads_of("PRelu", {{0, -1, 2}, {0.25}});
  expect_values(prelu[0], {0.25, 0.25, 1}, "PRelu dX");
  expect_values(prelu[1], {-1}, "PRelu dSlope");
}

TEST(ElementwiseEdges, PowAtZeroBaseAndExponent) {
  auto p = grads_of("Pow", {{0, 0, -2, 2}, {0, 2, 2, 0.5}});
  expect_values(p[0], {0, 0, -4, 0.5 / std::sqrt(2.0)}, "Pow dX");
  expect_values(p[1], {0, 0, kNaN, std::sqrt(2.0) * std::log(2.0)}, "Pow dY");
}

}  // namespace
}  // namespace onnxtrain
