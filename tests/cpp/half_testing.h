#pragma once
// Helpers for the 16-bit kernel tests: random bfloat16/float16 tensors, elements read as double,
// the rounding step of a 16-bit type, and one node run on its own.
#include <cmath>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/half.h"
#include "session/training_session.h"

namespace onnxtrain::half_testing {

// Bits stored after the binary point: 7 for bfloat16, 10 for float16.
inline int mantissa_bits(DType t) { return t == DType::BFloat16 ? 7 : 10; }

inline Tensor random_sixteen(DType type, const TensorShape& shape, std::mt19937& gen, float mean = 0.0f,
                             float stddev = 1.0f) {
  std::normal_distribution<float> normal(mean, stddev);
  Tensor t = Tensor::empty(type, shape);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const float v = normal(gen);
    if (type == DType::BFloat16) t.data<BHalf>()[i] = float_to_bfloat16(v);
    else t.data<Half>()[i] = float_to_half(v);
  }
  return t;
}

inline double value_at(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::BFloat16: return bfloat16_to_double(t.data<BHalf>()[i]);
    case DType::Float16: return half_to_double(t.data<Half>()[i]);
    default: return t.item_as_double(i);
  }
}

// The spacing of the 16-bit type's values at |v|; below the smallest normal value (2^-14 for
// float16, 2^-126 for bfloat16) the subnormals' fixed spacing.
inline double rounding_step(double v, DType t) {
  const int smallest_normal_exponent = t == DType::BFloat16 ? -126 : -14;
  const int exponent = std::max(std::ilogb(std::max(std::fabs(v), 1e-300)), smallest_normal_exponent);
  return std::ldexp(1.0, exponent - mantissa_bits(t));
}

// One rounding to nearest of a float32 result that is itself off by float32's error on its
// terms: half a step, and a little (truncating instead of rounding fails this).
inline void expect_rounded_once(const Tensor& actual, double exact, double term_scale, int64_t i,
                                const std::string& what) {
  const double allowed = 0.5 * rounding_step(exact, actual.dtype()) + 1e-6 * term_scale;
  EXPECT_NEAR(value_at(actual, i), exact, allowed) << what << " element " << i;
}

// Runs one node of `op` on `inputs` (named as given), returning its `outputs` outputs.
inline std::vector<Tensor> run_node(const std::string& op, const std::string& domain, const AttributeMap& attrs,
                                    const std::vector<std::pair<std::string, Tensor>>& inputs, size_t outputs) {
  Graph g;
  std::vector<Tensor> values;
  std::vector<std::string> names;
  for (const auto& [name, t] : inputs) {
    g.inputs.push_back(name);
    std::vector<Dim> dims;
    for (int64_t i = 0; i < t.rank(); ++i) dims.push_back({t.shape()[i], ""});
    g.value_info[name] = {t.dtype(), dims};
    names.push_back(name);
    values.push_back(t);
  }
  std::vector<std::string> outs;
  for (size_t i = 0; i < outputs; ++i) outs.push_back("out" + std::to_string(i));
  g.outputs = outs;
  g.add_node(Node{"node", op, domain, names, outs, attrs});
  if (!domain.empty() && !g.opsets.count(domain)) g.opsets[domain] = 1;
  return InferenceSession(g).run(values, 0);
}

}  // namespace onnxtrain::half_testing
