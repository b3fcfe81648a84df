// Finite-difference cases for the normalization family (src/ops/nn: batch_norm*, layer_norm,
// instance_norm, dropout, resize*), and parity checks of the training-mode semantics against
// values PyTorch 1.13 computed (float64; generated once with torch.nn.BatchNorm1d/2d and
// torch.nn.LayerNorm, then pasted here so the test needs no Python).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "runtime/thread_pool.h"
#include "session/training_session.h"
#include "tests/cpp/gradient_check.h"

namespace onnxtrain::testing {
namespace {

constexpr DType F64 = DType::Float64;

Tensor r(const TensorShape& s, uint64_t seed, double lo = -1, double hi = 1) { return random_tensor(F64, s, seed, lo, hi); }
Tensor f32(const std::vector<float>& v) { return Tensor::from_vector(v, {static_cast<int64_t>(v.size())}); }
Tensor f64_scalar(double v) { return Tensor::scalar<double>(v); }
Tensor flag(bool v) { return Tensor::scalar<bool>(v); }

AttributeMap attrs(std::initializer_list<std::pair<const std::string, Attribute>> a) { return AttributeMap(a); }
Attribute i(int64_t v) { return Attribute::of_int(v); }
Attribute f(float v) { return Attribute::of_float(v); }
Attribute s(const char* v) { return Attribute::of_string(v); }

std::vector<GradCase> batch_norm_cases() {
  std::vector<GradCase> c;
  auto bn_inputs = [](const TensorShape& x, uint64_t seed, int64_t ch) {
    return std::vector<Tensor>{r(x, seed, -2, 2), r({ch}, seed + 1, 0.5, 1.5), r({ch}, seed + 2),
                               r({ch}, seed + 3), r({ch}, seed + 4, 0.5, 1.5)};
  };
  // Training mode: Y does not depend on the running statistics, so their gradients are zeros.
  c.push_back({"BatchNormalization_training_4d", "BatchNormalization", "", attrs({{"training_mode", i(1)}, {"epsilon", f(1e-3f)}}),
               bn_inputs({3, 2, 2, 3}, 10, 2), {}, 1, 15});
  c.push_back({"BatchNormalization_training_2d", "BatchNormalization", "", attrs({{"training_mode", i(1)}}),
               bn_inputs({5, 3}, 20, 3), {}, 1, 14});
  c.push_back({"BatchNormalization_training_3d_odd", "BatchNormalization", "", attrs({{"training_mode", i(1)}, {"momentum", f(0.7f)}}),
               bn_inputs({2, 3, 5}, 30, 3), {}, 1, 15});
  // Inference mode: an affine map per channel, differentiable in all five inputs.
  c.push_back({"BatchNormalization_inference_4d", "BatchNormalization", "", attrs({{"epsilon", f(1e-2f)}}),
               bn_inputs({2, 3, 2, 2}, 40, 3), {}, 1, 15});
  c.push_back({"BatchNormalization_inference_2d", "BatchNormalization", "", {}, bn_inputs({4, 3}, 50, 3), {}, 1, 15});
  c.push_back({"BatchNormalization_inference_1d_input", "BatchNormalization", "", {}, bn_inputs({5}, 60, 1), {}, 1, 15});
  // PyTorch's flavor: Y only (its running-statistics outputs are not differentiable), w.r.t.
  // X, scale and B (its schema marks the running statistics non-differentiable, as torch does).
  const std::vector<bool> xsb = {true, true, true, false, false};
  c.push_back({"BatchNormTraining_2d", "BatchNormTraining", kOnnxTrainDomain, attrs({{"momentum", f(0.9f)}}),
               bn_inputs({6, 4}, 70, 4), xsb, 1});
  c.push_back({"BatchNormTraining_4d", "BatchNormTraining", kOnnxTrainDomain, attrs({{"epsilon", f(1e-3f)}}),
               bn_inputs({2, 3, 3, 2}, 80, 3), xsb, 1});
  return c;
}

std::vector<GradCase> layer_instance_norm_cases() {
  std::vector<GradCase> c;
  c.push_back({"LayerNormalization_last_axis", "LayerNormalization", "", {}, {r({3, 5}, 1, -2, 2), r({5}, 2, 0.5, 1.5), r({5}, 3)}});
  c.push_back({"LayerNormalization_axis1_3d", "LayerNormalization", "", attrs({{"axis", i(1)}, {"epsilon", f(1e-3f)}}),
               {r({2, 3, 4}, 4, -2, 2), r({3, 4}, 5, 0.5, 1.5), r({3, 4}, 6)}});
  c.push_back({"LayerNormalization_no_bias_negative_axis", "LayerNormalization", "", attrs({{"axis", i(-2)}}),
               {r({2, 3, 3}, 7, -2, 2), r({3, 3}, 8, 0.5, 1.5)}});
  c.push_back({"LayerNormalization_bias_shape_differs", "LayerNormalization", "", {},
               {r({4, 3}, 9, -2, 2), r({3}, 10, 0.5, 1.5), r({1, 3}, 11)}});
  c.push_back({"InstanceNormalization_4d", "InstanceNormalization", "", {},
               {r({2, 3, 2, 3}, 12, -2, 2), r({3}, 13, 0.5, 1.5), r({3}, 14)}});
  c.push_back({"InstanceNormalization_3d_eps", "InstanceNormalization", "", attrs({{"epsilon", f(1e-2f)}}),
               {r({2, 2, 5}, 15, -2, 2), r({2}, 16, 0.5, 1.5), r({2}, 17)}});
  return c;
}

std::vector<GradCase> dropout_cases() {
  const std::vector<bool> data_only{true, false, false};
  std::vector<GradCase> c;
  // Ratio 0 in training mode is the identity; a fixed run seed gives the same mask in the
  // gradient run and in the finite-difference runs, and the map is linear in X.
  c.push_back({"Dropout_training_ratio0", "Dropout", "", {}, {r({3, 4}, 1), f64_scalar(0.0), flag(true)}, data_only, 2, 13});
  c.push_back({"Dropout_training_seeded", "Dropout", "", {}, {r({5, 7}, 2), f64_scalar(0.4), flag(true)}, data_only, 2, 13});
  c.push_back({"Dropout_training_seed_attr", "Dropout", "", attrs({{"seed", i(3)}}), {r({4, 9}, 3), f64_scalar(0.25), flag(true)},
               data_only, 2, 13});
  c.push_back({"Dropout_training_false", "Dropout", "", {}, {r({2, 3}, 4), f64_scalar(0.5), flag(false)}, data_only, 2, 13});
  c.push_back({"Dropout_inference_form", "Dropout", "", {}, {r({3, 3}, 5)}, {}, 1, 13});
  return c;
}

std::vector<GradCase> resize_cases() {
  const std::vector<bool> x_only{true, false, false, false};
  const Tensor none;
  std::vector<GradCase> c;
  c.push_back({"Resize_linear_half_pixel_up", "Resize", "", attrs({{"mode", s("linear")}}),
               {r({1, 2, 2, 3}, 1), none, f32({1, 1, 2, 1.5f})}, x_only, 1, 13});
  c.push_back({"Resize_linear_align_corners_sizes", "Resize", "",
               attrs({{"mode", s("linear")}, {"coordinate_transformation_mode", s("align_corners")}}),
               {r({2, 3, 5}, 2), none, none, int64_tensor({2, 2, 3})}, x_only, 1, 13});
  c.push_back({"Resize_linear_pytorch_half_pixel_down", "Resize", "",
               attrs({{"mode", s("linear")}, {"coordinate_transformation_mode", s("pytorch_half_pixel")}}),
               {r({1, 1, 5, 4}, 3), none, none, int64_tensor({1, 1, 3, 1})}, x_only, 1, 13});
  c.push_back({"Resize_nearest_asymmetric_floor_up", "Resize", "",
               attrs({{"coordinate_transformation_mode", s("asymmetric")}, {"nearest_mode", s("floor")}}),
               {r({1, 2, 2, 3}, 4), none, f32({1, 1, 2.5f, 2})}, x_only, 1, 13});
  c.push_back({"Resize_nearest_round_prefer_ceil_down", "Resize", "", attrs({{"nearest_mode", s("round_prefer_ceil")}}),
               {r({2, 5, 4}, 5), none, none, int64_tensor({2, 3, 3})}, x_only, 1, 13});
  c.push_back({"Resize_cubic_exclude_outside", "Resize", "",
               attrs({{"mode", s("cubic")}, {"exclude_outside", i(1)}, {"cubic_coeff_a", f(-0.5f)}}),
               {r({1, 1, 3, 4}, 6), none, f32({1, 1, 1.7f, 0.8f})}, x_only, 1, 13});
  c.push_back({"Resize_tf_crop_and_resize_extrapolated", "Resize", "",
               attrs({{"mode", s("linear")}, {"coordinate_transformation_mode", s("tf_crop_and_resize")},
                      {"extrapolation_value", f(10.0f)}}),
               {r({1, 1, 4, 4}, 7), f32({0, 0, 0.4f, 0.6f, 1, 1, 1.2f, 1.7f}), none, int64_tensor({1, 1, 3, 3})}, x_only, 1, 13});
  return c;
}

// BatchNorm at the tiny batches of the torchvision parity runs (two images) and LayerNorm over
// long rows, for the float32 comparison.
std::vector<GradCase> production_norm_cases() {
  std::vector<GradCase> c;
  const std::vector<bool> xsb = {true, true, true, false, false};
  for (int64_t ch : {24, 104}) {
    std::vector<Tensor> in{post_relu_tensor(F64, {2, ch, 8, 8}, 400 + ch), r({ch}, 401, 0.5, 1.5), r({ch}, 402),
                           r({ch}, 403), r({ch}, 404, 0.5, 1.5)};
    c.push_back({"Production_batchnorm_training_batch2_c" + std::to_string(ch), "BatchNormTraining", kOnnxTrainDomain,
                 attrs({{"momentum", f(0.9f)}}), in, xsb, 1});
  }
  c.push_back({"Production_layernorm_rows_768", "LayerNormalization", "", {},
               {r({2, 33, 768}, 405, -3, 3), r({768}, 406, 0.5, 1.5), r({768}, 407)}});
  return c;
}

OT_GRAD_CASES(batch_norm_cases());
OT_GRAD_CASES(layer_instance_norm_cases());
OT_GRAD_CASES(dropout_cases());
OT_GRAD_CASES(resize_cases());
OT_PRODUCTION_CASES(production_norm_cases());

// ---- Parity with PyTorch and properties the finite differences cannot see ----

struct NodeRun {
  std::vector<Tensor> outputs, grads;
};

// One node, run forward and backward. `wrt` are input indices; `grad_outputs` are the output
// indices that receive gradient, with their gradients.
NodeRun run_node(const std::string& op, const std::string& domain, const AttributeMap& attributes,
                 const std::vector<Tensor>& inputs, int num_outputs, const std::vector<int>& wrt,
                 const std::vector<std::pair<int, Tensor>>& grad_outputs, int opset = 17) {
  Graph g;
  g.opsets = {{"", opset}};
  if (!domain.empty()) g.opsets[domain] = 1;
  Node n{op, op, domain, {}, {}, attributes};
  for (size_t k = 0; k < inputs.size(); ++k) {
    std::string name = "in" + std::to_string(k);
    n.inputs.push_back(name);
    g.inputs.push_back(name);
    std::vector<Dim> dims;
    for (int64_t d : inputs[k].shape()) dims.push_back({d, ""});
    g.value_info[name] = {inputs[k].dtype(), dims};
  }
  for (int o = 0; o < num_outputs; ++o) {
    n.outputs.push_back("out" + std::to_string(o));
    g.outputs.push_back(n.outputs.back());
  }
  g.add_node(n);
  std::vector<std::string> wrt_names, grad_names;
  for (int k : wrt) wrt_names.push_back("in" + std::to_string(k));
  for (const auto& go : grad_outputs) grad_names.push_back("out" + std::to_string(go.first));
  TrainingSession session(g, {wrt_names, grad_names, false});
  NodeRun result;
  auto call = session.forward(inputs, 7, result.outputs);
  std::vector<Tensor> grads;
  for (const auto& go : grad_outputs) grads.push_back(go.second);
  EXPECT_EQ(session.training_graph().differentiable_outputs.size(), grads.size());
  result.grads = session.backward(*call, grads);
  return result;
}

Tensor t64(const std::vector<double>& v, const TensorShape& shape) { return Tensor::from_vector(v, shape); }

void expect_near(const Tensor& got, const std::vector<double>& want, double tol, const char* what) {
  ASSERT_EQ(got.numel(), static_cast<int64_t>(want.size())) << what;
  for (int64_t k = 0; k < got.numel(); ++k)
    ASSERT_NEAR(got.item_as_double(k), want[static_cast<size_t>(k)], tol) << what << "[" << k << "]";
}

#include "tests/cpp/norm_torch_reference.inc"

// torch.nn.BatchNorm2d(3, momentum=0.1).train(): ONNX momentum 0.9. Five outputs, so the
// gradient rule takes the saved-statistics path.
TEST(NormTorchParity, BatchNormTrainingMatchesBatchNorm2d) {
  std::vector<Tensor> in{t64(bn2d_x, {2, 3, 2, 2}), t64({0.5, 1.5, -0.7}, {3}), t64({0.1, -0.2, 0.3}, {3}),
                         t64({0.2, -0.1, 0.4}, {3}), t64({1.2, 0.8, 1.1}, {3})};
  NodeRun run = run_node("BatchNormTraining", kOnnxTrainDomain, {{"momentum", Attribute::of_float(0.9f)}}, in, 5,
                         {0, 1, 2}, {{0, t64(bn2d_dy, {2, 3, 2, 2})}});
  expect_near(run.outputs[0], bn2d_y, 1e-12, "Y");
  // momentum is a float attribute: 1 - 0.9f differs from torch's 0.1 by 2.4e-8.
  expect_near(run.outputs[1], bn2d_rm, 1e-7, "running_mean");
  expect_near(run.outputs[2], bn2d_rv, 1e-7, "running_var");
  expect_near(run.grads[0], bn2d_dx, 1e-12, "dX");
  expect_near(run.grads[1], bn2d_dw, 1e-12, "dscale");
  expect_near(run.grads[2], bn2d_db, 1e-12, "dB");
}

// torch.nn.BatchNorm1d(3, eps=1e-3, momentum=0.3) on N x C, default running stats (0, 1). Three
// outputs: the backward recomputes the batch statistics.
TEST(NormTorchParity, BatchNormTrainingMatchesBatchNorm1d) {
  std::vector<Tensor> in{t64(bn1d_x, {4, 3}), t64({0.5, 1.5, -0.7}, {3}), t64({0.1, -0.2, 0.3}, {3}),
                         t64({0, 0, 0}, {3}), t64({1, 1, 1}, {3})};
  NodeRun run = run_node("BatchNormTraining", kOnnxTrainDomain,
                         {{"momentum", Attribute::of_float(0.7f)}, {"epsilon", Attribute::of_float(1e-3f)}}, in, 3,
                         {0, 1, 2}, {{0, t64(bn1d_dy, {4, 3})}});
  // epsilon is a float attribute too: 1e-3f is 1e-3 to 5e-11.
  expect_near(run.outputs[0], bn1d_y, 1e-9, "Y");
  expect_near(run.outputs[1], bn1d_rm, 1e-7, "running_mean");
  expect_near(run.outputs[2], bn1d_rv, 1e-7, "running_var");
  expect_near(run.grads[0], bn1d_dx, 1e-9, "dX");
  expect_near(run.grads[1], bn1d_dw, 1e-9, "dscale");
  expect_near(run.grads[2], bn1d_db, 1e-12, "dB");
}

// torch.nn.LayerNorm([3, 4]) on 2 x 3 x 4: axis 1. Once with Y only (statistics recomputed in
// backward), once with float64 Mean/InvStdDev outputs (saved path).
TEST(NormTorchParity, LayerNormalizationMatchesLayerNorm) {
  std::vector<Tensor> in{t64(ln_x, {2, 3, 4}), t64(ln_w, {3, 4}), t64(ln_b, {3, 4})};
  for (int outputs : {1, 3}) {
    NodeRun run = run_node("LayerNormalization", "",
                           {{"axis", Attribute::of_int(1)}, {"stash_type", Attribute::of_int(11)}}, in, outputs,
                           {0, 1, 2}, {{0, t64(ln_dy, {2, 3, 4})}});
    expect_near(run.outputs[0], ln_y, 1e-12, "Y");
    expect_near(run.grads[0], ln_dx, 1e-12, "dX");
    expect_near(run.grads[1], ln_dw, 1e-12, "dScale");
    expect_near(run.grads[2], ln_db, 1e-12, "dB");
  }
}

std::vector<Tensor> run_dropout(const Tensor& x, double ratio, uint64_t seed) {
  Graph g;
  g.opsets = {{"", 13}};
  g.add_initializer("ratio", Tensor::scalar<float>(static_cast<float>(ratio)));
  g.add_initializer("training", Tensor::scalar<bool>(true));
  g.inputs = {"x"};
  g.value_info["x"] = {x.dtype(), std::nullopt};
  g.add_node(Node{"drop", "Dropout", "", {"x", "ratio", "training"}, {"y", "mask"}, {}});
  g.outputs = {"y", "mask"};
  InferenceSession session(g);
  return session.run({x}, seed);
}

TEST(DropoutMask, KeepsOneMinusRatioScalesAndVariesWithTheSeed) {
  const int64_t n = 1 << 20;
  Tensor x = Tensor::empty(DType::Float32, {n});
  for (int64_t k = 0; k < n; ++k) x.data<float>()[k] = 1.0f + static_cast<float>(k % 7);
  for (double ratio : {0.1, 0.5, 0.9}) {
    std::vector<Tensor> out = run_dropout(x, ratio, 11);
    const bool* m = out[1].data<bool>();
    const float* y = out[0].data<float>();
    const float scale = static_cast<float>(1.0 / (1.0 - static_cast<float>(ratio)));
    int64_t kept = 0;
    for (int64_t k = 0; k < n; ++k) {
      kept += m[k];
      ASSERT_EQ(y[k], m[k] ? x.data<float>()[k] * scale : 0.0f) << k;
    }
    const double p = 1 - ratio, sigma = std::sqrt(p * (1 - p) / static_cast<double>(n));
    EXPECT_NEAR(static_cast<double>(kept) / static_cast<double>(n), p, 5 * sigma) << "ratio " << ratio;
    // Adjacent elements are independent: pairs kept together at rate p^2.
    int64_t both = 0;
    for (int64_t k = 0; k + 1 < n; k += 2) both += m[k] && m[k + 1];
    EXPECT_NEAR(static_cast<double>(both) / static_cast<double>(n / 2), p * p, 5 * std::sqrt(p * p / static_cast<double>(n / 2)));
  }
  std::vector<Tensor> a = run_dropout(x, 0.5, 1), b = run_dropout(x, 0.5, 1), c = run_dropout(x, 0.5, 2);
  int64_t same_ab = 0, same_ac = 0;
  for (int64_t k = 0; k < n; ++k) {
    same_ab += a[1].data<bool>()[k] == b[1].data<bool>()[k];
    same_ac += a[1].data<bool>()[k] == c[1].data<bool>()[k];
  }
  EXPECT_EQ(same_ab, n);
  EXPECT_NEAR(static_cast<double>(same_ac) / static_cast<double>(n), 0.5, 0.01);
}

TEST(DropoutMask, DoesNotDependOnTheThreadCount) {
  const int saved = ThreadPool::global().num_threads();
  Tensor x = random_tensor(DType::Float32, {3, 100003}, 5);
  std::vector<std::vector<Tensor>> runs;
  for (int threads : {1, 3, 4}) {
    ThreadPool::set_num_threads(threads);
    runs.push_back(run_dropout(x, 0.3, 42));
  }
  ThreadPool::set_num_threads(saved);
  for (size_t k = 1; k < runs.size(); ++k)
    ASSERT_EQ(std::memcmp(runs[0][1].raw_data(), runs[k][1].raw_data(), static_cast<size_t>(x.numel())), 0);
}

}  // namespace
}  // namespace onnxtrain::testing

// GridSample: every mode and padding mode, both align_corners, grid points inside and outside
// [-1, 1] (reflection sees several mirrorings), gradients for the input and the grid.
namespace onnxtrain::testing {
namespace {

std::vector<GradCase> grid_sample_cases() {
  const DType F64 = DType::Float64;
  auto attrs = [](const char* mode, const char* padding, int64_t align) {
    return AttributeMap{{"mode", Attribute::of_string(mode)},
                        {"padding_mode", Attribute::of_string(padding)},
                        {"align_corners", Attribute::of_int(align)}};
  };
  auto x = [&](uint64_t seed) { return random_tensor(F64, {2, 2, 3, 4}, seed); };
  auto grid = [&](uint64_t seed, double reach) { return random_tensor(F64, {2, 3, 2, 2}, seed, -reach, reach); };
  return {
      {"GridSample_bilinear_zeros", "GridSample", "", attrs("bilinear", "zeros", 0), {x(331), grid(332, 1.2)}},
      {"GridSample_bilinear_zeros_align", "GridSample", "", attrs("bilinear", "zeros", 1), {x(333), grid(334, 1.2)}},
      {"GridSample_bilinear_border", "GridSample", "", attrs("bilinear", "border", 0), {x(335), grid(336, 1.3)}},
      {"GridSample_bilinear_reflection", "GridSample", "", attrs("bilinear", "reflection", 0),
       {x(337), grid(338, 2.5)}},
      {"GridSample_bilinear_reflection_align", "GridSample", "", attrs("bilinear", "reflection", 1),
       {x(339), grid(340, 2.5)}},
      {"GridSample_nearest_zeros", "GridSample", "", attrs("nearest", "zeros", 0), {x(341), grid(342, 1.2)}},
      {"GridSample_nearest_reflection_align", "GridSample", "", attrs("nearest", "reflection", 1),
       {x(343), grid(344, 2.0)}},
      {"GridSample_bicubic_zeros", "GridSample", "", attrs("bicubic", "zeros", 0), {x(345), grid(346, 1.2)}},
      {"GridSample_bicubic_border_align", "GridSample", "", attrs("bicubic", "border", 1), {x(347), grid(348, 1.3)}},
      {"GridSample_bicubic_reflection", "GridSample", "", attrs("bicubic", "reflection", 0),
       {x(349), grid(350, 2.0)}},
  };
}

OT_GRAD_CASES(grid_sample_cases());

}  // namespace
}  // namespace onnxtrain::testing
