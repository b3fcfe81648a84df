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
