// The numerics audit (audit/node_audit.h): the single-node float64 runner against hand-computed
// results, and errors that must be flagged (an injected 1e-3) or must not (cancellation, ties).
#include <gtest/gtest.h>

#include <cmath>

#include "audit/audit_compare.h"
#include "audit/batch_norm_terms.h"
#include "audit/node_audit.h"
#include "session/training_session.h"
#include "tests/cpp/gradient_check.h"
#include "tests/cpp/mlp_graph.h"

namespace onnxtrain::testing {
namespace {

using audit::audit_node;
using audit::run_node_alone;

Graph context_of(const Node& node) {
  Graph g;
  g.nodes.push_back(node);
  return g;
}

Tensor doubles(std::vector<double> values, const TensorShape& shape) { return Tensor::from_vector(values, shape); }

void expect_values(const Tensor& t, const std::vector<double>& expected) {
  ASSERT_EQ(t.numel(), static_cast<int64_t>(expected.size())) << t.str();
  for (int64_t i = 0; i < t.numel(); ++i) EXPECT_DOUBLE_EQ(t.item_as_double(i), expected[i]) << "element " << i;
}

// The engine's own float32 result of `node`: what the executor would have computed.
std::vector<Tensor> float32_run(const Node& node, const std::vector<Tensor>& inputs, uint64_t seed = 0) {
  return run_node_alone(node, context_of(node), inputs, seed);
}

TEST(NodeAudit, RunsGemmAloneInFloat64) {
  const Node gemm{"fc", "Gemm", "", {"a", "b", "c"}, {"y"}, {{"transB", Attribute::of_int(1)},
                                                            {"alpha", Attribute::of_float(2.0f)}}};
  // a [2x3], b [2x3] (transposed: y = 2 * a b^T + c), c [2].
  const auto out = run_node_alone(gemm, context_of(gemm),
                                  {doubles({1, 2, 3, 4, 5, 6}, {2, 3}), doubles({1, 0, -1, 0.5, 0.25, 0}, {2, 3}),
                                   doubles({10, 20}, {2})},
                                  0);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].dtype(), DType::Float64);
  // Row 0: 2*(1-3) + 10 = 6; 2*(0.5+0.5) + 20 = 22. Row 1: 2*(4-6) + 10 = 6; 2*(2+1.25) + 20 = 26.5.
  expect_values(out[0], {6, 22, 6, 26.5});
}

TEST(NodeAudit, RunsConvAloneInFloat64) {
  const Node conv{"conv", "Conv", "", {"x", "w"}, {"y"}, {}};
  // x [1,1,3,3] = 1..9, w [1,1,2,2] = [[1,0],[0,-1]]: y[i][j] = x[i][j] - x[i+1][j+1] = -4 everywhere.
  const auto out = run_node_alone(conv, context_of(conv),
                                  {doubles({1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 1, 3, 3}), doubles({1, 0, 0, -1}, {1, 1, 2, 2})},
                                  0);
  EXPECT_EQ(out[0].shape(), TensorShape({1, 1, 2, 2}));
  expect_values(out[0], {-4, -4, -4, -4});
}

TEST(NodeAudit, RunsMaxPoolWithIndicesAlone) {
  const Node pool{"pool", "MaxPool", "", {"x"}, {"y", "i"}, {{"kernel_shape", Attribute::of_ints({2, 2})}}};
  const auto out = run_node_alone(pool, context_of(pool), {doubles({1, 7, 3, 4, 9, 2, 5, 0, 8}, {1, 1, 3, 3})}, 0);
  expect_values(out[0], {9, 9, 9, 9});
  expect_values(out[1], {4, 4, 4, 4});
}

TEST(NodeAudit, CleanMatMulIsAtFloat32RoundingAndAnInjectedErrorIsFlagged) {
  const Node matmul{"mm", "MatMul", "", {"a", "b"}, {"y"}, {}};
  const std::vector<Tensor> inputs = {random_tensor(DType::Float32, {16, 64}, 1), random_tensor(DType::Float32, {64, 8}, 2)};
  std::vector<Tensor> engine = float32_run(matmul, inputs);
  const auto clean = audit_node(matmul, context_of(matmul), inputs, engine, 0);
  ASSERT_TRUE(clean.rel_error.has_value()) << clean.reason;
  EXPECT_LT(*clean.rel_error, 1e-6);
  EXPECT_EQ(clean.normalization, "sum_of_terms");

  // 1e-3 of the sum of |terms| of element 5 added to it: its error is exactly that, relative.
  Tensor perturbed = engine[0].clone();
  const Tensor terms = run_node_alone(matmul, context_of(matmul),
                                      {audit::absolute(audit::widen_to_float64(inputs[0])),
                                       audit::absolute(audit::widen_to_float64(inputs[1]))},
                                      0)[0];
  perturbed.data<float>()[5] += static_cast<float>(1e-3 * terms.item_as_double(5));
  const auto flagged = audit_node(matmul, context_of(matmul), inputs, {perturbed}, 0);
  ASSERT_TRUE(flagged.rel_error.has_value());
  EXPECT_NEAR(*flagged.rel_error, 1e-3, 2e-5);
}

TEST(NodeAudit, InjectedErrorInAConvOutputIsFlagged) {
  const Node conv{"conv", "Conv", "", {"x", "w", "b"}, {"y"}, {{"pads", Attribute::of_ints({1, 1, 1, 1})}}};
  const std::vector<Tensor> inputs = {random_tensor(DType::Float32, {2, 8, 9, 9}, 3, 0.1, 1),
                                      random_tensor(DType::Float32, {4, 8, 3, 3}, 4, 0.1, 1),
                                      random_tensor(DType::Float32, {4}, 5, 0.1, 1)};
  std::vector<Tensor> engine = float32_run(conv, inputs);  // oneDNN or the float32 im2col path
  const auto clean = audit_node(conv, context_of(conv), inputs, engine, 0);
  ASSERT_TRUE(clean.rel_error.has_value()) << clean.reason;
  EXPECT_LT(*clean.rel_error, 1e-6);
  // Positive operands: the sum of |terms| is the output itself.
  engine[0].data<float>()[17] *= 1.001f;
  const auto flagged = audit_node(conv, context_of(conv), inputs, engine, 0);
  EXPECT_NEAR(*flagged.rel_error, 1e-3, 2e-5);
}

TEST(NodeAudit, ElementwiseErrorIsRelativeToTheOutputScale) {
  const Node tanh{"t", "Tanh", "", {"x"}, {"y"}, {}};
  const std::vector<Tensor> inputs = {random_tensor(DType::Float32, {100}, 6, -3, 3)};
  std::vector<Tensor> engine = float32_run(tanh, inputs);
  const auto clean = audit_node(tanh, context_of(tanh), inputs, engine, 0);
  EXPECT_LT(*clean.rel_error, 1e-6);
  EXPECT_EQ(clean.normalization, "output_scale");
  double max_abs = 0;
  for (int64_t i = 0; i < 100; ++i) max_abs = std::max(max_abs, std::fabs(engine[0].item_as_double(i)));
  engine[0].data<float>()[3] += static_cast<float>(1e-3 * max_abs);
  EXPECT_NEAR(*audit_node(tanh, context_of(tanh), inputs, engine, 0).rel_error, 1e-3, 2e-5);
}

TEST(NodeAudit, CancellationInASumIsNoFailure) {
  // A bias gradient before BatchNorm: terms that cancel to (nearly) zero in exact arithmetic. The
  // float32 sum is rounding noise against an exact value near zero; scaled by the sum of |terms|
  // it is at float32 rounding, where relative to the output it would read as 100% wrong.
  const Node grad_b{"db", "ConvGradB", kOnnxTrainDomain, {"dy"}, {"db"}, {}};
  Tensor dy = random_tensor(DType::Float32, {4, 3, 5, 5}, 7);
  float* p = dy.data<float>();
  for (int64_t c = 0; c < 3; ++c) {  // the last element of each channel cancels the rest in float32
    double sum = 0;
    for (int64_t n = 0; n < 4; ++n)
      for (int64_t i = 0; i < 25; ++i)
        if (n != 3 || i != 24) sum += p[(n * 3 + c) * 25 + i];
    p[(3 * 3 + c) * 25 + 24] = static_cast<float>(-sum);
  }
  std::vector<Tensor> engine = float32_run(grad_b, {dy});
  // The engine's result as a float32 kernel with a float accumulator would give it.
  for (int64_t c = 0; c < 3; ++c) engine[0].data<float>()[c] += 3e-7f;
  const auto row = audit_node(grad_b, context_of(grad_b), {dy}, engine, 0);
  ASSERT_TRUE(row.rel_error.has_value());
  EXPECT_LT(*row.rel_error, 1e-6);
  EXPECT_GT(audit::output_error(audit::ErrorScale::OutputScale, engine[0],
                                run_node_alone(grad_b, context_of(grad_b), {audit::widen_to_float64(dy)}, 0)[0]),
            0.1);
}

TEST(NodeAudit, BatchNormMeansAndSumsAreJudgedOnTheirTerms) {
  // Channels whose values average to zero, as after a 1x1 convolution of normalized activations:
  // the batch mean is rounding noise, and must read as rounding, not as a wrong kernel.
  const Node bn{"bn", "BatchNormalization", "", {"x", "s", "b", "m", "v"}, {"y", "running_mean", "running_var"},
                {{"training_mode", Attribute::of_int(1)}}};
  Tensor x = random_tensor(DType::Float32, {2, 3, 4, 4}, 13);
  float* p = x.data<float>();
  for (int64_t c = 0; c < 3; ++c) {
    double sum = 0;
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t i = 0; i < 16; ++i) sum += p[(n * 3 + c) * 16 + i];
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t i = 0; i < 16; ++i) p[(n * 3 + c) * 16 + i] -= static_cast<float>(sum / 32);
  }
  const std::vector<Tensor> inputs = {x, random_tensor(DType::Float32, {3}, 14), random_tensor(DType::Float32, {3}, 15),
                                      Tensor::zeros(DType::Float32, {3}), Tensor::zeros(DType::Float32, {3})};
  std::vector<Tensor> engine = float32_run(bn, inputs);
  for (int64_t c = 0; c < 3; ++c) engine[1].data<float>()[c] += 1e-9f;  // noise on a mean near zero
  const auto row = audit_node(bn, context_of(bn), inputs, engine, 0);
  ASSERT_TRUE(row.rel_error.has_value()) << row.reason;
  EXPECT_LT(*row.rel_error, 1e-6) << row.worst_output;

  const Node grad{"bng", "BatchNormGrad", kOnnxTrainDomain, {"dy", "x", "s"}, {"dx", "dscale", "db"}, {}};
  const std::vector<Tensor> grad_inputs = {random_tensor(DType::Float32, {2, 3, 4, 4}, 16), x, inputs[1]};
  std::vector<Tensor> grads = float32_run(grad, grad_inputs);
  EXPECT_LT(*audit_node(grad, context_of(grad), grad_inputs, grads, 0).rel_error, 1e-6);
  // dscale off by 1e-3 of its terms in channel 0: flagged at that size.
  const Tensor wide_dy = audit::widen_to_float64(grad_inputs[0]), wide_x = audit::widen_to_float64(x);
  const double terms = audit::batch_norm_scale_grad_terms(wide_dy, wide_x, Tensor(), Tensor(), 1e-5).item_as_double(0);
  grads[1].data<float>()[0] += static_cast<float>(1e-3 * terms);
  EXPECT_NEAR(*audit_node(grad, context_of(grad), grad_inputs, grads, 0).rel_error, 1e-3, 2e-5);
}

// Two values per channel (a batch of 2 on a 1x1 map), nearly equal and far from zero, so that the
// variance is below epsilon and inv_std near 1/sqrt(epsilon): Y = a_c * x + d_c cancels terms
// hundreds of times larger than Y itself. Rounding of that size is no kernel error; 1e-3 of the
// terms still is.
struct TwoValueChannels {
  TwoValueChannels() {
    x = Tensor::empty(DType::Float32, {2, 4, 1, 1});
    for (int64_t c = 0; c < 4; ++c) {
      const float base = 1.5f + 0.37f * static_cast<float>(c);
      x.data<float>()[c] = base;
      x.data<float>()[4 + c] = base + 1e-3f * static_cast<float>(c + 1);
    }
    scale = random_tensor(DType::Float32, {4}, 31);
    bias = random_tensor(DType::Float32, {4}, 32);
  }
  Tensor x, scale, bias;
};

TEST(NodeAudit, BatchNormOfTwoNearlyEqualValuesIsJudgedOnItsTerms) {
  const TwoValueChannels data;
  const Node bn{"bn", "BatchNormTraining", kOnnxTrainDomain, {"x", "s", "b", "rm", "rv"},
                {"y", "running_mean", "running_var", "saved_mean", "saved_inv_std"}, {}};
  const std::vector<Tensor> inputs = {data.x, data.scale, data.bias, Tensor::zeros(DType::Float32, {4}),
                                      Tensor::from_vector(std::vector<float>(4, 1.0f), {4})};
  std::vector<Tensor> engine = float32_run(bn, inputs);
  const std::vector<Tensor> wide = {audit::widen_to_float64(data.x), audit::widen_to_float64(data.scale),
                                    audit::widen_to_float64(data.bias)};
  const Tensor twin = run_node_alone(bn, context_of(bn), {wide[0], wide[1], wide[2], audit::widen_to_float64(inputs[3]),
                                                          audit::widen_to_float64(inputs[4])}, 0)[0];
  // The conditioning this test is about: scaled by max |Y|, the kernel's rounding is above 1e-6.
  EXPECT_GT(audit::output_error(audit::ErrorScale::OutputScale, engine[0], twin), 1e-6);
  auto row = audit_node(bn, context_of(bn), inputs, engine, 0);
  ASSERT_TRUE(row.rel_error.has_value()) << row.reason;
  EXPECT_LT(*row.rel_error, 1e-6) << row.worst_output;
  EXPECT_EQ(row.normalization, "sum_of_terms");
  const Tensor terms = audit::batch_norm_output_terms(wide[0], wide[1], wide[2], 1e-5);
  engine[0].data<float>()[5] += static_cast<float>(1e-3 * terms.item_as_double(5));
  EXPECT_NEAR(*audit_node(bn, context_of(bn), inputs, engine, 0).rel_error, 1e-3, 2e-5);
}

TEST(NodeAudit, BatchNormGradOfTwoNearlyEqualValuesIsJudgedOnItsTerms) {
  const TwoValueChannels data;
  const Node grad{"bng", "BatchNormGrad", kOnnxTrainDomain, {"dy", "x", "s"}, {"dx", "dscale", "db"}, {}};
  const std::vector<Tensor> inputs = {random_tensor(DType::Float32, {2, 4, 1, 1}, 33), data.x, data.scale};
  std::vector<Tensor> engine = float32_run(grad, inputs);
  auto row = audit_node(grad, context_of(grad), inputs, engine, 0);
  ASSERT_TRUE(row.rel_error.has_value()) << row.reason;
  EXPECT_LT(*row.rel_error, 1e-6) << row.worst_output;
  const Tensor wide_dy = audit::widen_to_float64(inputs[0]), wide_x = audit::widen_to_float64(data.x);
  const Tensor terms =
      audit::batch_norm_input_grad_terms(wide_dy, wide_x, audit::widen_to_float64(data.scale), Tensor(), Tensor(), 1e-5);
  engine[0].data<float>()[2] += static_cast<float>(1e-3 * terms.item_as_double(2));
  row = audit_node(grad, context_of(grad), inputs, engine, 0);
  EXPECT_NEAR(*row.rel_error, 1e-3, 2e-5);
  EXPECT_EQ(row.worst_output, "dx");
}

TEST(NodeAudit, LayerNormMeanOfNormalizedRowsIsJudgedOnItsTerms) {
  // Rows that already average to zero: the Mean output is rounding noise, not a wrong kernel; a
  // Mean off by 1e-3 of its terms is flagged at that size.
  const Node ln{"ln", "LayerNormalization", "", {"x", "s", "b"}, {"y", "mean", "inv_std"},
                {{"axis", Attribute::of_int(-1)}, {"epsilon", Attribute::of_float(1e-6f)}}};
  Tensor x = random_tensor(DType::Float32, {6, 16}, 21);
  float* p = x.data<float>();
  for (int64_t r = 0; r < 6; ++r) {
    double sum = 0;
    for (int64_t i = 0; i < 16; ++i) sum += p[r * 16 + i];
    for (int64_t i = 0; i < 16; ++i) p[r * 16 + i] -= static_cast<float>(sum / 16);
  }
  const std::vector<Tensor> inputs = {x, random_tensor(DType::Float32, {16}, 22), random_tensor(DType::Float32, {16}, 23)};
  std::vector<Tensor> engine = float32_run(ln, inputs);
  for (int64_t r = 0; r < 6; ++r) engine[1].data<float>()[r] += 1e-9f;
  const auto row = audit_node(ln, context_of(ln), inputs, engine, 0);
  ASSERT_TRUE(row.rel_error.has_value()) << row.reason;
  EXPECT_LT(*row.rel_error, 1e-6) << row.worst_output;
  double terms = 0;  // mean(|x|) of row 0: the Mean's own scale
  for (int64_t i = 0; i < 16; ++i) terms += std::fabs(p[i]) / 16;
  engine[1].data<float>()[0] += static_cast<float>(1e-3 * terms);
  EXPECT_NEAR(*audit_node(ln, context_of(ln), inputs, engine, 0).rel_error, 1e-3, 2e-5);
}

TEST(NodeAudit, AFlippedIndexBetweenEqualValuesIsNoErrorAndAWrongOneIs) {
  const Node argmax{"am", "ArgMax", "", {"x"}, {"i"}, {{"axis", Attribute::of_int(1)}}};
  const std::vector<Tensor> inputs = {Tensor::from_vector<float>({1, 3, 3, 5, 4, 0}, {2, 3})};
  std::vector<Tensor> engine = float32_run(argmax, inputs);
  expect_values(engine[0], {1, 0});
  engine[0].data<int64_t>()[0] = 2;  // the other 3: a tie, the same value
  const auto tie = audit_node(argmax, context_of(argmax), inputs, engine, 0);
  EXPECT_EQ(*tie.rel_error, 0.0);
  EXPECT_EQ(tie.normalization, "selected_value");
  engine[0].data<int64_t>()[1] = 1;  // 4 instead of 5: a wrong decision, off by 1 of max |x| = 5
  EXPECT_NEAR(*audit_node(argmax, context_of(argmax), inputs, engine, 0).rel_error, 0.2, 1e-12);
}

TEST(NodeAudit, IntegerOutputsCompareExactly) {
  const Node shape{"s", "Shape", "", {"x"}, {"shape"}, {}};
  const std::vector<Tensor> inputs = {random_tensor(DType::Float32, {2, 3, 4}, 8)};
  std::vector<Tensor> engine = float32_run(shape, inputs);
  EXPECT_EQ(*audit_node(shape, context_of(shape), inputs, engine, 0).rel_error, 0.0);
  engine[0].data<int64_t>()[1] = 7;
  const auto row = audit_node(shape, context_of(shape), inputs, engine, 0);
  EXPECT_NEAR(*row.rel_error, 1.0 / 3.0, 1e-12);
  EXPECT_EQ(row.normalization, "exact");
}

TEST(NodeAudit, DropoutIsRecomputedWithTheRunsDraws) {
  const Node dropout{"drop", "Dropout", "", {"x", "ratio", "training"}, {"y", "mask"}, {}};
  const std::vector<Tensor> inputs = {random_tensor(DType::Float32, {64}, 9), Tensor::scalar<float>(0.5f),
                                      Tensor::scalar<bool>(true)};
  const uint64_t seed = single_node_run_seed(1234, 7);  // node 7 of a run seeded 1234
  const std::vector<Tensor> engine = float32_run(dropout, inputs, seed);
  const auto same = audit_node(dropout, context_of(dropout), inputs, engine, seed);
  EXPECT_EQ(*same.rel_error, 0.0) << same.worst_output;
  EXPECT_NE(same.reason.find("random"), std::string::npos);
  // Other draws: the masks differ, which the exact comparison of the mask shows.
  const auto other = audit_node(dropout, context_of(dropout), inputs, engine, seed + 1);
  EXPECT_GT(*other.rel_error, 0.1);
}

TEST(NodeAudit, NodesWithoutAFloat64TwinSayWhy) {
  const Node quantize{"q", "DynamicQuantizeLinear", "", {"x"}, {"y", "scale", "zero"}, {}};
  const std::vector<Tensor> inputs = {random_tensor(DType::Float32, {8}, 10)};
  const auto row = audit_node(quantize, context_of(quantize), inputs, float32_run(quantize, inputs), 0);
  EXPECT_FALSE(row.rel_error.has_value());
  EXPECT_NE(row.reason.find("no float64 twin"), std::string::npos) << row.reason;
  EXPECT_NE(row.reason.find("DynamicQuantizeLinear"), std::string::npos) << row.reason;

  Node python_op{"fn", "PythonOp", kOnnxTrainDomain, {"x"}, {"y"}, {}};
  const auto user_code = audit_node(python_op, context_of(python_op), inputs, inputs, 0);
  EXPECT_FALSE(user_code.rel_error.has_value());
  EXPECT_NE(user_code.reason.find("user code"), std::string::npos);
}

TEST(NodeAudit, ObserverJudgesEveryNodeOfATrainingStep) {
  TrainingSession session(mlp_graph(), {{"x", "w1", "b1", "w2", "b2"}, {}, false});
  const std::vector<Tensor> feeds = {random_tensor(DType::Float32, {5, 8}, 11), random_tensor(DType::Float32, {16, 8}, 2),
                                     random_tensor(DType::Float32, {16}, 3), random_tensor(DType::Float32, {4, 16}, 4),
                                     random_tensor(DType::Float32, {4}, 5)};
  auto observer = std::make_shared<audit::AuditObserver>();
  std::vector<Tensor> out;
  auto call = session.forward(feeds, 0, out, observer);
  session.backward(*call, {random_tensor(DType::Float32, {5, 4}, 12)});
  EXPECT_EQ(observer->rows().size(), session.program().nodes().size());
  bool saw_backward = false;
  for (const auto& row : observer->rows()) {
    ASSERT_TRUE(row.rel_error.has_value()) << row.op_type << " " << row.node << ": " << row.reason;
    EXPECT_LT(*row.rel_error, 1e-6) << row.op_type << " " << row.node;
    saw_backward = saw_backward || row.phase == "backward";
  }
  EXPECT_TRUE(saw_backward);
}

}  // namespace
}  // namespace onnxtrain::testing
