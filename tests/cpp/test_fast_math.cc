// Accuracy of the vectorized float32 exp / erf / tanh / sigmoid (src/ops/math/fast_math.h)
// against double-precision libm, on a dense sweep of float bit patterns (every 331st of the
// 2^32), which covers subnormals, the polynomial seams, overflow, infinities and NaN.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>

#include "ops/math/fast_math.h"

namespace onnxtrain {
namespace {

// Error of `got` in units in the last place of the float nearest to `want`.
double ulp_error(float got, double want) {
  if (std::isnan(want)) return std::isnan(got) ? 0 : 1e9;
  if (std::isnan(got)) return 1e9;  // else it would compare false against every bound
  if (std::isinf(static_cast<float>(want))) return got == static_cast<float>(want) ? 0 : 1e9;
  float w = std::fabs(static_cast<float>(want));
  double ulp = w < FLT_MIN ? std::ldexp(1.0, -149) : std::nextafter(w, INFINITY) - w;
  return std::fabs(static_cast<double>(got) - want) / ulp;
}

template <typename F, typename R>
double worst_error(F fast_fn, R reference) {
  double worst = 0;
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 331) {
    const uint32_t bits = static_cast<uint32_t>(b);
    float x;
    std::memcpy(&x, &bits, sizeof(x));
    worst = std::max(worst, ulp_error(fast_fn(fast::splat(x))[0], reference(static_cast<double>(x))));
  }
  return worst;
}

TEST(FastMath, ExpWithinOneUlp) {
  EXPECT_LE(worst_error([](fast::VF v) { return fast::exp(v); }, [](double x) { return std::exp(x); }), 1.01);
}

TEST(FastMath, ErfWithinOnePointFiveUlp) {
  EXPECT_LE(worst_error([](fast::VF v) { return fast::erf(v); }, [](double x) { return std::erf(x); }), 1.5);
}

TEST(FastMath, TanhWithinOnePointFiveUlp) {
  EXPECT_LE(worst_error([](fast::VF v) { return fast::tanh(v); }, [](double x) { return std::tanh(x); }), 1.5);
}

TEST(FastMath, SigmoidWithinTwoPointFiveUlp) {
  EXPECT_LE(worst_error([](fast::VF v) { return fast::sigmoid(v); },
                        [](double x) { return 1.0 / (1.0 + std::exp(-x)); }),
            2.5);
}

// Every 331st bit pattern covers all exponents, subnormals, both signs, inf and NaN; ulp_error
// counts a NaN as right only where the reference is NaN too.
TEST(FastMath, LogWithinTwoUlp) {
  EXPECT_LE(worst_error([](fast::VF v) { return fast::log(v); }, [](double x) { return std::log(x); }), 2.0);
}

TEST(FastMath, Expm1WithinThreeUlp) {
  EXPECT_LE(worst_error([](fast::VF v) { return fast::expm1(v); }, [](double x) { return std::expm1(x); }), 3.0);
}

TEST(FastMath, SoftplusWithinThreeUlp) {
  EXPECT_LE(worst_error([](fast::VF v) { return fast::softplus(v); },
                        [](double x) { return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x)); }),
            3.0);
}

TEST(FastMath, LogSpecialValues) {
  const float inf = INFINITY, nan = NAN;
  const fast::VF x{0.0f, -0.0f, inf, -inf, nan, -1.0f, 1.0f, 1e-45f};
  const fast::VF y = fast::log(x);
  EXPECT_EQ(y[0], -inf);
  EXPECT_EQ(y[1], -inf);
  EXPECT_EQ(y[2], inf);
  EXPECT_TRUE(std::isnan(y[3]));
  EXPECT_TRUE(std::isnan(y[4]));
  EXPECT_TRUE(std::isnan(y[5]));
  EXPECT_EQ(y[6], 0.0f);
  EXPECT_FLOAT_EQ(y[7], static_cast<float>(std::log(static_cast<double>(1e-45f))));  // the smallest subnormal
  const fast::VF m = fast::expm1(x), s = fast::softplus(x);
  EXPECT_EQ(m[0], 0.0f);
  EXPECT_TRUE(std::signbit(m[1]));
  EXPECT_EQ(m[2], inf);
  EXPECT_EQ(m[3], -1.0f);
  EXPECT_TRUE(std::isnan(m[4]));
  EXPECT_EQ(s[2], inf);
  EXPECT_EQ(s[3], 0.0f);
  EXPECT_TRUE(std::isnan(s[4]));
  EXPECT_EQ(s[0], static_cast<float>(std::log(2.0)));
}

TEST(FastMath, SpecialValues) {
  const float inf = INFINITY, nan = NAN;
  fast::VF x{0.0f, -0.0f, inf, -inf, nan, 100.0f, -200.0f, 88.7f};
  fast::VF e = fast::exp(x), r = fast::erf(x), t = fast::tanh(x), s = fast::sigmoid(x);
  EXPECT_EQ(e[0], 1.0f);
  EXPECT_EQ(e[2], inf);
  EXPECT_EQ(e[3], 0.0f);
  EXPECT_TRUE(std::isnan(e[4]));
  EXPECT_EQ(e[5], inf);
  EXPECT_EQ(e[6], 0.0f);
  EXPECT_TRUE(std::isfinite(e[7]));
  EXPECT_EQ(r[2], 1.0f);
  EXPECT_EQ(r[3], -1.0f);
  EXPECT_TRUE(std::isnan(r[4]));
  EXPECT_TRUE(std::signbit(r[1]));
  EXPECT_EQ(t[2], 1.0f);
  EXPECT_EQ(t[3], -1.0f);
  EXPECT_TRUE(std::isnan(t[4]));
  EXPECT_EQ(s[2], 1.0f);
  EXPECT_EQ(s[3], 0.0f);
  EXPECT_EQ(s[0], 0.5f);
  EXPECT_TRUE(std::isnan(s[4]));
}

}  // namespace
}  // namespace onnxtrain
