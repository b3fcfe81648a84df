// Finite-difference cases for src/ops/math: arithmetic with broadcasting, MatMul in every rank
// combination, Gemm with every transpose and C shape, unary functions, Pow, Clip, Min/Max/Mean,
// and CastLike (src/ops/tensor/cast.cc, owned with the elementwise family).
#include "tests/cpp/gradient_check.h"

namespace onnxtrain::testing {
namespace {

constexpr DType F64 = DType::Float64;

Tensor r(const TensorShape& s, uint64_t seed, double lo = -1, double hi = 1) { return random_tensor(F64, s, seed, lo, hi); }

TensorShape batched(TensorShape s) {
  s.insert(0, 2);
  return s;
}

AttributeMap gemm_attrs(int ta, int tb, float alpha, float beta) {
  return {{"transA", Attribute::of_int(ta)}, {"transB", Attribute::of_int(tb)}, {"alpha", Attribute::of_float(alpha)},
          {"beta", Attribute::of_float(beta)}};
}

std::vector<GradCase> cases() {
  std::vector<GradCase> c;
  for (const char* op : {"Add", "Sub", "Mul"}) {
    std::string o = op;
    c.push_back({o + "_same_shape", o, "", {}, {r({2, 3}, 1), r({2, 3}, 2)}});
    c.push_back({o + "_broadcast_row", o, "", {}, {r({4, 3}, 3), r({3}, 4)}});
    c.push_back({o + "_broadcast_both", o, "", {}, {r({2, 1, 3}, 5), r({4, 1}, 6)}});
    c.push_back({o + "_scalar", o, "", {}, {r({}, 7), r({2, 3}, 8)}});
  }
  // Divisors kept away from zero.
  c.push_back({"Div_same_shape", "Div", "", {}, {r({2, 3}, 9), r({2, 3}, 10, 0.5, 2)}});
  c.push_back({"Div_broadcast", "Div", "", {}, {r({3, 1, 4}, 11), r({2, 1}, 12, 0.5, 2)}});
  c.push_back({"Neg", "Neg", "", {}, {r({3, 5}, 13)}});
  // Zero gradients, as PyTorch gives sign and the roundings: values stay away from the jumps
  // (integers for all, and half-integers for Round).
  const Tensor off_jumps = Tensor::from_vector<double>({-1.8, -1.3, -0.7, -0.2, 0.3, 0.8, 1.2, 1.7}, {2, 4});
  for (const char* op : {"Sign", "Floor", "Ceil", "Round"}) c.push_back({op, op, "", {}, {off_jumps}});
  c.push_back({"Sum_three_broadcast", "Sum", "", {}, {r({2, 3}, 14), r({3}, 15), r({2, 1}, 16)}});
  c.push_back({"Sum_single", "Sum", "", {}, {r({4}, 17)}});

  c.push_back({"MatMul_2d", "MatMul", "", {}, {r({3, 4}, 20), r({4, 5}, 21)}});
  c.push_back({"MatMul_batched", "MatMul", "", {}, {r({2, 3, 4}, 22), r({2, 4, 5}, 23)}});
  c.push_back({"MatMul_batch_broadcast", "MatMul", "", {}, {r({2, 1, 3, 4}, 24), r({3, 4, 2}, 25)}});
  c.push_back({"MatMul_3d_by_2d", "MatMul", "", {}, {r({2, 3, 4}, 26), r({4, 5}, 27)}});
  c.push_back({"MatMul_vector_left", "MatMul", "", {}, {r({4}, 28), r({2, 4, 3}, 29)}});
  c.push_back({"MatMul_vector_right", "MatMul", "", {}, {r({2, 3, 4}, 30), r({4}, 31)}});
  c.push_back({"MatMul_dot", "MatMul", "", {}, {r({5}, 32), r({5}, 33)}});
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      std::string tag = std::to_string(ta) + std::to_string(tb);
      TensorShape a = ta ? TensorShape{4, 3} : TensorShape{3, 4};
      TensorShape b = tb ? TensorShape{5, 4} : TensorShape{4, 5};
      c.push_back({"FusedMatMul_t" + tag, "FusedMatMul", "ai.onnxtrain",
                   {{"transA", Attribute::of_int(ta)}, {"transB", Attribute::of_int(tb)}, {"alpha", Attribute::of_float(0.5f)}},
                   {r(batched(a), 35),
                    r(b, 36)}});
      c.push_back({"Gemm_t" + tag + "_bias_row", "Gemm", "", gemm_attrs(ta, tb, 0.7f, 1.3f), {r(a, 40), r(b, 41), r({5}, 42)}});
      c.push_back({"Gemm_t" + tag + "_bias_full", "Gemm", "", gemm_attrs(ta, tb, 1.0f, 1.0f), {r(a, 43), r(b, 44), r({3, 5}, 45)}});
    }
  c.push_back({"Gemm_bias_column", "Gemm", "", gemm_attrs(0, 0, 1.0f, 0.5f), {r({3, 4}, 46), r({4, 5}, 47), r({3, 1}, 48)}});
  c.push_back({"Gemm_no_bias", "Gemm", "", gemm_attrs(0, 1, 2.0f, 1.0f), {r({3, 4}, 49), r({5, 4}, 50)}});
  c.push_back({"FusedMatMul_vector", "FusedMatMul", "ai.onnxtrain", {{"transA", Attribute::of_int(1)}},
               {r({4, 3}, 51), r({4}, 52)}});
  // The bias row passes/matmul_bias.cc folds in: a full row, and one value for every column.
  c.push_back({"FusedMatMul_bias_row", "FusedMatMul", "ai.onnxtrain",
               {{"transB", Attribute::of_int(1)}, {"alpha", Attribute::of_float(0.5f)}},
               {r({2, 3, 4}, 53), r({5, 4}, 54), r({5}, 55)}});
  c.push_back({"FusedMatMul_bias_one", "FusedMatMul", "ai.onnxtrain", {}, {r({3, 4}, 56), r({4, 5}, 57), r({1}, 58)}});
  return c;
}

// Unary functions, inputs inside each domain and away from its edges (and from 0 for Abs).
std::vector<GradCase> unary_cases() {
  struct U {
    const char* op;
    double lo, hi, min_abs;
  };
  const U ops[] = {{"Abs", -2, 2, 0.1},     {"Exp", -3, 3, 0},        {"Log", 0.2, 3, 0},      {"Sqrt", 0.2, 3, 0},
                   {"Reciprocal", -2, 2, 0.3}, {"Erf", -2.5, 2.5, 0}, {"Sin", -3, 3, 0},       {"Cos", -3, 3, 0},
                   {"Tan", -1.3, 1.3, 0},   {"Asin", -0.9, 0.9, 0},   {"Acos", -0.9, 0.9, 0},  {"Atan", -3, 3, 0},
                   {"Sinh", -2, 2, 0},      {"Cosh", -2, 2, 0},       {"Asinh", -3, 3, 0},     {"Acosh", 1.2, 3, 0},
                   {"Atanh", -0.9, 0.9, 0}};
  std::vector<GradCase> c;
  uint64_t seed = 100;
  for (const U& u : ops) {
    c.push_back({std::string(u.op), u.op, "", {}, {random_tensor(F64, {3, 4}, seed++, u.lo, u.hi, u.min_abs)}});
    c.push_back({std::string(u.op) + "_odd_shape", u.op, "", {},
                 {random_tensor(F64, {2, 1, 5}, seed++, u.lo, u.hi, u.min_abs)}});
  }
  return c;
}

std::vector<GradCase> pow_clip_minmax_cases() {
  std::vector<GradCase> c;
  // Positive bases, so that the exponent's gradient (log x) exists.
  c.push_back({"Pow_same_shape", "Pow", "", {}, {r({2, 3}, 200, 0.3, 2), r({2, 3}, 201, -2, 2)}});
  c.push_back({"Pow_broadcast_exponent", "Pow", "", {}, {r({2, 3}, 202, 0.3, 2), r({3}, 203, -2, 2)}});
  c.push_back({"Pow_broadcast_base", "Pow", "", {}, {r({3, 1}, 204, 0.3, 2), r({2, 1, 4}, 205, -2, 2)}});
  c.push_back({"Pow_scalar_exponent", "Pow", "", {}, {r({3, 4}, 206, 0.3, 2), r({}, 207, 1, 3)}});
  // Negative bases with the constant exponents of x^2 and x^3: only the base is differentiable.
  const std::pair<double, const char*> exponents[] = {{2.0, "2"}, {3.0, "3"}, {0.5, "half"}, {-1.0, "minus1"}};
  for (const auto& [e, tag] : exponents) {
    Tensor exponent = Tensor::scalar<double>(e);
    Tensor base = e == 0.5 ? r({2, 5}, 208, 0.3, 2) : random_tensor(F64, {2, 5}, 208, -2, 2, 0.2);
    GradCase g{std::string("Pow_constant_exponent_") + tag, "Pow", "", {}, {base, exponent}};
    g.differentiable = {true, false};
    c.push_back(g);
  }
  GradCase int_exp{"Pow_int64_exponent", "Pow", "", {}, {r({2, 3}, 209), int64_tensor({3}, {})}};
  c.push_back(int_exp);

  // Clip: inputs stay clear of the bounds (random values land within 1e-6 of them with
  // negligible probability); the bounds themselves are not differentiable in ONNX.
  auto clip = [&](std::string name, std::vector<Tensor> in) {
    GradCase g{std::move(name), "Clip", "", {}, std::move(in)};
    g.differentiable = {true, false, false};
    c.push_back(g);
  };
  clip("Clip_both_bounds", {r({3, 4}, 210), Tensor::scalar<double>(-0.4), Tensor::scalar<double>(0.5)});
  clip("Clip_max_only", {r({3, 4}, 211), Tensor(), Tensor::scalar<double>(0.3)});
  clip("Clip_min_only", {r({3, 4}, 212), Tensor::scalar<double>(-0.2)});
  clip("Clip_no_bounds", {r({5}, 213)});

  for (const char* op : {"Min", "Max"}) {
    std::string o = op;
    c.push_back({o + "_same_shape", o, "", {}, {r({2, 3}, 220), r({2, 3}, 221)}});
    c.push_back({o + "_broadcast", o, "", {}, {r({2, 1, 3}, 222), r({4, 1}, 223)}});
    c.push_back({o + "_three_inputs", o, "", {}, {r({2, 3}, 224), r({3}, 225), r({2, 1}, 226)}});
    c.push_back({o + "_single", o, "", {}, {r({4}, 227)}});
  }
  c.push_back({"Mean_three_broadcast", "Mean", "", {}, {r({2, 3}, 230), r({3}, 231), r({2, 1}, 232)}});
  c.push_back({"Mean_two", "Mean", "", {}, {r({3, 2}, 233), r({3, 2}, 234)}});
  c.push_back({"Mean_single", "Mean", "", {}, {r({4}, 235)}});

  // Dividends land within 1e-6 of a multiple of the divisor with negligible probability.
  for (int c_style = 0; c_style < 2; ++c_style) {
    GradCase m{c_style ? "Mod_fmod_broadcast" : "Mod_python_broadcast", "Mod", "", {{"fmod", Attribute::of_int(c_style)}},
               {r({2, 3}, 236, -3, 3), Tensor::from_vector<double>({0.7, -1.3, 2.1}, {3})}};
    m.differentiable = {true, false};
    c.push_back(m);
  }
  GradCase mod_to_scalar{"Mod_dividend_broadcast", "Mod", "", {{"fmod", Attribute::of_int(1)}},
                         {r({3, 1}, 237, -3, 3), Tensor::from_vector<double>({0.7, 0.9}, {2, 1, 1})}};
  mod_to_scalar.differentiable = {true, false};
  c.push_back(mod_to_scalar);
  return c;
}

std::vector<GradCase> cast_cases() {
  std::vector<GradCase> c;
  GradCase same{"CastLike_same_type", "CastLike", "", {}, {r({2, 3}, 240), r({1}, 241)}};
  same.differentiable = {true, false};
  c.push_back(same);
  // float32 input widened to float64: central differences in float32 are only good to about
  // ulp / eps, so eps and rtol are loosened (1.2e-7 / 1e-3 ~ 1e-4 relative error).
  GradCase widen{"CastLike_float_to_double", "CastLike", "", {}, {random_tensor(DType::Float32, {2, 3}, 242), r({1}, 243)}};
  widen.differentiable = {true, false};
  widen.eps = 1e-3;
  widen.rtol = 1e-3;
  widen.atol = 1e-4;
  c.push_back(widen);
  return c;
}

// GEMMs at sizes that take oneDNN's sgemm and split across threads (above 2e7 flops), and the
// fast-math float32 exp and erf over whole vectors, for the float32 comparison.
std::vector<GradCase> production_cases_math() {
  std::vector<GradCase> c;
  c.push_back({"Production_matmul_split", "MatMul", "", {}, {r({256, 192}, 300), r({192, 160}, 301)}});
  c.push_back({"Production_matmul_batched_attention", "MatMul", "", {}, {r({2, 4, 64, 32}, 302), r({2, 4, 32, 64}, 303)}});
  c.push_back({"Production_gemm_transposed_bias", "Gemm", "", gemm_attrs(0, 1, 1.0f, 1.0f),
               {r({128, 384}, 304), r({256, 384}, 305), r({256}, 306)}});
  c.push_back({"Production_exp", "Exp", "", {}, {r({3, 1001}, 307, -10, 10)}});
  c.push_back({"Production_erf", "Erf", "", {}, {r({3, 1001}, 308, -4, 4)}});
  return c;
}

OT_GRAD_CASES(cases());
OT_GRAD_CASES(unary_cases());
OT_GRAD_CASES(pow_clip_minmax_cases());
OT_GRAD_CASES(cast_cases());
OT_PRODUCTION_CASES(production_cases_math());

}  // namespace
}  // namespace onnxtrain::testing

// Det: batched invertible matrices, a rank M-1 matrix (the cofactor path) and a rank M-2 one
// (gradient exactly zero), as PyTorch differentiates them.
namespace onnxtrain::testing {
namespace {

std::vector<GradCase> det_cases() {
  const DType F64 = DType::Float64;
  Tensor rank2 = Tensor::from_vector<double>({1, 2, 3, 2, 4, 6, 1, 0, 1}, {3, 3});
  Tensor rank1 = Tensor::from_vector<double>({1, 2, 3, 2, 4, 6, 3, 6, 9}, {3, 3});
  return {
      {"Det_batched_3x3", "Det", "", {}, {random_tensor(F64, {2, 3, 3}, 321)}},
      {"Det_4x4", "Det", "", {}, {random_tensor(F64, {4, 4}, 322)}},
      {"Det_1x1_batch", "Det", "", {}, {random_tensor(F64, {2, 2, 1, 1}, 323)}},
      {"Det_singular_rank_m_minus_1", "Det", "", {}, {rank2}},
      {"Det_singular_rank_m_minus_2", "Det", "", {}, {rank1}},
  };
}

OT_GRAD_CASES(det_cases());

}  // namespace
}  // namespace onnxtrain::testing
