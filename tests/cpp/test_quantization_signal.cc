// Edges of the quantization kernels (src/ops/quantization) and the signal kernels
// (src/ops/signal) that ONNX's node tests do not reach: ties, saturation, per-axis parameters,
// and gradient requests, which these ops refuse by name.
#include <gtest/gtest.h>

#include <cmath>
#include <complex>

#include "session/training_session.h"
#include "tests/cpp/gradient_check.h"

namespace onnxtrain::testing {
namespace {

std::vector<Tensor> run_node(const std::string& op, const std::vector<Tensor>& inputs, int opset, AttributeMap attrs = {},
                             int outputs = 1) {
  Graph g;
  g.opsets = {{"", opset}};
  Node n{"node", op, "", {}, {}, std::move(attrs)};
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string name = "in" + std::to_string(i);
    n.inputs.push_back(name);
    g.inputs.push_back(name);
    std::vector<Dim> dims;
    for (int64_t d : inputs[i].shape()) dims.push_back({d, ""});
    g.value_info[name] = {inputs[i].dtype(), dims};
  }
  for (int o = 0; o < outputs; ++o) n.outputs.push_back("out" + std::to_string(o));
  g.outputs = n.outputs;
  g.add_node(n);
  return InferenceSession(g).run(inputs, 0);
}

template <typename T>
std::vector<double> values(const Tensor& t) {
  std::vector<double> out;
  for (int64_t i = 0; i < t.numel(); ++i) out.push_back(static_cast<double>(t.data<T>()[i]));
  return out;
}

Tensor f32(const std::vector<float>& v, const TensorShape& s) { return Tensor::from_vector(v, s); }

TEST(Quantization, QuantizeLinearRoundsHalfToEvenAndSaturates) {
  const Tensor x = f32({0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 300.f, -300.f}, {8});
  const Tensor y_u8 = run_node("QuantizeLinear", {x, Tensor::scalar<float>(1.0f), Tensor::scalar<uint8_t>(128)}, 13)[0];
  ASSERT_EQ(y_u8.dtype(), DType::UInt8);
  EXPECT_EQ(values<uint8_t>(y_u8), (std::vector<double>{128, 130, 130, 128, 126, 126, 255, 0}));
  const Tensor y_i8 = run_node("QuantizeLinear", {x, Tensor::scalar<float>(1.0f), Tensor::scalar<int8_t>(0)}, 13)[0];
  ASSERT_EQ(y_i8.dtype(), DType::Int8);
  EXPECT_EQ(values<int8_t>(y_i8), (std::vector<double>{0, 2, 2, -0, -2, -2, 127, -128}));
  // No zero point: uint8 with zero point 0, negatives saturate at 0.
  const Tensor y_default = run_node("QuantizeLinear", {f32({-1.f, 3.f}, {2}), Tensor::scalar<float>(2.0f)}, 13)[0];
  EXPECT_EQ(values<uint8_t>(y_default), (std::vector<double>{0, 2}));
  EXPECT_THROW(run_node("QuantizeLinear", {f32({NAN}, {1}), Tensor::scalar<float>(1.0f)}, 13), Error);
}

TEST(Quantization, PerAxisScalesAndZeroPoints) {
  // x [2, 3], per column (axis 1) and per row (axis 0).
  const Tensor x = Tensor::from_vector<int8_t>({10, 20, 30, -10, -20, -30}, {2, 3});
  const Tensor scale = f32({1.f, 0.5f, 2.f}, {3});
  const Tensor zp = Tensor::from_vector<int8_t>({0, 10, -10}, {3});
  const Tensor y = run_node("DequantizeLinear", {x, scale, zp}, 13, {{"axis", Attribute::of_int(1)}})[0];
  EXPECT_EQ(values<float>(y), (std::vector<double>{10, 5, 80, -10, -15, -40}));
  const Tensor y0 = run_node("DequantizeLinear", {x, f32({1.f, 2.f}, {2})}, 13, {{"axis", Attribute::of_int(0)}})[0];
  EXPECT_EQ(values<float>(y0), (std::vector<double>{10, 20, 30, -20, -40, -60}));
  const Tensor q = run_node("QuantizeLinear", {y, scale, zp}, 13, {{"axis", Attribute::of_int(-1)}})[0];
  EXPECT_EQ(values<int8_t>(q), values<int8_t>(x));  // round trip
  EXPECT_THROW(run_node("DequantizeLinear", {x, f32({1.f, 2.f}, {2})}, 13), Error);  // 2 scales, 3 columns
}

TEST(Quantization, MatMulIntegerBroadcastsBatchesWithPerRowZeroPoints) {
  // A [2, 2, 3] (two batches), B [3, 2]; a_zero_point per row of A.
  const Tensor a = Tensor::from_vector<uint8_t>({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {2, 2, 3});
  const Tensor b = Tensor::from_vector<uint8_t>({1, 0, 0, 1, 2, 2}, {3, 2});
  const Tensor azp = Tensor::from_vector<uint8_t>({1, 4}, {2});
  const Tensor y = run_node("MatMulInteger", {a, b, azp}, 10)[0];
  ASSERT_EQ(y.dtype(), DType::Int32);
  ASSERT_EQ(y.shape(), (TensorShape{2, 2, 2}));
  // Batch 0 row 0: (0, 1, 2) -> (0 + 4, 1 + 4); row 1: (0, 1, 2); batch 1: (6, 7, 8) and (6, 7, 8).
  EXPECT_EQ(values<int32_t>(y), (std::vector<double>{4, 5, 4, 5, 22, 23, 22, 23}));
}

TEST(Signal, DftMatchesTheDefinitionWithLengthAndOnesided) {
  // A real signal [1, 5, 1], zero-padded to 8 and onesided: 5 bins.
  const std::vector<float> s = {1.f, -2.f, 0.5f, 3.f, -1.f};
  const Tensor x = f32(s, {1, 5, 1});
  const Tensor y = run_node("DFT", {x, Tensor::scalar<int64_t>(8)}, 17, {{"onesided", Attribute::of_int(1)}})[0];
  ASSERT_EQ(y.shape(), (TensorShape{1, 5, 2}));
  for (int k = 0; k < 5; ++k) {
    std::complex<double> want = 0;
    for (int n = 0; n < 5; ++n) want += static_cast<double>(s[n]) * std::polar(1.0, -2 * M_PI * k * n / 8);
    EXPECT_NEAR(y.item_as_double(2 * k), want.real(), 1e-5) << k;
    EXPECT_NEAR(y.item_as_double(2 * k + 1), want.imag(), 1e-5) << k;
  }
  // Inverse of the full transform gives the signal back.
  const Tensor full = run_node("DFT", {x}, 17)[0];
  const Tensor back = run_node("DFT", {full}, 17, {{"inverse", Attribute::of_int(1)}})[0];
  for (int n = 0; n < 5; ++n) {
    EXPECT_NEAR(back.item_as_double(2 * n), s[n], 1e-5);
    EXPECT_NEAR(back.item_as_double(2 * n + 1), 0, 1e-5);
  }
}

// DFT and STFT have no gradient rules; asking for one must name the op, not return zeros.
TEST(Signal, GradientRequestsThroughDftAndStftAreRefused) {
  for (const char* op : {"DFT", "STFT"}) {
    Graph g;
    g.opsets = {{"", 17}};
    g.inputs = {"x"};
    g.value_info["x"] = {DType::Float32, std::vector<Dim>{{1, ""}, {16, ""}, {1, ""}}};
    Node n{"transform", op, "", {"x"}, {"y"}, {}};
    if (std::string(op) == "STFT") {
      g.add_initializer("step", Tensor::scalar<int64_t>(4));
      g.add_initializer("length", Tensor::scalar<int64_t>(8));
      n.inputs = {"x", "step", "", "length"};
    }
    g.add_node(n);
    g.outputs = {"y"};
    try {
      TrainingSession session(g, {{"x"}, {}, false});
      ADD_FAILURE() << op << ": a gradient through it was built";
    } catch (const UnsupportedError& e) {
      EXPECT_NE(std::string(e.what()).find(op), std::string::npos) << e.what();
    }
  }
}

TEST(Quantization, GradientRequestThroughDequantizeLinearScaleIsRefused) {
  Graph g;
  g.opsets = {{"", 13}};
  g.inputs = {"x", "scale"};
  g.value_info["x"] = {DType::UInt8, std::vector<Dim>{{4, ""}}};
  g.value_info["scale"] = {DType::Float32, std::vector<Dim>{}};
  g.add_node({"dq", "DequantizeLinear", "", {"x", "scale"}, {"y"}, {}});
  g.outputs = {"y"};
  EXPECT_THROW(TrainingSession(g, {{"scale"}, {}, false}), UnsupportedError);
}

}  // namespace
}  // namespace onnxtrain::testing
