// Dropout, DropoutGrad and Where on 16-bit data read and write bfloat16 and float16 themselves
// (the executor no longer widens them): Dropout's mask is the one the float32 kernel draws for the
// same seed, and each output is the float32 product rounded once, as the widened path gave; Where
// moves values unchanged.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "opdef/op_registry.h"
#include "runtime/half_convert.h"
#include "runtime/thread_pool.h"
#include "tests/cpp/half_testing.h"

namespace onnxtrain {
namespace {

using half_testing::random_sixteen;
using half_testing::run_node;
using half_testing::value_at;

Tensor scalar_of(float v) { return Tensor::from_vector<float>({v}, {}); }
Tensor bool_scalar(bool v) {
  Tensor t = Tensor::empty(DType::Bool, {});
  t.data<bool>()[0] = v;
  return t;
}

TEST(HalfDropoutWhere, DropoutKeepsTheFloat32MaskAndRoundsEachProductOnce) {
  for (const char* op : {"Dropout", "DropoutGrad", "Where"})
    for (DType type : {DType::BFloat16, DType::Float16})
      EXPECT_TRUE(OpRegistry::instance().computes_natively(op == std::string("DropoutGrad") ? kOnnxTrainDomain : "",
                                                           op, type))
          << op << " " << dtype_name(type);
  std::mt19937 gen(3);
  ThreadPool pool(1);
  for (DType type : {DType::BFloat16, DType::Float16}) {
    const std::string name = dtype_name(type);
    const Tensor x = random_sixteen(type, {3, 1000}, gen);
    const auto sixteen = run_node("Dropout", "", {}, {{"x", x}, {"ratio", scalar_of(0.3f)}, {"training", bool_scalar(true)}}, 2);
    const auto wide = run_node("Dropout", "", {},
                               {{"x", widened_to_float32(pool, x)}, {"ratio", scalar_of(0.3f)}, {"training", bool_scalar(true)}}, 2);
    ASSERT_EQ(sixteen[0].dtype(), type) << name;
    int64_t kept = 0;
    for (int64_t i = 0; i < x.numel(); ++i) {
      ASSERT_EQ(sixteen[1].data<bool>()[i], wide[1].data<bool>()[i]) << name << " mask element " << i;
      kept += sixteen[1].data<bool>()[i];
      Tensor one = Tensor::empty(type, {1});
      const float product = wide[0].data<float>()[i];
      round_into(pool, &product, one);
      EXPECT_EQ(value_at(sixteen[0], i), value_at(one, 0)) << name << " element " << i;
    }
    EXPECT_NEAR(static_cast<double>(kept) / static_cast<double>(x.numel()), 0.7, 0.05) << name;
    // The gradient through the same mask.
    const Tensor dy = random_sixteen(type, {3, 1000}, gen);
    const Tensor dx = run_node("DropoutGrad", kOnnxTrainDomain, {},
                               {{"dy", dy}, {"mask", sixteen[1]}, {"ratio", scalar_of(0.3f)}}, 1)[0];
    const Tensor dx_wide = run_node("DropoutGrad", kOnnxTrainDomain, {},
                                    {{"dy", widened_to_float32(pool, dy)}, {"mask", sixteen[1]}, {"ratio", scalar_of(0.3f)}},
                                    1)[0];
    ASSERT_EQ(dx.dtype(), type) << name;
    for (int64_t i = 0; i < dy.numel(); ++i) {
      Tensor one = Tensor::empty(type, {1});
      round_into(pool, dx_wide.data<float>() + i, one);
      EXPECT_EQ(value_at(dx, i), value_at(one, 0)) << name << " gradient element " << i;
    }
  }
}

TEST(HalfDropoutWhere, WhereMovesSixteenBitValuesUnchanged) {
  std::mt19937 gen(4);
  for (DType type : {DType::BFloat16, DType::Float16}) {
    // A mask per row against full rows and a scalar fill, as attention's fully-masked rows.
    const Tensor y = random_sixteen(type, {4, 3, 50}, gen), fill = random_sixteen(type, {}, gen);
    Tensor cond = Tensor::empty(DType::Bool, {4, 3, 1});
    for (int64_t i = 0; i < cond.numel(); ++i) cond.data<bool>()[i] = i % 3 == 1;
    const Tensor out = run_node("Where", "", {}, {{"c", cond}, {"x", fill}, {"y", y}}, 1)[0];
    ASSERT_EQ(out.dtype(), type);
    for (int64_t i = 0; i < out.numel(); ++i) {
      const bool take_fill = cond.data<bool>()[i / 50];
      EXPECT_EQ(value_at(out, i), take_fill ? value_at(fill, 0) : value_at(y, i)) << dtype_name(type) << " " << i;
    }
  }
}

}  // namespace
}  // namespace onnxtrain
