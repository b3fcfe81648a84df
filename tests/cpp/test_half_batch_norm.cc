// Batch normalization on 16-bit data (ops/nn/batch_norm.cc, batch_norm_grad.cc): BatchNormTraining
// and BatchNormGrad read a bfloat16 or float16 X and dY themselves, compute in float32 with the
// statistics summed in double, and round Y and dX once, while the parameters, the statistics and
// dscale, dB stay float32, as under autocast. Each is checked against double arithmetic on the
// same 16-bit values: Y and dX within half a rounding step of their type, the float32 outputs to
// float32's precision.
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
using half_testing::value_at;

constexpr double kEpsilon = 1e-5;

Tensor random_float(int64_t n, std::mt19937& gen, float low, float high) {
  std::uniform_real_distribution<float> uniform(low, high);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = uniform(gen);
  return Tensor::from_vector<float>(v, {n});
}

std::vector<Tensor> run_node(const std::string& op, const AttributeMap& attrs,
                             const std::vector<std::pair<std::string, Tensor>>& inputs, size_t outputs) {
  return half_testing::run_node(op, kOnnxTrainDomain, attrs, inputs, outputs);
}

// Per channel of X [N, C, S...]: batch mean and 1 / sqrt(biased variance + epsilon), in double.
struct Moments {
  std::vector<double> mean, inv_std;
  int64_t count = 0;
};

Moments moments(const Tensor& x) {
  const int64_t n = x.shape()[0], c = x.shape()[1], s = x.numel() / (n * c);
  Moments m;
  m.count = n * s;
  m.mean.assign(static_cast<size_t>(c), 0.0);
  m.inv_std.assign(static_cast<size_t>(c), 0.0);
  for (int64_t ch = 0; ch < c; ++ch) {
    double sum = 0, sq = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t k = 0; k < s; ++k) sum += value_at(x, (i * c + ch) * s + k);
    const double mean = sum / static_cast<double>(m.count);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t k = 0; k < s; ++k) sq += std::pow(value_at(x, (i * c + ch) * s + k) - mean, 2);
    m.mean[static_cast<size_t>(ch)] = mean;
    m.inv_std[static_cast<size_t>(ch)] = 1.0 / std::sqrt(sq / static_cast<double>(m.count) + kEpsilon);
  }
  return m;
}

void check_batch_norm(DType type, const TensorShape& shape, std::mt19937& gen, const std::string& name) {
  const int64_t n = shape[0], c = shape[1], s = shape.numel() / (n * c);
  // A mean far from zero: the kernels subtract it before scaling.
  const Tensor x = random_sixteen(type, shape, gen, 3.0f, 2.0f);
  const Tensor scale = random_float(c, gen, 0.5f, 1.5f), bias = random_float(c, gen, -1.0f, 1.0f);
  const Tensor running_mean = random_float(c, gen, -0.1f, 0.1f), running_var = random_float(c, gen, 0.9f, 1.1f);
  const AttributeMap attrs{{"epsilon", Attribute::of_float(static_cast<float>(kEpsilon))},
                           {"momentum", Attribute::of_float(0.9f)}};
  const auto fwd = run_node("BatchNormTraining", attrs,
                            {{"x", x}, {"scale", scale}, {"bias", bias}, {"mean", running_mean}, {"var", running_var}}, 5);
  const Moments m = moments(x);
  for (size_t o = 1; o < 5; ++o) ASSERT_EQ(fwd[o].dtype(), DType::Float32) << name << " statistics output " << o;
  const double unbias = static_cast<double>(m.count) / static_cast<double>(m.count - 1);
  for (int64_t ch = 0; ch < c; ++ch) {
    const size_t k = static_cast<size_t>(ch);
    const double var = 1.0 / (m.inv_std[k] * m.inv_std[k]) - kEpsilon;
    EXPECT_NEAR(value_at(fwd[1], ch), 0.9 * value_at(running_mean, ch) + 0.1 * m.mean[k], 1e-6) << name << " running_mean";
    EXPECT_NEAR(value_at(fwd[2], ch), 0.9 * value_at(running_var, ch) + 0.1 * var * unbias, 1e-5) << name << " running_var";
    EXPECT_NEAR(value_at(fwd[3], ch), m.mean[k], 1e-6 * std::fabs(m.mean[k])) << name << " saved_mean";
    EXPECT_NEAR(value_at(fwd[4], ch), m.inv_std[k], 1e-6 * m.inv_std[k]) << name << " saved_inv_std";
  }
  for (int64_t i = 0; i < x.numel(); ++i) {
    const size_t ch = static_cast<size_t>((i / s) % c);
    const double xhat = (value_at(x, i) - m.mean[ch]) * m.inv_std[ch];
    const double y = value_at(scale, static_cast<int64_t>(ch)) * xhat + value_at(bias, static_cast<int64_t>(ch));
    ASSERT_EQ(fwd[0].dtype(), type);
    expect_rounded_once(fwd[0], y, std::fabs(y) + 2.0, i, name + " Y");
  }

  const Tensor dy = random_sixteen(type, shape, gen, 0.0f, 1.0f);
  const auto bwd = run_node("BatchNormGrad", {{"epsilon", Attribute::of_float(static_cast<float>(kEpsilon))}},
                            {{"dy", dy}, {"x", x}, {"scale", scale}, {"mean", fwd[3]}, {"inv_std", fwd[4]}}, 3);
  ASSERT_EQ(bwd[1].dtype(), DType::Float32) << name << " dscale";
  ASSERT_EQ(bwd[2].dtype(), DType::Float32) << name << " dB";
  std::vector<double> sum_dy(static_cast<size_t>(c), 0.0), sum_dy_xhat(static_cast<size_t>(c), 0.0);
  for (int64_t i = 0; i < x.numel(); ++i) {
    const size_t ch = static_cast<size_t>((i / s) % c);
    sum_dy[ch] += value_at(dy, i);
    sum_dy_xhat[ch] += value_at(dy, i) * (value_at(x, i) - m.mean[ch]) * m.inv_std[ch];
  }
  for (int64_t ch = 0; ch < c; ++ch) {
    const size_t k = static_cast<size_t>(ch);
    const double tolerance = 1e-5 * std::sqrt(static_cast<double>(m.count));
    EXPECT_NEAR(value_at(bwd[1], ch), sum_dy_xhat[k], tolerance) << name << " dscale";
    EXPECT_NEAR(value_at(bwd[2], ch), sum_dy[k], tolerance) << name << " dB";
  }
  const double count = static_cast<double>(m.count);
  for (int64_t i = 0; i < x.numel(); ++i) {
    const size_t ch = static_cast<size_t>((i / s) % c);
    const double xhat = (value_at(x, i) - m.mean[ch]) * m.inv_std[ch];
    const double k = value_at(scale, static_cast<int64_t>(ch)) * m.inv_std[ch];
    const double terms = std::fabs(value_at(dy, i)) + std::fabs(sum_dy[ch] / count) + std::fabs(xhat * sum_dy_xhat[ch] / count);
    const double dx = k * (value_at(dy, i) - sum_dy[ch] / count - xhat * sum_dy_xhat[ch] / count);
    ASSERT_EQ(bwd[0].dtype(), type);
    expect_rounded_once(bwd[0], dx, std::fabs(k) * terms, i, name + " dX");
  }
}

TEST(HalfBatchNorm, TheKernelsReadAndWriteSixteenBitDataThemselves) {
  const auto& registry = OpRegistry::instance();
  for (const char* op : {"BatchNormTraining", "BatchNormGrad"})
    for (DType t : {DType::BFloat16, DType::Float16}) EXPECT_TRUE(registry.computes_natively(kOnnxTrainDomain, op, t)) << op;
  EXPECT_TRUE(registry.computes_natively("", "BatchNormalization", DType::BFloat16));
}

TEST(HalfBatchNorm, StatisticsStayFloat32AndEachDataOutputIsRoundedOnce) {
  std::mt19937 gen(5);
  const std::vector<TensorShape> shapes = {
      {4, 3, 5, 7},    // spatial rows with a vector part and a tail
      {2, 2, 40, 60},  // rows longer than a summation block
      {16, 5},         // N x C: the column path
      {3, 4, 1},       // one value per row
  };
  for (const DType type : {DType::BFloat16, DType::Float16})
    for (const TensorShape& shape : shapes) check_batch_norm(type, shape, gen, std::string(dtype_name(type)) + " " + shape.str());
}

// A 16-bit X takes parameters of its own type or float32; anything else is refused by name.
TEST(HalfBatchNorm, ParametersOfAnotherTypeAreRefusedByName) {
  std::mt19937 gen(3);
  const Tensor x = random_sixteen(DType::BFloat16, {2, 3, 4}, gen, 0.0f, 1.0f);
  const Tensor f32 = Tensor::from_vector<float>({1, 1, 1}, {3});
  const Tensor f64 = Tensor::from_vector<double>({1, 1, 1}, {3});
  try {
    run_node("BatchNormTraining", {}, {{"x", x}, {"scale", f64}, {"bias", f32}, {"mean", f32}, {"var", f32}}, 5);
    FAIL() << "a float64 scale beside bfloat16 X was accepted";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("scale has element type float64"), std::string::npos) << what;
    EXPECT_NE(what.find("BatchNormTraining"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace onnxtrain
