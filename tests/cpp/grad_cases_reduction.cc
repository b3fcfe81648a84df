// Finite-difference cases for src/ops/reduction and src/ops/softmax: every Reduce* gradient with
// keepdims 0/1, negative axes and all-axes reductions; Softmax/LogSoftmax along the last, an
// inner and a wide axis; CumSum in all four modes; TopK. Plus forward checks of what finite
// differences do not reach: empty reductions, and the vectorized float32 paths against float64.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "session/training_session.h"
#include "tests/cpp/gradient_check.h"

namespace onnxtrain::testing {
namespace {

constexpr DType F64 = DType::Float64;

Tensor r(const TensorShape& s, uint64_t seed, double lo = -1, double hi = 1, double min_abs = 0) {
  return random_tensor(F64, s, seed, lo, hi, min_abs);
}

Tensor values(const std::vector<double>& v, const TensorShape& s) { return Tensor::from_vector(v, s); }

AttributeMap keep(int keepdims) { return {{"keepdims", Attribute::of_int(keepdims)}}; }
AttributeMap axes_keep(std::vector<int64_t> axes, int keepdims) {
  return {{"axes", Attribute::of_ints(std::move(axes))}, {"keepdims", Attribute::of_int(keepdims)}};
}
AttributeMap axis(int64_t a) { return {{"axis", Attribute::of_int(a)}}; }

std::vector<GradCase> reduce_cases() {
  std::vector<GradCase> c;
  // ReduceSum takes axes as input 1 (opset 13+).
  c.push_back({"ReduceSum_axis1_keepdims", "ReduceSum", "", keep(1), {r({2, 3, 4}, 1), int64_tensor({1})}});
  c.push_back({"ReduceSum_negative_axes_nokeep", "ReduceSum", "", keep(0), {r({2, 3, 4}, 2), int64_tensor({-1, 0})}});
  c.push_back({"ReduceSum_all_nokeep", "ReduceSum", "", keep(0), {r({3, 5}, 3)}});
  c.push_back({"ReduceSum_all_keepdims", "ReduceSum", "", keep(1), {r({2, 3}, 4)}});
  c.push_back({"ReduceSum_empty_axes_input_all", "ReduceSum", "", keep(0), {r({2, 3}, 5), int64_tensor({})}});
  c.push_back({"ReduceSum_noop_empty_axes", "ReduceSum", "",
               {{"keepdims", Attribute::of_int(0)}, {"noop_with_empty_axes", Attribute::of_int(1)}},
               {r({2, 3}, 6), int64_tensor({})}});
  c.push_back({"ReduceSum_noop_no_axes", "ReduceSum", "", {{"noop_with_empty_axes", Attribute::of_int(1)}}, {r({3, 2}, 7)}});
  c.push_back({"ReduceSum_opset13_middle", "ReduceSum", "", keep(0), {r({3, 1, 5, 2}, 8), int64_tensor({2})}, {}, 1, 13});

  // The axes-attribute reductions, each over several layouts.
  struct Layout {
    const char* tag;
    TensorShape shape;
    AttributeMap attrs;
  };
  const std::vector<Layout> layouts = {
      {"axis1_keepdims", {2, 3, 4}, axes_keep({1}, 1)},
      {"negative_axes_nokeep", {2, 3, 4}, axes_keep({-1, 0}, 0)},
      {"all_nokeep", {3, 5}, keep(0)},
      {"all_keepdims", {2, 1, 3}, keep(1)},
      {"odd_inner_nokeep", {3, 5, 7}, axes_keep({0, 2}, 0)},
  };
  uint64_t seed = 100;
  for (const auto& l : layouts) {
    const std::string tag = l.tag;
    c.push_back({"ReduceMean_" + tag, "ReduceMean", "", l.attrs, {r(l.shape, ++seed)}});
    c.push_back({"ReduceMax_" + tag, "ReduceMax", "", l.attrs, {r(l.shape, ++seed)}});
    c.push_back({"ReduceMin_" + tag, "ReduceMin", "", l.attrs, {r(l.shape, ++seed)}});
    c.push_back({"ReduceProd_" + tag, "ReduceProd", "", l.attrs, {r(l.shape, ++seed, 0.5, 1.5)}});
    c.push_back({"ReduceL2_" + tag, "ReduceL2", "", l.attrs, {r(l.shape, ++seed)}});
    c.push_back({"ReduceL1_" + tag, "ReduceL1", "", l.attrs, {r(l.shape, ++seed, -1, 1, 0.05)}});
    c.push_back({"ReduceLogSumExp_" + tag, "ReduceLogSumExp", "", l.attrs, {r(l.shape, ++seed, -3, 3)}});
    c.push_back({"ReduceSumSquare_" + tag, "ReduceSumSquare", "", l.attrs, {r(l.shape, ++seed)}});
    c.push_back({"ReduceLogSum_" + tag, "ReduceLogSum", "", l.attrs, {r(l.shape, ++seed, 0.5, 2)}});
  }
  // Ties: a central difference at a two-way tie is exactly 1/2, the even split PyTorch's amax uses.
  c.push_back({"ReduceMax_tie_pair", "ReduceMax", "", axes_keep({1}, 0),
               {values({0.3, 0.7, 0.7, -0.2, 0.1, 0.1, -0.5, 0.05}, {2, 4})}});
  c.push_back({"ReduceMin_tie_pair", "ReduceMin", "", axes_keep({0}, 1),
               {values({0.3, -0.4, 0.2, 0.3, 0.9, 0.2}, {2, 3})}});
  // Zeros: one zero in a group (its derivative is the product of the others, theirs 0), two zeros
  // (all 0). The product is linear in each element, so differences are exact there.
  c.push_back({"ReduceProd_zeros", "ReduceProd", "", axes_keep({1}, 0),
               {values({0.5, 0.0, 1.5, -0.7, 0.0, 0.0, 1.2, 0.8, -1.1, 0.9, 1.3, 0.6}, {3, 4})}});
  // A zero norm: PyTorch's gradient is 0 there, and so is the (symmetric) central difference.
  c.push_back({"ReduceL2_zero_group", "ReduceL2", "", axes_keep({-1}, 1), {values({0, 0, 0, 0.3, -0.4, 1.2}, {2, 3})}});
  c.push_back({"ReduceLogSumExp_large", "ReduceLogSumExp", "", axes_keep({1}, 0), {r({2, 5}, 200, 50, 60)}});
  c.push_back({"ReduceMax_wide_row", "ReduceMax", "", axes_keep({1}, 0), {r({2, 150}, 201)}});
  c.push_back({"ReduceSum_wide_row_sum", "ReduceSumSquare", "", axes_keep({-1}, 0), {r({2, 150}, 202)}});
  return c;
}

OT_GRAD_CASES(reduce_cases());

std::vector<GradCase> softmax_cases() {
  std::vector<GradCase> c;
  for (const char* op : {"Softmax", "LogSoftmax"}) {
    const std::string o = op;
    c.push_back({o + "_default_axis", o, "", {}, {r({2, 3, 4}, 300, -2, 2)}});
    c.push_back({o + "_axis0", o, "", axis(0), {r({3, 4}, 301, -2, 2)}});
    c.push_back({o + "_inner_axis", o, "", axis(1), {r({2, 3, 5}, 302, -2, 2)}});
    c.push_back({o + "_negative_axis", o, "", axis(-2), {r({2, 4, 3}, 303, -2, 2)}});
    // Longer than the 64 lanes of the row folds, and an inner axis wider than one column block.
    c.push_back({o + "_wide_row", o, "", {}, {r({2, 150}, 304, -3, 3)}});
    c.push_back({o + "_wide_inner", o, "", axis(1), {r({1, 3, 70}, 305, -3, 3)}});
    c.push_back({o + "_opset13", o, "", axis(1), {r({3, 4}, 306, -2, 2)}, {}, 1, 13});
  }
  return c;
}

// Softmax over a vocabulary-sized row and ReduceMax over post-ReLU data (ties among zeros), for
// the float32 comparison.
std::vector<GradCase> production_reduction_cases() {
  std::vector<GradCase> c;
  c.push_back({"Production_softmax_vocab", "Softmax", "", {}, {r({8, 4097}, 600, -6, 6)}});
  c.push_back({"Production_logsoftmax_vocab", "LogSoftmax", "", {}, {r({8, 4097}, 601, -6, 6)}});
  c.push_back({"Production_reducemax_ties", "ReduceMax", "", {}, {post_relu_tensor(DType::Float64, {4, 9, 33}, 602)}});
  return c;
}

OT_GRAD_CASES(softmax_cases());
OT_PRODUCTION_CASES(production_reduction_cases());

std::vector<GradCase> scan_cases() {
  std::vector<GradCase> c;
  auto cumsum = [](int exclusive, int reverse) {
    return AttributeMap{{"exclusive", Attribute::of_int(exclusive)}, {"reverse", Attribute::of_int(reverse)}};
  };
  Tensor axis0 = int64_tensor({0}, {});
  Tensor axis1 = int64_tensor({1}, {});
  c.push_back({"CumSum_axis0", "CumSum", "", cumsum(0, 0), {r({3, 4}, 400), axis0}});
  c.push_back({"CumSum_axis1_exclusive", "CumSum", "", cumsum(1, 0), {r({3, 4}, 401), axis1}});
  c.push_back({"CumSum_axis1_reverse", "CumSum", "", cumsum(0, 1), {r({3, 4}, 402), axis1}});
  c.push_back({"CumSum_reverse_exclusive", "CumSum", "", cumsum(1, 1), {r({2, 3, 2}, 403), int64_tensor({-2})}});
  c.push_back({"CumSum_1d", "CumSum", "", {}, {r({5}, 404), axis0}});

  auto topk = [](int64_t ax, int largest) {
    return AttributeMap{{"axis", Attribute::of_int(ax)}, {"largest", Attribute::of_int(largest)}};
  };
  c.push_back({"TopK_last_axis", "TopK", "", topk(-1, 1), {r({3, 5}, 410), int64_tensor({2})}, {}, 2});
  c.push_back({"TopK_smallest", "TopK", "", topk(1, 0), {r({3, 5}, 411), int64_tensor({3})}, {}, 2});
  c.push_back({"TopK_inner_axis", "TopK", "", topk(0, 1), {r({4, 3, 2}, 412), int64_tensor({2})}, {}, 2});
  c.push_back({"TopK_all", "TopK", "", topk(-1, 1), {r({2, 4}, 413), int64_tensor({4})}, {}, 2});
  return c;
}

OT_GRAD_CASES(scan_cases());

Tensor run_one(const std::string& op, const AttributeMap& attrs, const std::vector<Tensor>& inputs) {
  Graph g;
  Node n{"node", op, "", {}, {"out"}, attrs};
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::string name = "in" + std::to_string(i);
    n.inputs.push_back(name);
    g.inputs.push_back(name);
    std::vector<Dim> dims;
    for (int64_t d : inputs[i].shape()) dims.push_back({d, ""});
    g.value_info[name] = {inputs[i].dtype(), dims};
  }
  g.outputs.push_back("out");
  g.add_node(n);
  InferenceSession session(g);
  return session.run(inputs, 0)[0];
}

// A reduced axis of size 0 gives the reduction's identity: 0, 1, -inf, and NaN for the mean.
TEST(ReduceKernels, EmptyAxisGivesTheIdentity) {
  const Tensor empty = Tensor::zeros(DType::Float32, {2, 0});
  const AttributeMap axis1 = axes_keep({1}, 0);
  Tensor sum = run_one("ReduceSum", keep(0), {empty, int64_tensor({1})});
  Tensor prod = run_one("ReduceProd", axis1, {empty});
  Tensor max = run_one("ReduceMax", axis1, {empty});
  Tensor mean = run_one("ReduceMean", axis1, {empty});
  Tensor lse = run_one("ReduceLogSumExp", axis1, {empty});
  ASSERT_EQ(sum.shape(), TensorShape({2}));
  for (int64_t i = 0; i < 2; ++i) {
    EXPECT_EQ(sum.item_as_double(i), 0.0);
    EXPECT_EQ(prod.item_as_double(i), 1.0);
    EXPECT_EQ(max.item_as_double(i), -std::numeric_limits<double>::infinity());
    EXPECT_TRUE(std::isnan(mean.item_as_double(i)));
    EXPECT_EQ(lse.item_as_double(i), -std::numeric_limits<double>::infinity());
  }
}

Tensor to_double(const Tensor& t) {
  Tensor d = Tensor::empty(F64, t.shape());
  for (int64_t i = 0; i < t.numel(); ++i) d.data<double>()[i] = t.data<float>()[i];
  return d;
}

// float32 runs the polynomial exp and lane folds; float64 runs libm: they must agree to float32
// precision on long rows (the lane path) and on an inner axis wider than a column block.
TEST(SoftmaxKernels, Float32MatchesFloat64) {
  struct Case {
    TensorShape shape;
    int64_t axis;
  };
  for (const Case& c : {Case{{4, 4099}, -1}, Case{{2, 300, 70}, 1}, Case{{3, 5, 130}, 0}}) {
    const Tensor x32 = random_tensor(DType::Float32, c.shape, 7, -30, 30);
    const Tensor x64 = to_double(x32);
    for (const char* op : {"Softmax", "LogSoftmax"}) {
      Tensor y64 = run_one(op, axis(c.axis), {x64});
      Tensor y32 = run_one(op, axis(c.axis), {x32});
      // A few float32 roundings: relative 1e-5 plus an absolute floor of a few ulps of the largest
      // magnitudes involved (1 for probabilities, up to 60 for log-probabilities).
      const double rtol = 1e-5, atol = std::string(op) == "Softmax" ? 1e-7 : 2e-5;
      int64_t bad = -1;
      for (int64_t i = 0; i < y64.numel() && bad < 0; ++i)
        if (std::abs(y32.item_as_double(i) - y64.item_as_double(i)) > atol + rtol * std::abs(y64.item_as_double(i)))
          bad = i;
      EXPECT_LT(bad, 0) << op << " " << c.shape.str() << " element " << bad << ": " << y32.item_as_double(bad)
                        << " vs " << y64.item_as_double(bad);
    }
  }
}

}  // namespace
}  // namespace onnxtrain::testing
