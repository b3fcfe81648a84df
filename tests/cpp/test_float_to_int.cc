// Float-to-integer conversions where C++ leaves the result undefined (NaN, infinities, values out
// of range): Cast gives what PyTorch gives on x86 where torch has such a result (the signed types,
// uint8, uint16) and refuses the rest naming the node, as Pow with an integer base does.
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

TEST(FloatToInt, CastOfNaNOrHugeGivesWhatTorchGivesOnThisCpu) {
  // torch: int64 and int32 take their minimum; the narrow types keep the low bits of the int32.
  const std::vector<float> values{std::nanf(""), INFINITY, -INFINITY, 1e30f, 70000.0f, -1.0f, -129.5f, 2.5f};
  Tensor x = Tensor::from_vector(values, {static_cast<int64_t>(values.size())});
  auto cast = [&](int64_t to) {
    Graph g = one_node("Cast", {{"x", DType::Float32}}, {{"to", Attribute::of_int(to)}});
    g.value_info["x"].shape = std::vector<Dim>{{static_cast<int64_t>(values.size()), ""}};
    return InferenceSession(std::move(g)).run({x}, 0)[0];
  };
  const int64_t lo64 = std::numeric_limits<int64_t>::min();
  const std::vector<int64_t> want64{lo64, lo64, lo64, lo64, 70000, -1, -129, 2};
  Tensor y64 = cast(7);
  for (size_t i = 0; i < values.size(); ++i) EXPECT_EQ(y64.data<int64_t>()[i], want64[i]) << i;
  const int32_t lo32 = std::numeric_limits<int32_t>::min();
  const std::vector<int32_t> want32{lo32, lo32, lo32, lo32, 70000, -1, -129, 2};
  Tensor y32 = cast(6);
  for (size_t i = 0; i < values.size(); ++i) EXPECT_EQ(y32.data<int32_t>()[i], want32[i]) << i;
  const std::vector<int16_t> want16{0, 0, 0, 0, 4464, -1, -129, 2};
  Tensor y16 = cast(5);
  for (size_t i = 0; i < values.size(); ++i) EXPECT_EQ(y16.data<int16_t>()[i], want16[i]) << i;
  const std::vector<int8_t> want8{0, 0, 0, 0, 112, -1, 127, 2};
  Tensor y8 = cast(3);
  for (size_t i = 0; i < values.size(); ++i) EXPECT_EQ(y8.data<int8_t>()[i], want8[i]) << i;
  const std::vector<uint8_t> wantu8{0, 0, 0, 0, 112, 255, 127, 2};
  Tensor yu8 = cast(2);
  for (size_t i = 0; i < values.size(); ++i) EXPECT_EQ(yu8.data<uint8_t>()[i], wantu8[i]) << i;
}

TEST(FloatToInt, CastOfNaNOrHugeToUint32IsAnErrorNamingTheNode) {
  AttributeMap to_uint32{{"to", Attribute::of_int(12)}};
  for (float v : {std::nanf(""), INFINITY, 1e30f, -1.0f}) {
    Tensor x = Tensor::from_vector(std::vector<float>{1.5f, v}, {2});
    const std::string error = run_error(one_node("Cast", {{"x", DType::Float32}}, to_uint32), {x});
    EXPECT_NE(error.find("the_node"), std::string::npos) << error;
    EXPECT_NE(error.find("cannot convert to uint32"), std::string::npos) << error;
  }
  Tensor fine = Tensor::from_vector(std::vector<float>{1.5f, 2.5f}, {2});
  Tensor y = InferenceSession(one_node("Cast", {{"x", DType::Float32}}, to_uint32)).run({fine}, 0)[0];
  EXPECT_EQ(y.data<uint32_t>()[0], 1u);
  EXPECT_EQ(y.data<uint32_t>()[1], 2u);
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
