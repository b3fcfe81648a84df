// Finite-difference cases for src/ops/loss: SoftmaxCrossEntropyLoss (ONNX and ai.onnxtrain with
// label smoothing) and NegativeLogLikelihoodLoss, over [N, C] and [N, C, d...] layouts, every
// reduction, weights, ignore_index and the log_prob output. Plus forward checks of the label
// smoothing against values PyTorch 1.13 computed.
#include <gtest/gtest.h>

#include <cmath>

#include "session/training_session.h"
#include "tests/cpp/gradient_check.h"

namespace onnxtrain::testing {
namespace {

constexpr DType F64 = DType::Float64;

Tensor r(const TensorShape& s, uint64_t seed, double lo = -2, double hi = 2) { return random_tensor(F64, s, seed, lo, hi); }

AttributeMap loss_attrs(const char* reduction, bool ignore = false, int64_t ignore_index = -1, float smoothing = -1) {
  AttributeMap a{{"reduction", Attribute::of_string(reduction)}};
  if (ignore) a["ignore_index"] = Attribute::of_int(ignore_index);
  if (smoothing >= 0) a["label_smoothing"] = Attribute::of_float(smoothing);
  return a;
}

const std::vector<bool> kScoresOnly = {true, false, false};

std::vector<GradCase> cases() {
  std::vector<GradCase> c;
  const Tensor none;
  const Tensor w4 = r({4}, 1, 0.5, 2), w3 = r({3}, 2, 0.5, 2), w130 = r({130}, 3, 0.5, 2);
  const std::string sce = "SoftmaxCrossEntropyLoss", nll = "NegativeLogLikelihoodLoss";
  // [N, C] rows, labels with ignore_index -1 where set.
  const Tensor y5 = int64_tensor({3, 0, 1, 3, 2}, {5});
  const Tensor y5_ii = int64_tensor({3, -1, 1, 3, -1}, {5});
  // [N, C, d] and [N, C, d1, d2] (the strided path).
  const Tensor y32 = int64_tensor({0, 2, 1, 1, 2, 0}, {3, 2});
  const Tensor y32_ii = int64_tensor({0, 5, 1, 5, 2, 0}, {3, 2});
  const Tensor y2x2 = int64_tensor({0, 1, 2, -1, 2, 2, 0, -1}, {2, 2, 2});

  c.push_back({"SoftmaxCrossEntropyLoss_mean_NC", sce, "", loss_attrs("mean"), {r({5, 4}, 10), y5}});
  c.push_back({"SoftmaxCrossEntropyLoss_sum_weights_ii", sce, "", loss_attrs("sum", true, -1),
               {r({5, 4}, 11), y5_ii, w4}, kScoresOnly});
  c.push_back({"SoftmaxCrossEntropyLoss_none_NCd", sce, "", loss_attrs("none"), {r({3, 3, 2}, 12), y32}});
  c.push_back({"SoftmaxCrossEntropyLoss_mean_weights_ii_NCd1d2", sce, "", loss_attrs("mean", true, -1),
               {r({2, 3, 2, 2}, 13), y2x2, w3}, kScoresOnly});
  c.push_back({"SoftmaxCrossEntropyLoss_mean_log_prob", sce, "", loss_attrs("mean", true, -1),
               {r({5, 4}, 14), y5_ii}, {}, 2});
  c.push_back({"SoftmaxCrossEntropyLoss_none_log_prob_NCd", sce, "", loss_attrs("none", true, 5),
               {r({3, 3, 2}, 15), y32_ii, w3}, kScoresOnly, 2});
  c.push_back({"SoftmaxCrossEntropyLoss_wide_rows", sce, "", loss_attrs("mean"),
               {r({3, 130}, 16), int64_tensor({7, 129, 64}, {3}), w130}, kScoresOnly});
  c.push_back({"SoftmaxCrossEntropyLoss_opset13", sce, "", loss_attrs("sum"), {r({5, 4}, 17), y5}, {}, 1, 13});

  // ai.onnxtrain's op: label smoothing with every reduction, weights and ignore_index.
  c.push_back({"SoftmaxCrossEntropyLoss_smoothing_mean_weights_ii", sce, "ai.onnxtrain",
               loss_attrs("mean", true, -1, 0.1f), {r({5, 4}, 20), y5_ii, w4}, kScoresOnly});
  c.push_back({"SoftmaxCrossEntropyLoss_smoothing_sum", sce, "ai.onnxtrain", loss_attrs("sum", false, 0, 0.3f),
               {r({5, 4}, 21), y5}});
  c.push_back({"SoftmaxCrossEntropyLoss_smoothing_none_NCd_weights", sce, "ai.onnxtrain",
               loss_attrs("none", true, 5, 0.2f), {r({3, 3, 2}, 22), y32_ii, w3}, kScoresOnly});
  c.push_back({"SoftmaxCrossEntropyLoss_smoothing_log_prob_NCd1d2", sce, "ai.onnxtrain",
               loss_attrs("mean", true, -1, 0.25f), {r({2, 3, 2, 2}, 23), y2x2}, {}, 2});
  c.push_back({"SoftmaxCrossEntropyLoss_smoothing_wide_weights", sce, "ai.onnxtrain",
               loss_attrs("sum", false, 0, 0.1f), {r({3, 130}, 24), int64_tensor({0, 77, 129}, {3}), w130},
               kScoresOnly, 2});

  c.push_back({"NegativeLogLikelihoodLoss_mean_NC", nll, "", loss_attrs("mean"), {r({5, 4}, 30), y5}});
  c.push_back({"NegativeLogLikelihoodLoss_none_NCd_weights", nll, "", loss_attrs("none"), {r({3, 3, 2}, 31), y32, w3},
               kScoresOnly});
  c.push_back({"NegativeLogLikelihoodLoss_sum_ii", nll, "", loss_attrs("sum", true, -1), {r({5, 4}, 32), y5_ii}});
  c.push_back({"NegativeLogLikelihoodLoss_mean_weights_ii_NCd1d2", nll, "", loss_attrs("mean", true, -1),
               {r({2, 3, 2, 2}, 33), y2x2, w3}, kScoresOnly});
  return c;
}

// The LM head's loss: a 4096-way softmax cross-entropy over 256 rows, for the float32 comparison.
std::vector<GradCase> production_loss_cases() {
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < 256; ++i) labels.push_back((i * 2654435761) % 4096);
  return {{"Production_sce_vocab", "SoftmaxCrossEntropyLoss", "", loss_attrs("mean"),
           {r({256, 4096}, 700, -4, 4), int64_tensor(labels, {256})}}};
}

OT_GRAD_CASES(cases());
OT_PRODUCTION_CASES(production_loss_cases());

// Runs one node on concrete inputs.
std::vector<Tensor> run_node(const std::string& op, const std::string& domain, const AttributeMap& attrs,
                             const std::vector<Tensor>& inputs, int num_outputs) {
  Graph g;
  g.opsets = {{"", 17}, {"ai.onnxtrain", 1}};
  Node n{"node", op, domain, {}, {}, attrs};
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::string name = "in" + std::to_string(i);
    n.inputs.push_back(name);
    g.inputs.push_back(name);
    std::vector<Dim> dims;
    for (int64_t d : inputs[i].shape()) dims.push_back({d, ""});
    g.value_info[name] = {inputs[i].dtype(), dims};
  }
  for (int o = 0; o < num_outputs; ++o) {
    n.outputs.push_back("out" + std::to_string(o));
    g.outputs.push_back(n.outputs.back());
  }
  g.add_node(n);
  InferenceSession session(g);
  return session.run(inputs, 0);
}

// Expected values: torch.nn.functional.cross_entropy(x, y, weight, ignore_index=-1, reduction,
// label_smoothing=0.2) in float64 with PyTorch 1.13. The attribute is a float32 (0.2f differs
// from 0.2 by 3e-9), hence the 1e-7 tolerance.
constexpr double kTol = 1e-7;
TEST(SoftmaxCrossEntropyLossSmoothing, MatchesPyTorch) {
  const Tensor x = Tensor::from_vector<double>({0.5, -1.0, 2.0, 0.25, 1.5, 0.0, -0.5, -2.0, 0.1, 0.2, 0.3, 0.4}, {3, 4});
  const Tensor y = int64_tensor({2, -1, 0}, {3});
  const Tensor w = Tensor::from_vector<double>({0.5, 2.0, 1.0, 1.5}, {4});
  struct Expect {
    const char* reduction;
    bool weighted;
    std::vector<double> values;
  };
  const std::vector<Expect> expected = {
      {"none", false, {0.6817789984482534, 0.0, 1.512535529455163}},
      {"none", true, {0.8564929483706659, 0.0, 0.960148094145856}},
      {"sum", false, {2.1943145279034164}},
      {"sum", true, {1.816641042516522}},
      {"mean", false, {1.0971572639517082}},
      {"mean", true, {1.211094028344348}},
  };
  for (const auto& e : expected) {
    std::vector<Tensor> inputs{x, y};
    if (e.weighted) inputs.push_back(w);
    Tensor loss = run_node("SoftmaxCrossEntropyLoss", "ai.onnxtrain", loss_attrs(e.reduction, true, -1, 0.2f), inputs, 1)[0];
    ASSERT_EQ(loss.numel(), static_cast<int64_t>(e.values.size())) << e.reduction;
    for (size_t i = 0; i < e.values.size(); ++i)
      EXPECT_NEAR(loss.item_as_double(static_cast<int64_t>(i)), e.values[i], kTol) << e.reduction << " " << e.weighted;
  }
}

// [N, C, d] layout: sin(0..11) * 2 as [2, 3, 2], labels [[0, 2], [1, -1]], smoothing 0.3.
TEST(SoftmaxCrossEntropyLossSmoothing, MatchesPyTorchWithSpatialDims) {
  std::vector<double> xv;
  for (int i = 0; i < 12; ++i) xv.push_back(2 * std::sin(i));
  const Tensor x = Tensor::from_vector(xv, {2, 3, 2});
  const Tensor y = int64_tensor({0, 2, 1, -1}, {2, 2});
  Tensor none = run_node("SoftmaxCrossEntropyLoss", "ai.onnxtrain", loss_attrs("none", true, -1, 0.3f), {x, y}, 1)[0];
  const std::vector<double> expected = {1.9687226832210714, 3.262649117956215, 0.6787752059727302, 0.0};
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(none.item_as_double(static_cast<int64_t>(i)), expected[i], kTol);
  const Tensor w = Tensor::from_vector<double>({1.0, 0.5, 2.0}, {3});
  Tensor mean = run_node("SoftmaxCrossEntropyLoss", "ai.onnxtrain", loss_attrs("mean", true, -1, 0.3f), {x, y, w}, 1)[0];
  EXPECT_NEAR(mean.item_as_double(0), 2.7187508646542295, kTol);
}

TEST(SoftmaxCrossEntropyLossSmoothing, RejectsOutOfRangeLabels) {
  const Tensor x = Tensor::from_vector<double>({0.5, -1.0, 2.0, 0.25}, {1, 4});
  try {
    run_node("SoftmaxCrossEntropyLoss", "", loss_attrs("mean"), {x, int64_tensor({4}, {1})}, 1);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("outside [0, 4)"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace onnxtrain::testing
