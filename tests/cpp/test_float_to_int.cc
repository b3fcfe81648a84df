// Float-to-integer conversions where C++ leaves the result undefined (NaN, infinities, values out
// of range): Cast and Pow with an integer base refuse them, naming the node, instead of giving
// whatever the CPU's conversion instruction returns.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/checked_math.h"
#include "session/training_session.h"

namespace onnxtrain {
namespace {

std::string run_error(Graph g, std::vector<Tensor> feeds) {
  try {
    InferenceSession(std::move(g)).run(feeds, 0);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

Graph one_node(const std::string& op, std::vector<std::pair<std::string, DType>> inputs, AttributeMap attrs) {
  Graph g;
  g.opsets[""] = 17;
  Node n{"the_node", op, "", {}, {"y"}, std::move(attrs)};
  for (const auto& [name, dtype] : inputs) {
    g.inputs.push_back(name);
    n.inputs.push_back(name);
    g.value_info[name] = {dtype, std::vector<Dim>{{2, ""}}};
  }
  g.outputs = {"y"};
  g.add_node(n);
  return g;
}

TEST(FloatToInt, BoundsAreTheTargetsRange) {
  bool bad = false;
  EXPECT_EQ(float_to_int<int64_t>(-9.2233720368547758e18, bad), std::numeric_limits<int64_t>::min());
  EXPECT_FALSE(bad);
  float_to_int<int64_t>(9.2233720368547758e18, bad);  // 2^63: one past the largest int64
  EXPECT_TRUE(bad);
  bad = false;
  EXPECT_EQ(float_to_int<int32_t>(-2147483648.0, bad), std::numeric_limits<int32_t>::min());
  EXPECT_EQ(float_to_int<uint8_t>(255.9f, bad), 255);
  EXPECT_EQ(float_to_int<int8_t>(-1.5, bad), -1);
  EXPECT_FALSE(bad);
  for (double v : {std::nan(""), double(INFINITY), -double(INFINITY), 256.0, -1.0}) {
    bad = false;
    float_to_int<uint8_t>(v, bad);
    EXPECT_TRUE(bad) << v;
  }
}

TEST(FloatToInt, CastOfNaNOrHugeToAnIntegerIsAnErrorNamingTheNode) {
  AttributeMap to_int64{{"to", Attribute::of_int(7)}};
  for (float v : {std::nanf(""), INFINITY, 1e30f}) {
    Tensor x = Tensor::from_vector(std::vector<float>{1.5f, v}, {2});
    const std::string error = run_error(one_node("Cast", {{"x", DType::Float32}}, to_int64), {x});
    EXPECT_NE(error.find("the_node"), std::string::npos) << error;
    EXPECT_NE(error.find("cannot convert to int64"), std::string::npos) << error;
  }
  Tensor fine = Tensor::from_vector(std::vector<float>{1.5f, -2.5f}, {2});
  Tensor y = InferenceSession(one_node("Cast", {{"x", DType::Float32}}, to_int64)).run({fine}, 0)[0];
  EXPECT_EQ(y.data<int64_t>()[0], 1);
  EXPECT_EQ(y.data<int64_t>()[1], -2);
}

TEST(FloatToInt, IntegerPowerThatIsNotAnIntegerIsAnError) {
  Tensor base = Tensor::from_vector(std::vector<int64_t>{0, 2}, {2});
  Tensor exponent = Tensor::from_vector(std::vector<float>{-1.5f, 3.0f}, {2});
  const std::string error =
      run_error(one_node("Pow", {{"x", DType::Int64}, {"e", DType::Float32}}, {}), {base, exponent});
  EXPECT_NE(error.find("the_node"), std::string::npos) << error;
  EXPECT_NE(error.find("Pow"), std::string::npos) << error;
  Tensor ok = Tensor::from_vector(std::vector<float>{0.5f, 3.0f}, {2});
  Tensor y = InferenceSession(one_node("Pow", {{"x", DType::Int64}, {"e", DType::Float32}}, {})).run({base, ok}, 0)[0];
  EXPECT_EQ(y.data<int64_t>()[0], 0);
  EXPECT_EQ(y.data<int64_t>()[1], 8);
}

}  // namespace
}  // namespace onnxtrain
