// The float32 kernels that run explicit 8-lane forms (float_unary_vectorized and
// float_binary_vectorized, and Where's contiguous loops) against the same node in float64, which
// takes the scalar libm forms, on the same (float-representable) inputs. 37 inputs fill four
// vectors and a tail of five, and hold the branch points, signed zeros, infinities and NaN, so a
// lane that takes the wrong branch, a mishandled tail or a lost NaN fails. Selects and single
// products must match the rounded float64 result exactly; the fast:: transcendentals within the
// ulps they document. Runs flush subnormals to zero (runtime/thread_pool.h), so a float64 result
// below FLT_MIN is matched by a float32 zero or by the subnormal.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>

#include "session/training_session.h"

namespace onnxtrain {
namespace {

using Values = std::vector<double>;
const double kInf = INFINITY, kNaN = NAN;

const Values kX{-100, -20, -3.5, -1, -0.5, -1e-3, -1e-7, -0.0, 0.0, 1e-7, 1e-3, 0.5, 1, 3.5, 20, 100, kNaN,
                kInf, -kInf, 1e-30, -1e-30, 0.25, 0.75, 1.5, -1.5, 7, -7, 0.999, 1.001, 2, -2, 30, -30, 0.1,
                -0.1, kNaN, 5};
const Values kDY{0.3, -1.7, 2.5, 1, -0.25, 4, -3, 0.125, 1.5, -2, 0.7, -0.9, 3.25, -1.1, 0.6, 2, -0.5,
                 1.25, -4, 0.2, 0.9, -1.3, 1.7, -2.2, 0.4, -0.8, 1.1, 2.9, -0.35, 0.45, -1.9, 3.3, 0.05,
                 -0.65, 1.8, -2.7, 0.15};

std::vector<double> run_node(const std::string& op, const std::string& domain, const AttributeMap& attrs,
                             const std::vector<Values>& inputs, DType dtype) {
  Graph g;
  if (!domain.empty()) g.opsets[domain] = 1;
  Node n{"node", op, domain, {}, {"y"}, attrs};
  std::vector<Tensor> feeds;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string name = "x" + std::to_string(i);
    n.inputs.push_back(name);
    g.inputs.push_back(name);
    const int64_t size = static_cast<int64_t>(inputs[i].size());
    g.value_info[name] = {dtype, std::vector<Dim>{{size, ""}}};
    const std::vector<float> as_float(inputs[i].begin(), inputs[i].end());
    const std::vector<double> as_double(as_float.begin(), as_float.end());
    feeds.push_back(dtype == DType::Float64 ? Tensor::from_vector(as_double, {size})
                                            : Tensor::from_vector(as_float, {size}));
  }
  g.outputs = {"y"};
  g.add_node(n);
  InferenceSession session(std::move(g), false, 0);
  const Tensor y = session.run(feeds, 0)[0];
  std::vector<double> out;
  for (int64_t i = 0; i < y.numel(); ++i) out.push_back(y.item_as_double(i));
  return out;
}

double ulps_apart(double got, double want) {
  const float w = static_cast<float>(want);
  const double step = std::max<double>(std::nextafter(std::fabs(w), INFINITY) - std::fabs(w), std::ldexp(1.0, -149));
  return std::fabs(got - static_cast<double>(w)) / step;
}

// float32 against float64 through the same node, within `ulps` of the float64 result rounded.
void expect_float32_matches_float64(const std::string& op, const std::string& domain, const AttributeMap& attrs,
                                    const std::vector<Values>& inputs, double ulps) {
  const auto f32 = run_node(op, domain, attrs, inputs, DType::Float32);
  const auto f64 = run_node(op, domain, attrs, inputs, DType::Float64);
  ASSERT_EQ(f32.size(), f64.size()) << op;
  for (size_t i = 0; i < f32.size(); ++i) {
    const std::string where =
        op + " at element " + std::to_string(i) + " (x = " + std::to_string(inputs.back()[i]) + ")";
    if (std::isnan(f64[i])) {
      EXPECT_TRUE(std::isnan(f32[i])) << where << ": " << f32[i] << ", want NaN";
    } else if (std::fabs(f64[i]) < FLT_MIN) {
      EXPECT_LE(std::fabs(f32[i]), FLT_MIN) << where << ": " << f32[i] << " against " << f64[i];
    } else if (std::isinf(static_cast<float>(f64[i]))) {
      EXPECT_EQ(f32[i], static_cast<float>(f64[i])) << where;
    } else {
      EXPECT_LE(ulps_apart(f32[i], f64[i]), ulps) << where << ": " << f32[i] << " against " << f64[i];
      if (f64[i] == 0) {
        EXPECT_EQ(std::signbit(f32[i]), std::signbit(f64[i])) << where << ": the sign of zero";
      }
    }
  }
}

AttributeMap floats(std::initializer_list<std::pair<const char*, float>> values) {
  AttributeMap attrs;
  for (const auto& [name, v] : values) attrs[name] = Attribute::of_float(v);
  return attrs;
}

TEST(ElementwiseVectorForms, LeakyReluAndItsGradientAreExact) {
  expect_float32_matches_float64("LeakyRelu", "", floats({{"alpha", 0.1f}}), {kX}, 0);
  expect_float32_matches_float64("LeakyReluGrad", kOnnxTrainDomain, floats({{"alpha", 0.1f}}), {kDY, kX}, 0);
}

TEST(ElementwiseVectorForms, HardSigmoidGradientIsExactAndOpenAtTheCorners) {
  Values y;
  for (double x : kX) y.push_back(std::isnan(x) ? x : std::fmod(std::fabs(x), 1.5) - 0.25);
  y[3] = 0, y[4] = 1;  // the corners, where the gradient is 0
  expect_float32_matches_float64("HardSigmoidGrad", kOnnxTrainDomain, floats({{"alpha", 0.2f}}), {kDY, y}, 0);
}

TEST(ElementwiseVectorForms, ExponentialLinearFamilyWithinFiveUlps) {
  expect_float32_matches_float64("Elu", "", floats({{"alpha", 1.3f}}), {kX}, 5);
  expect_float32_matches_float64("Selu", "", {}, {kX}, 5);
  // Celu's alpha 0.5 makes x / alpha exact: with another alpha, float rounding of the argument
  // alone moves e^(x / alpha) by |x / alpha| ulps, in the scalar form as much as in the vector one.
  expect_float32_matches_float64("Celu", "", floats({{"alpha", 0.5f}}), {kX}, 5);
  for (const char* op : {"Elu", "Selu", "Celu"}) {
    for (int is_result : {1, 0}) {
      AttributeMap attrs = floats({{"alpha", 0.5f}});
      attrs["op"] = Attribute::of_string(op);
      attrs["is_result"] = Attribute::of_int(is_result);
      expect_float32_matches_float64("EluGrad", kOnnxTrainDomain, attrs, {kDY, kX}, 5);
    }
  }
}

TEST(ElementwiseVectorForms, SoftplusAndItsGradientWithinFourUlps) {
  expect_float32_matches_float64("Softplus", "", {}, {kX}, 4);
  Values y;  // the gradient reads softplus's output, which is never negative
  for (double x : kX) y.push_back(std::isnan(x) ? x : std::log1p(std::exp(-std::fabs(x))) + std::max(x, 0.0));
  expect_float32_matches_float64("SoftplusGrad", kOnnxTrainDomain, {}, {kDY, y}, 4);
}

TEST(ElementwiseVectorForms, LogWithinTwoUlpsWithItsSpecialValues) {
  expect_float32_matches_float64("Log", "", {}, {kX}, 2);
}

TEST(ElementwiseVectorForms, WhereSelectsInEveryLayoutItHasALoopFor) {
  // Condition [rows, 37]; X and Y full, a row, or a scalar: each contiguous loop and the general one.
  const int64_t rows = 3, cols = static_cast<int64_t>(kX.size());
  std::vector<bool> cond_values;
  std::vector<float> full_x, full_y;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      cond_values.push_back((r * 7 + c * 3) % 5 < 2);
      full_x.push_back(static_cast<float>(kX[c]) + r);
      full_y.push_back(static_cast<float>(kDY[c]) - r);
    }
  struct Layout {
    TensorShape cond, x, y;
  };
  const Layout layouts[] = {{{rows, cols}, {rows, cols}, {rows, cols}}, {{rows, cols}, {rows, cols}, {}},
                            {{rows, cols}, {}, {rows, cols}},           {{rows, 1}, {rows, cols}, {rows, cols}},
                            {{rows, cols}, {1, cols}, {rows, 1}},       {{rows, 1}, {}, {rows, cols}},
                            {{rows, 1}, {rows, cols}, {}}};
  for (const Layout& layout : layouts) {
    auto take = [&](const std::vector<float>& full, const TensorShape& shape) {
      std::vector<float> v;
      for (int64_t r = 0; r < (shape.rank() ? shape[0] : 1); ++r)
        for (int64_t c = 0; c < (shape.rank() ? shape[1] : 1); ++c) v.push_back(full[r * cols + c]);
      return Tensor::from_vector(v, shape);
    };
    Tensor cond = Tensor::empty(DType::Bool, layout.cond);
    for (int64_t r = 0; r < layout.cond[0]; ++r)
      for (int64_t c = 0; c < layout.cond[1]; ++c)
        cond.data<bool>()[r * layout.cond[1] + c] = cond_values[r * cols + c];
    const Tensor x = take(full_x, layout.x), y = take(full_y, layout.y);
    Graph g;
    Node n{"where", "Where", "", {"c", "x", "y"}, {"out"}, {}};
    g.inputs = {"c", "x", "y"};
    auto declare = [&](const char* name, DType dtype, const TensorShape& shape) {
      std::vector<Dim> dims;
      for (int64_t d : shape) dims.push_back({d, ""});
      g.value_info[name] = {dtype, dims};
    };
    declare("c", DType::Bool, layout.cond);
    declare("x", DType::Float32, layout.x);
    declare("y", DType::Float32, layout.y);
    g.outputs = {"out"};
    g.add_node(n);
    InferenceSession session(std::move(g), false, 0);
    const Tensor out = session.run({cond, x, y}, 0)[0];
    ASSERT_EQ(out.numel(), rows * cols);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const bool pick_x = cond.data<bool>()[std::min(r, layout.cond[0] - 1) * layout.cond[1] +
                                              std::min(c, layout.cond[1] - 1)];
        auto at = [&](const Tensor& t) {
          if (t.shape().rank() == 0) return t.data<float>()[0];
          return t.data<float>()[std::min(r, t.shape()[0] - 1) * t.shape()[1] + std::min(c, t.shape()[1] - 1)];
        };
        const float want = pick_x ? at(x) : at(y), got = out.data<float>()[r * cols + c];
        if (std::isnan(want)) EXPECT_TRUE(std::isnan(got)) << "row " << r << " column " << c;
        else EXPECT_EQ(got, want) << "row " << r << " column " << c << ", condition " << pick_x;
      }
  }
}

}  // namespace
}  // namespace onnxtrain
