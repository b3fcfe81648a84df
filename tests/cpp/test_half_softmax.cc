// Softmax and LogSoftmax on 16-bit data (ops/softmax/softmax.cc): the kernels and their gradients
// read bfloat16 or float16 themselves, compute in float32 and round each output once. Checked
// against double arithmetic on the same 16-bit values, within half a rounding step, along the last
// axis (contiguous rows, as attention's scores) and along an inner axis (column blocks).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "opdef/op_registry.h"
#include "tests/cpp/half_testing.h"

namespace onnxtrain {
namespace {

using half_testing::expect_rounded_once;
using half_testing::random_sixteen;
using half_testing::run_node;
using half_testing::value_at;

// Index of element k of slice (o, c) along the axis of an [outer, n, inner] view.
int64_t index_of(int64_t o, int64_t k, int64_t c, int64_t n, int64_t inner) { return (o * n + k) * inner + c; }

struct Slices {
  int64_t outer, n, inner;
};

Slices slices_of(const TensorShape& shape, int axis) {
  Slices s{1, shape[axis], 1};
  for (int i = 0; i < axis; ++i) s.outer *= shape[i];
  for (int i = axis + 1; i < shape.rank(); ++i) s.inner *= shape[i];
  return s;
}

void check(DType type, bool log, const TensorShape& shape, int axis, std::mt19937& gen) {
  const std::string name = std::string(log ? "LogSoftmax " : "Softmax ") + dtype_name(type) + " " + shape.str() +
                           " axis " + std::to_string(axis);
  const Tensor x = random_sixteen(type, shape, gen, 0.0f, 3.0f);
  const AttributeMap attrs{{"axis", Attribute::of_int(axis)}};
  const Tensor y = run_node(log ? "LogSoftmax" : "Softmax", "", attrs, {{"x", x}}, 1)[0];
  ASSERT_EQ(y.dtype(), type) << name;
  const Tensor dy = random_sixteen(type, shape, gen);
  const AttributeMap grad_attrs{{"axis", Attribute::of_int(axis)}, {"coerce_2d", Attribute::of_int(0)}};
  const Tensor dx =
      run_node(log ? "LogSoftmaxGrad" : "SoftmaxGrad", kOnnxTrainDomain, grad_attrs, {{"dy", dy}, {"y", y}}, 1)[0];
  ASSERT_EQ(dx.dtype(), type) << name;
  const Slices s = slices_of(shape, axis);
  for (int64_t o = 0; o < s.outer; ++o)
    for (int64_t c = 0; c < s.inner; ++c) {
      double m = -INFINITY, sum = 0;
      for (int64_t k = 0; k < s.n; ++k) m = std::max(m, value_at(x, index_of(o, k, c, s.n, s.inner)));
      for (int64_t k = 0; k < s.n; ++k) sum += std::exp(value_at(x, index_of(o, k, c, s.n, s.inner)) - m);
      // The gradient from the kernel's own (rounded) Y, as backward reads it. A float32 sum of
      // n terms in 64 lanes is off by up to (n / 64 + 64) float32 steps of its absolute terms.
      double dot = 0, dy_sum = 0, abs_dot = 0, abs_dy_sum = 0;
      for (int64_t k = 0; k < s.n; ++k) {
        const int64_t i = index_of(o, k, c, s.n, s.inner);
        dot += value_at(dy, i) * value_at(y, i);
        dy_sum += value_at(dy, i);
        abs_dot += std::fabs(value_at(dy, i) * value_at(y, i));
        abs_dy_sum += std::fabs(value_at(dy, i));
      }
      const double sum_error = 1.0 + static_cast<double>(s.n) / 64.0;
      for (int64_t k = 0; k < s.n; ++k) {
        const int64_t i = index_of(o, k, c, s.n, s.inner);
        const double xi = value_at(x, i), yi = value_at(y, i), gi = value_at(dy, i);
        if (log) {
          const double exact = xi - m - std::log(sum);
          expect_rounded_once(y, exact, std::fabs(xi) + std::fabs(m) + std::log(sum) + sum_error, i, name + " Y");
          const double grad = gi - std::exp(yi) * dy_sum;
          expect_rounded_once(dx, grad, std::fabs(gi) + std::exp(yi) * abs_dy_sum * sum_error, i, name + " dX");
        } else {
          const double exact = std::exp(xi - m) / sum;
          expect_rounded_once(y, exact, exact * (std::fabs(xi - m) + sum_error), i, name + " Y");
          const double grad = yi * (gi - dot);
          expect_rounded_once(dx, grad, yi * (std::fabs(gi) + abs_dot * sum_error), i, name + " dX");
        }
      }
    }
}

TEST(HalfSoftmax, TheKernelsReadAndWriteSixteenBitDataThemselves) {
  const auto& registry = OpRegistry::instance();
  for (DType t : {DType::BFloat16, DType::Float16}) {
    EXPECT_TRUE(registry.computes_natively("", "Softmax", t));
    EXPECT_TRUE(registry.computes_natively("", "LogSoftmax", t));
    EXPECT_TRUE(registry.computes_natively(kOnnxTrainDomain, "SoftmaxGrad", t));
    EXPECT_TRUE(registry.computes_natively(kOnnxTrainDomain, "LogSoftmaxGrad", t));
  }
}

TEST(HalfSoftmax, EachOutputIsTheFloat32ResultRoundedOnce) {
  std::mt19937 gen(17);
  for (DType type : {DType::BFloat16, DType::Float16})
    for (bool log : {false, true}) {
      check(type, log, {3, 4, 37}, 2, gen);    // rows, with a tail past the 64 lanes' multiple
      check(type, log, {2, 130}, 1, gen);      // a row longer than the lanes
      check(type, log, {2, 5, 70}, 1, gen);    // an inner axis: column blocks, one partial
      check(type, log, {1, 4097}, 1, gen);     // a row past the stack buffer
    }
}

}  // namespace
}  // namespace onnxtrain
