#pragma once
// How an op defines its FusedElementwise instruction (opdef/elementwise_instruction.h) beside its
// standalone kernel. An op writes its formulas once, as a Forms struct:
//   static constexpr bool kVector;  // true: float32 runs `vector` over 8-lane fast::VF
//   template <typename T> static T scalar(T a[, T b], float imm, float imm2);
//   static fast::VF vector(fast::VF a[, fast::VF b], float imm, float imm2);  // when kVector
// and gets the instruction from unary_instruction<Forms>(name) or binary_instruction<Forms>(name).
// The forms must be the ones its standalone kernel computes with: the coverage test
// (tests/cpp/test_op_records.cc) runs every instruction against its kernel, bit for bit.
#include "opdef/elementwise_instruction.h"
#include "ops/math/fast_math.h"

namespace onnxtrain::fused {

template <typename Forms, typename T>
void unary_scalar(const T* a, const T*, T* out, int64_t n, float imm, float imm2) {
  for (int64_t i = 0; i < n; ++i) out[i] = Forms::template scalar<T>(a[i], imm, imm2);
}

template <typename Forms>
void unary_float32(const float* a, const float* b, float* out, int64_t n, float imm, float imm2) {
  if constexpr (Forms::kVector)
    fast::map_span(a, out, n, [imm, imm2](fast::VF v) { return Forms::vector(v, imm, imm2); });
  else
    unary_scalar<Forms, float>(a, b, out, n, imm, imm2);
}

template <typename Forms, typename T>
void binary_scalar(const T* a, const T* b, T* out, int64_t n, float imm, float imm2) {
  for (int64_t i = 0; i < n; ++i) out[i] = Forms::template scalar<T>(a[i], b[i], imm, imm2);
}

template <typename Forms>
void binary_float32(const float* a, const float* b, float* out, int64_t n, float imm, float imm2) {
  if constexpr (Forms::kVector)
    fast::zip_span(a, b, out, n, [imm, imm2](fast::VF va, fast::VF vb) { return Forms::vector(va, vb, imm, imm2); });
  else
    binary_scalar<Forms, float>(a, b, out, n, imm, imm2);
}

template <typename Forms>
constexpr ElementwiseInstruction unary_instruction(const char* name) {
  return {name, 1, &unary_float32<Forms>, &unary_scalar<Forms, double>};
}

template <typename Forms>
constexpr ElementwiseInstruction binary_instruction(const char* name) {
  return {name, 2, &binary_float32<Forms>, &binary_scalar<Forms, double>};
}

// The lowering of a node with `Inputs` inputs to `instruction`, which reads no attribute.
template <const ElementwiseInstruction& instruction, size_t Inputs>
bool lower_to(const Node& node, LoweredInstruction& out) {
  if (node.inputs.size() != Inputs) return false;
  out = {&instruction};
  return true;
}

}  // namespace onnxtrain::fused
