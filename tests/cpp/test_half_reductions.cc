// Reductions that read 16-bit data themselves. ReduceSumTo (ops/reduction/reduce_sum_to.cc): the
// gradient of a broadcast input (a bias's, over the batch and the sequence) read as bfloat16 or
// float16, summed in float32 and rounded once; checked against double sums of the same 16-bit
// values, within half a rounding step, for each layout of reduced axes: the leading ones (a bias),
// the trailing ones, both, and none (the input itself). ReduceMax and ReduceMin: exactly the
// extremum of each group (a NaN wins), as attention's row maxima.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "opdef/op_registry.h"
#include "ops/common/reduce.h"
#include "tests/cpp/half_testing.h"

namespace onnxtrain {
namespace {

using half_testing::expect_rounded_once;
using half_testing::random_sixteen;
using half_testing::run_node;
using half_testing::value_at;

Tensor shape_tensor(const TensorShape& s) {
  std::vector<int64_t> v(s.begin(), s.end());
  return Tensor::from_vector<int64_t>(v, {s.rank()});
}

// Sums by the definition: each output element over the input elements that broadcast to it.
void check(DType type, const TensorShape& from, const TensorShape& to, std::mt19937& gen) {
  const std::string name = std::string(dtype_name(type)) + " " + from.str() + " -> " + to.str();
  const Tensor x = random_sixteen(type, from, gen);
  const Tensor y = run_node("ReduceSumTo", kOnnxTrainDomain, {}, {{"x", x}, {"shape", shape_tensor(to)}}, 1)[0];
  ASSERT_EQ(y.dtype(), type) << name;
  ASSERT_EQ(y.shape(), to) << name;
  std::vector<double> sums(static_cast<size_t>(to.numel()), 0.0), abs_sums(sums.size(), 0.0);
  const int offset = from.rank() - to.rank();
  for (int64_t i = 0; i < from.numel(); ++i) {
    int64_t rest = i, target = 0, stride = 1;
    for (int d = from.rank() - 1; d >= 0; --d) {
      const int64_t index = rest % from[d];
      rest /= from[d];
      const int td = d - offset;
      if (td < 0) continue;
      target += (to[td] == 1 ? 0 : index) * stride;
      stride *= to[td];
    }
    sums[static_cast<size_t>(target)] += value_at(x, i);
    abs_sums[static_cast<size_t>(target)] += std::fabs(value_at(x, i));
  }
  for (int64_t j = 0; j < to.numel(); ++j)
    expect_rounded_once(y, sums[static_cast<size_t>(j)], abs_sums[static_cast<size_t>(j)], j, name);
}

TEST(HalfReductions, SumsSixteenBitGradientsInFloat32AndRoundsOnce) {
  ASSERT_TRUE(OpRegistry::instance().computes_natively(kOnnxTrainDomain, "ReduceSumTo", DType::BFloat16));
  ASSERT_TRUE(OpRegistry::instance().computes_natively(kOnnxTrainDomain, "ReduceSumTo", DType::Float16));
  std::mt19937 gen(5);
  for (DType type : {DType::BFloat16, DType::Float16}) {
    check(type, {4, 33, 130}, {130}, gen);           // a bias: every leading axis
    check(type, {3, 5, 200}, {3, 1, 1}, gen);        // trailing axes, kept as 1
    check(type, {2, 6, 3, 70}, {6, 1, 70}, gen);     // a leading axis and a middle one
    check(type, {7, 300}, {7, 300}, gen);            // nothing to sum: the input itself
    check(type, {2, 4096}, {1}, gen);                // one long row
  }
}

// The extremum by the definition, NaN first.
void check_extremum(DType type, bool max, const TensorShape& shape, int axis, std::mt19937& gen) {
  const std::string name = std::string(max ? "ReduceMax " : "ReduceMin ") + dtype_name(type) + " " + shape.str();
  Tensor x = random_sixteen(type, shape, gen, 0.0f, 3.0f);
  if (type == DType::BFloat16) x.data<BHalf>()[7] = float_to_bfloat16(NAN);
  else x.data<Half>()[7] = float_to_half(NAN);
  const AttributeMap attrs{{"keepdims", Attribute::of_int(1)}, {"axes", Attribute::of_ints({axis})}};
  const Tensor y = run_node(max ? "ReduceMax" : "ReduceMin", "", attrs, {{"x", x}}, 1)[0];
  ASSERT_EQ(y.dtype(), type) << name;
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= shape[d];
  for (int d = axis + 1; d < shape.rank(); ++d) inner *= shape[d];
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t c = 0; c < inner; ++c) {
      double want = max ? -INFINITY : INFINITY;
      for (int64_t k = 0; k < shape[axis]; ++k) {
        const double v = value_at(x, (o * shape[axis] + k) * inner + c);
        want = std::isnan(v) || std::isnan(want) ? NAN : max ? std::max(want, v) : std::min(want, v);
      }
      const double got = value_at(y, o * inner + c);
      if (std::isnan(want)) EXPECT_TRUE(std::isnan(got)) << name << " group " << o << "," << c;
      else EXPECT_EQ(got, want) << name << " group " << o << "," << c;
    }
}

TEST(HalfReductions, ExtremaOfSixteenBitValuesAreExact) {
  std::mt19937 gen(6);
  for (DType type : {DType::BFloat16, DType::Float16})
    for (bool max : {true, false}) {
      ASSERT_TRUE(OpRegistry::instance().computes_natively("", max ? "ReduceMax" : "ReduceMin", type));
      check_extremum(type, max, {4, 3, 130}, 2, gen);  // rows, as attention's scores
      check_extremum(type, max, {4, 70, 5}, 1, gen);   // a middle axis
    }
}

}  // namespace
}  // namespace onnxtrain
