// 16-bit floats in the executor (runtime/half_compute.h): ops that handle a 16-bit type say so in
// their own registration; every other op's 16-bit inputs are widened to float32, and each output
// is rounded back to the 16-bit type unless its schema type follows a float32 input.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <random>

#include "core/half.h"
#include "opdef/op_registry.h"
#include "runtime/blas.h"
#include "session/training_session.h"

namespace onnxtrain {
namespace {

Tensor bfloat16_tensor(const TensorShape& shape, const std::vector<float>& values) {
  Tensor t = Tensor::empty(DType::BFloat16, shape);
  for (size_t i = 0; i < values.size(); ++i) t.data<BHalf>()[i] = float_to_bfloat16(values[i]);
  return t;
}

// The bit-arithmetic rounding to bfloat16 gives what the generic narrowing gives: on every
// exponent with random mantissas, on the ties, subnormals, the largest finite values, infinities
// and NaNs.
TEST(HalfCompute, FastBfloat16RoundingEqualsTheGenericNarrowing) {
  std::mt19937 gen(7);
  std::vector<uint32_t> patterns;
  for (uint32_t exponent = 0; exponent < 256; ++exponent)
    for (int i = 0; i < 4000; ++i) {
      const uint32_t sign = static_cast<uint32_t>(gen() & 1u) << 31;
      uint32_t mantissa = gen() & 0x7fffffu;
      if (i % 4 == 1) mantissa = (mantissa & ~0xffffu) | 0x8000u;  // a tie
      if (i % 4 == 2) mantissa = (mantissa | 0xffffu);             // just below a carry
      patterns.push_back(sign | (exponent << 23) | mantissa);
    }
  for (uint32_t special : {0x7f7fffffu, 0x7f7f8000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u, 0xffffffffu,
                           0x00000001u, 0x00008000u, 0x00018000u, 0x007fffffu, 0x80000000u})
    patterns.push_back(special);
  for (uint32_t bits : patterns) {
    float f;
    std::memcpy(&f, &bits, 4);
    const uint16_t generic = half_detail::narrow<8, 23, 8, 7>(bits);
    ASSERT_EQ(float_to_bfloat16(f).bits, generic) << std::hex << "float bits 0x" << bits;
  }
}

TEST(HalfCompute, TheOpsOwnRecordSaysWhichTypesItsKernelHandles) {
  const auto& registry = OpRegistry::instance();
  EXPECT_TRUE(registry.computes_natively("", "Transpose", DType::BFloat16));
  EXPECT_TRUE(registry.computes_natively("", "Cast", DType::Float16));
  EXPECT_FALSE(registry.computes_natively("", "Relu", DType::BFloat16));
  EXPECT_FALSE(registry.computes_natively("", "MatMul", DType::Float16));
}

// Under autocast a BatchNorm sees a bfloat16 X (a convolution's output) with float32 statistics:
// Y follows X and stays bfloat16, the running statistics follow the float32 mean and var and stay
// float32, though the graph leaves them undeclared (the kernel reads 16-bit X itself and writes
// each output in its input's type).
TEST(HalfCompute, BatchNormOfBfloat16DataKeepsItsStatisticsFloat32) {
  Graph g;
  g.inputs = {"x", "scale", "bias", "mean", "var"};
  g.outputs = {"y", "running_mean", "running_var"};
  g.value_info["x"] = {DType::BFloat16, std::vector<Dim>{{4, ""}, {2, ""}}};
  g.add_node(Node{"bn", "BatchNormalization", "", {"x", "scale", "bias", "mean", "var"},
                  {"y", "running_mean", "running_var"},
                  {{"training_mode", Attribute::of_int(1)}, {"momentum", Attribute::of_float(0.5f)}}});
  InferenceSession session(g);
  const std::vector<float> xs = {1, 10, 2, 20, 3, 30, 4, 40};
  const auto out = session.run({bfloat16_tensor({4, 2}, xs), Tensor::from_vector<float>({1, 1}, {2}),
                                Tensor::from_vector<float>({0, 0}, {2}), Tensor::from_vector<float>({0, 0}, {2}),
                                Tensor::from_vector<float>({1, 1}, {2})},
                               0);
  EXPECT_EQ(out[0].dtype(), DType::BFloat16);
  ASSERT_EQ(out[1].dtype(), DType::Float32);
  ASSERT_EQ(out[2].dtype(), DType::Float32);
  // momentum 0.5: half the old mean (0) plus half the batch mean (2.5 and 25).
  EXPECT_FLOAT_EQ(out[1].data<float>()[0], 1.25f);
  EXPECT_FLOAT_EQ(out[1].data<float>()[1], 12.5f);
  // y = (x - mean) / sqrt(var + eps): the first channel's first value, -1.5 / sqrt(1.25).
  EXPECT_NEAR(bfloat16_to_float(out[0].data<BHalf>()[0]), -1.5 / std::sqrt(1.25 + 1e-5), 1e-2);
}

// A widened op's float32 result is rounded back to 16 bits only where its schema types the output
// like a 16-bit input: Pow's Z follows its base X (T), not its exponent Y (T1). The output is left
// undeclared, so shape inference cannot type it and the schema's constraints must decide.
TEST(HalfCompute, AnOutputWhoseSchemaTypeFollowsAFloat32InputStaysFloat32) {
  Graph g;
  g.inputs = {"x", "e"};
  g.outputs = {"z"};
  g.value_info["e"] = {DType::BFloat16, std::vector<Dim>{{3, ""}}};
  g.add_node(Node{"pow", "Pow", "", {"x", "e"}, {"z"}, {}});
  InferenceSession session(g);
  const auto out = session.run({Tensor::from_vector<float>({1.5f, 2.0f, 3.0f}, {3}), bfloat16_tensor({3}, {2, 3, 0.5f})}, 0);
  ASSERT_EQ(out[0].dtype(), DType::Float32);
  EXPECT_FLOAT_EQ(out[0].data<float>()[0], 2.25f);
  EXPECT_FLOAT_EQ(out[0].data<float>()[1], 8.0f);
  EXPECT_FLOAT_EQ(out[0].data<float>()[2], std::sqrt(3.0f));
}

TEST(HalfCompute, AWidenedOpRoundsItsOutputBackToTheInputsType) {
  Graph g;
  g.inputs = {"x"};
  g.outputs = {"y"};
  g.value_info["x"] = {DType::BFloat16, std::vector<Dim>{{3, ""}}};
  g.add_node(Node{"r", "Relu", "", {"x"}, {"y"}, {}});
  InferenceSession session(g);
  const auto out = session.run({bfloat16_tensor({3}, {-1.0f, 0.5f, 3.0f})}, 0);
  ASSERT_EQ(out[0].dtype(), DType::BFloat16);
  EXPECT_EQ(bfloat16_to_float(out[0].data<BHalf>()[0]), 0.0f);
  EXPECT_EQ(bfloat16_to_float(out[0].data<BHalf>()[2]), 3.0f);
}

Tensor random_bfloat16(const TensorShape& shape, std::mt19937& gen) {
  std::normal_distribution<float> normal;
  std::vector<float> values(static_cast<size_t>(shape.numel()));
  for (float& v : values) v = normal(gen);
  return bfloat16_tensor(shape, values);
}

// One bfloat16 step apart at most: both accumulate the exact products of bfloat16 values in
// float32, in different orders, and round once.
void expect_within_one_bfloat16_step(const Tensor& actual, const std::vector<double>& exact, const char* what) {
  ASSERT_EQ(actual.dtype(), DType::BFloat16) << what;
  ASSERT_EQ(static_cast<size_t>(actual.numel()), exact.size()) << what;
  for (size_t i = 0; i < exact.size(); ++i) {
    const double got = bfloat16_to_float(actual.data<BHalf>()[i]);
    const double step = std::ldexp(1.0, std::ilogb(exact[i] == 0 ? 1e-30 : exact[i]) - 7);
    EXPECT_LE(std::fabs(got - exact[i]), step) << what << " element " << i << ": " << got << " against " << exact[i];
  }
}

// MatMul (batched, broadcast B) and Gemm (transposed B, a float32 C row) on bfloat16 operands,
// against the products computed in double from the same bfloat16 values.
TEST(HalfCompute, BfloatProductsRoundTheFloat32AccumulationOnce) {
  // Capped below bfloat16 instructions (ctest's half_compute_avx2 and half_compute_avx512_core),
  // the products must take the float32 path.
  if (const char* cap = std::getenv("ONEDNN_MAX_CPU_ISA");
      cap && (std::string(cap) == "AVX2" || std::string(cap) == "AVX512_CORE")) {
    EXPECT_FALSE(bfloat16_gemm_available());
  }
  std::mt19937 gen(3);
  const Tensor a = random_bfloat16({2, 3, 37}, gen), b = random_bfloat16({37, 5}, gen);
  Graph g;
  g.inputs = {"a", "b"};
  g.outputs = {"y"};
  g.value_info["a"] = {DType::BFloat16, std::vector<Dim>{{2, ""}, {3, ""}, {37, ""}}};
  g.value_info["b"] = {DType::BFloat16, std::vector<Dim>{{37, ""}, {5, ""}}};
  g.add_node(Node{"mm", "MatMul", "", {"a", "b"}, {"y"}, {}});
  const Tensor y = InferenceSession(g).run({a, b}, 0)[0];
  std::vector<double> exact(30, 0.0);
  for (int r = 0; r < 6; ++r)
    for (int c = 0; c < 5; ++c)
      for (int k = 0; k < 37; ++k)
        exact[static_cast<size_t>(r * 5 + c)] += double(bfloat16_to_float(a.data<BHalf>()[r * 37 + k])) *
                                                 bfloat16_to_float(b.data<BHalf>()[k * 5 + c]);
  expect_within_one_bfloat16_step(y, exact, "MatMul");

  const Tensor x = random_bfloat16({4, 19}, gen), w = random_bfloat16({6, 19}, gen);
  const Tensor bias = Tensor::from_vector<float>({0.5f, -1, 2, 0, 0.25f, 3}, {6});
  Graph h;
  h.inputs = {"x", "w", "bias"};
  h.outputs = {"y"};
  h.value_info["x"] = {DType::BFloat16, std::vector<Dim>{{4, ""}, {19, ""}}};
  h.value_info["w"] = {DType::BFloat16, std::vector<Dim>{{6, ""}, {19, ""}}};
  h.value_info["bias"] = {DType::Float32, std::vector<Dim>{{6, ""}}};
  h.add_node(Node{"gemm", "Gemm", "", {"x", "w", "bias"}, {"y"}, {{"transB", Attribute::of_int(1)}}});
  const Tensor z = InferenceSession(h).run({x, w, bias}, 0)[0];
  std::vector<double> exact_gemm(24, 0.0);
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 6; ++c) {
      double sum = bias.data<float>()[c];
      for (int k = 0; k < 19; ++k)
        sum += double(bfloat16_to_float(x.data<BHalf>()[r * 19 + k])) * bfloat16_to_float(w.data<BHalf>()[c * 19 + k]);
      exact_gemm[static_cast<size_t>(r * 6 + c)] = sum;
    }
  expect_within_one_bfloat16_step(z, exact_gemm, "Gemm");
}

}  // namespace
}  // namespace onnxtrain
