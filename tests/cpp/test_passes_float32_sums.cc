// passes/float32_sums.cc: a 16-bit gradient that a float32 sum produced and a Cast widens at once
// is written as float32 by the summing op. Structure (which Casts go, which stay) and numbers: an
// autocast Linear's weight and bias gradients come out as the float32 sums of the same bfloat16
// terms, within float32's error of the float64 sums, where without the pass they are those sums
// rounded to bfloat16 (a pass that did not fire fails the float32 bound).
#include <cmath>

#include "core/half.h"
#include "opdef/op_registry.h"
#include "passes/passes.h"
#include "tests/cpp/pass_testing.h"

namespace onnxtrain::testing {
namespace {

Attribute to(DType t) { return Attribute::of_int(static_cast<int64_t>(t)); }
void declare(Graph& g, const std::string& value, DType t) { g.value_info[value].dtype = t; }

int widening_casts(const Graph& g) {
  int count = 0;
  for (const Node& node : g.nodes)
    count += node.op_type == "Cast" && node.attr_int("to", 0) == static_cast<int64_t>(DType::Float32);
  return count;
}

const Node* node_named(const Graph& g, const std::string& name) {
  for (const Node& n : g.nodes)
    if (n.name == name) return &n;
  return nullptr;
}

TEST(Float32Sums, TheWideningCastOfASummedGradientGoesIntoItsProducer) {
  ASSERT_TRUE(OpRegistry::instance().writes_float32_sums(kOnnxTrainDomain, "MatMulGradB"));
  ASSERT_TRUE(OpRegistry::instance().writes_float32_sums(kOnnxTrainDomain, "ReduceSumTo"));
  Graph g;
  add_input(g, "dy", DType::BFloat16, {4, 3, 8});
  add_input(g, "x", DType::BFloat16, {4, 3, 5});
  add_input(g, "w_shape", DType::Int64, {2});
  add_input(g, "b_shape", DType::Int64, {1});
  g.opsets[kOnnxTrainDomain] = 1;
  g.add_node({"dw", "MatMulGradB", kOnnxTrainDomain, {"dy", "x", "w_shape"}, {"dw16"}, {}});
  g.add_node({"dw_wide", "Cast", "", {"dw16"}, {"dw32"}, {{"to", to(DType::Float32)}}});
  g.add_node({"db", "ReduceSumTo", kOnnxTrainDomain, {"dy", "b_shape"}, {"db16"}, {}});
  g.add_node({"db_wide", "Cast", "", {"db16"}, {"db32"}, {{"to", to(DType::Float32)}}});
  declare(g, "dw16", DType::BFloat16);
  declare(g, "dw32", DType::Float32);
  declare(g, "db16", DType::BFloat16);
  declare(g, "db32", DType::Float32);
  g.outputs = {"dw32", "db32"};
  EXPECT_TRUE(write_float32_sums(g));
  EXPECT_EQ(count_ops(g, "Cast"), 0);
  for (const char* name : {"dw", "db"}) {
    const Node* n = node_named(g, name);
    ASSERT_NE(n, nullptr) << name;
    EXPECT_EQ(n->attr_int("to", 0), static_cast<int64_t>(DType::Float32)) << name;
  }
  EXPECT_EQ(node_named(g, "dw")->outputs[0], "dw32");
  EXPECT_EQ(node_named(g, "db")->outputs[0], "db32");
  EXPECT_EQ(g.info("dw16"), nullptr);
  EXPECT_FALSE(write_float32_sums(g));
}

TEST(Float32Sums, CastsStayWhereTheRoundedValueIsNeededOrNotASum) {
  Graph g;
  add_input(g, "dy", DType::BFloat16, {4, 8});
  add_input(g, "b_shape", DType::Int64, {1});
  g.opsets[kOnnxTrainDomain] = 1;
  // The rounded sum has a second reader.
  g.add_node({"db", "ReduceSumTo", kOnnxTrainDomain, {"dy", "b_shape"}, {"db16"}, {}});
  g.add_node({"db_wide", "Cast", "", {"db16"}, {"db32"}, {{"to", to(DType::Float32)}}});
  g.add_node({"db_neg", "Neg", "", {"db16"}, {"db_neg16"}, {}});
  // A Cast to float16, not float32.
  g.add_node({"dc", "ReduceSumTo", kOnnxTrainDomain, {"dy", "b_shape"}, {"dc16"}, {}});
  g.add_node({"dc_half", "Cast", "", {"dc16"}, {"dc_h"}, {{"to", to(DType::Float16)}}});
  // Not a summing op.
  g.add_node({"neg", "Neg", "", {"dy"}, {"n16"}, {}});
  g.add_node({"n_wide", "Cast", "", {"n16"}, {"n32"}, {{"to", to(DType::Float32)}}});
  // The rounded sum is a graph output.
  g.add_node({"dd", "ReduceSumTo", kOnnxTrainDomain, {"dy", "b_shape"}, {"dd16"}, {}});
  g.add_node({"dd_wide", "Cast", "", {"dd16"}, {"dd32"}, {{"to", to(DType::Float32)}}});
  for (const char* v : {"db16", "db_neg16", "dc16", "n16", "dd16"}) declare(g, v, DType::BFloat16);
  for (const char* v : {"db32", "n32", "dd32"}) declare(g, v, DType::Float32);
  declare(g, "dc_h", DType::Float16);
  g.outputs = {"db32", "db_neg16", "dc_h", "n32", "dd16", "dd32"};
  EXPECT_FALSE(write_float32_sums(g));
  EXPECT_EQ(count_ops(g, "Cast"), 4);
}

// y = Cast(Cast(x, h) @ Cast(W, h)^T + Cast(b, h), f32) for h = bfloat16 or float16, as autocast
// exports a Linear; trained with the optimizer off and on. float16's products are widened by the
// executor (no native float16 GEMM) and the float32 output it declares is kept as it is.
void check_autocast_linear(DType half) {
  SCOPED_TRACE(dtype_name(half));
  const int64_t rows = 24, k = 40, n = 6;
  Graph g;
  add_input(g, "x", DType::Float32, {2, rows / 2, k});
  add_input(g, "w", DType::Float32, {n, k});
  add_input(g, "b", DType::Float32, {n});
  g.add_node({"x16", "Cast", "", {"x"}, {"x16"}, {{"to", to(half)}}});
  g.add_node({"w16", "Cast", "", {"w"}, {"w16"}, {{"to", to(half)}}});
  g.add_node({"b16", "Cast", "", {"b"}, {"b16"}, {{"to", to(half)}}});
  g.add_node({"wt", "Transpose", "", {"w16"}, {"wt16"}, {{"perm", Attribute::of_ints({1, 0})}}});
  g.add_node({"mm", "MatMul", "", {"x16", "wt16"}, {"p16"}, {}});
  g.add_node({"bias", "Add", "", {"p16", "b16"}, {"y16"}, {}});
  g.add_node({"y", "Cast", "", {"y16"}, {"y"}, {{"to", to(DType::Float32)}}});
  for (const char* v : {"x16", "w16", "b16", "wt16", "p16", "y16"}) declare(g, v, half);
  declare(g, "y", DType::Float32);
  g.outputs = {"y"};
  const std::vector<Tensor> feeds = {random_tensor(DType::Float32, {2, rows / 2, k}, 1),
                                     random_tensor(DType::Float32, {n, k}, 2), random_tensor(DType::Float32, {n}, 3)};
  const Tensor seed = random_tensor(DType::Float32, {2, rows / 2, n}, 4);
  auto bf16 = [half](double v) {  // rounded to the 16-bit type
    const float f = static_cast<float>(v);
    return half == DType::BFloat16 ? bfloat16_to_double(float_to_bfloat16(f)) : half_to_double(float_to_half(f));
  };
  // The float64 sums of the bfloat16 terms both runs sum: dy = bf16(seed), x = bf16(x).
  std::vector<double> dw(static_cast<size_t>(n * k), 0), dw_abs(dw.size(), 0), db(static_cast<size_t>(n), 0),
      db_abs(db.size(), 0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < n; ++j) {
      const double d = bf16(seed.item_as_double(r * n + j));
      db[static_cast<size_t>(j)] += d;
      db_abs[static_cast<size_t>(j)] += std::fabs(d);
      for (int64_t i = 0; i < k; ++i) {
        const double term = d * bf16(feeds[0].item_as_double(r * k + i));
        dw[static_cast<size_t>(j * k + i)] += term;
        dw_abs[static_cast<size_t>(j * k + i)] += std::fabs(term);
      }
    }
  int rounded_apart = 0;
  for (int level : {0, 1}) {
    TrainingSession session(g, {{"w", "b"}, {}, false, level});
    EXPECT_EQ(widening_casts(session.training_graph().backward_graph()), level == 1 ? 0 : 2) << "level " << level;
    std::vector<Tensor> outputs;
    auto call = session.forward(feeds, 3, outputs);
    const std::vector<Tensor> grads = session.backward(*call, {seed});
    ASSERT_EQ(grads[0].dtype(), DType::Float32);
    for (int64_t i = 0; i < n * k; ++i) {
      const double exact = dw[static_cast<size_t>(i)], got = grads[0].item_as_double(i);
      const double float32_error = 3e-6 * dw_abs[static_cast<size_t>(i)] + 1e-30;  // 24 terms, exact products
      if (level == 1) {
        EXPECT_NEAR(got, exact, float32_error) << "dW " << i;
      } else {
        EXPECT_EQ(got, bf16(got)) << "dW " << i << " at level 0 is a 16-bit value";
        rounded_apart += std::fabs(got - exact) > float32_error;
      }
    }
    for (int64_t j = 0; j < n; ++j) {
      const double exact = db[static_cast<size_t>(j)], got = grads[1].item_as_double(j);
      if (level == 1) EXPECT_NEAR(got, exact, 3e-6 * db_abs[static_cast<size_t>(j)]) << "db " << j;
      else EXPECT_EQ(got, bf16(got)) << "db " << j << " at level 0 is a 16-bit value";
    }
  }
  EXPECT_GT(rounded_apart, n * k / 4) << "without the pass, the gradients are rounded to 16 bits";
}

TEST(Float32Sums, AnAutocastLinearsParameterGradientsAreFloat32SumsOfItsSixteenBitTerms) {
  check_autocast_linear(DType::BFloat16);
  check_autocast_linear(DType::Float16);
}

}  // namespace
}  // namespace onnxtrain::testing
