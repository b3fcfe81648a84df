// 16-bit floats in the executor (runtime/half_compute.h): ops that handle a 16-bit type say so in
// their own registration; every other op's 16-bit inputs are widened to float32, and each output
// is rounded back to the 16-bit type unless its schema type follows a float32 input.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "core/half.h"
#include "ops/registry.h"
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
// Y follows X and is rounded to bfloat16, the running statistics follow the float32 mean and var
// and stay float32. The statistics are left undeclared here, so shape inference cannot type the
// outputs and the schema's type constraints (T for X and Y, T2 for the statistics) must decide.
TEST(HalfCompute, AnOutputWhoseSchemaTypeFollowsAFloat32InputStaysFloat32) {
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

}  // namespace
}  // namespace onnxtrain
