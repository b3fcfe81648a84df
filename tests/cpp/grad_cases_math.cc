// Finite-difference cases for src/ops/math: arithmetic with broadcasting, MatMul in every rank
// combination, Gemm with every transpose and C shape.
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
  return c;
}

OT_GRAD_CASES(cases());

}  // namespace
}  // namespace onnxtrain::testing
