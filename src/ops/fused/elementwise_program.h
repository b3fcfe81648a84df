#pragma once
// The instruction set of ai.onnxtrain::FusedElementwise: the elementwise ops that the fusion pass
// (passes/elementwise_fusion.cc) may merge into one loop, and how the kernel evaluates each.
//
// A program works on registers: registers [0, num_inputs) hold the node's inputs, and
// instruction i writes register num_inputs + i. Encoded in the node's attributes:
//   ops     INTS   one opcode per instruction
//   args    INTS   two register indices per instruction (the second ignored by unary ops)
//   consts  FLOATS one immediate per instruction (LeakyRelu's alpha, HardTanh's lower bound;
//                  0 when unused)
//   consts2 FLOATS a second immediate per instruction (HardTanh's upper bound); optional, absent
//                  when no instruction has one
//   outputs INTS   the register of each node output
#include <cstdint>

#include "ir/graph.h"

namespace onnxtrain::fused {

enum class Opcode : int64_t {
  Add, Sub, Mul, Div,                                            // binary
  Neg, Abs, Exp, Log, Sqrt, Reciprocal, Relu,                    // unary
  Sigmoid, Tanh, Erf, GeluExact, GeluTanh,
  LeakyRelu,                                                     // unary with an immediate
  ReluGrad, SigmoidGrad, TanhGrad, GeluExactGrad, GeluTanhGrad,  // (dY, forward value)
  Silu, SiluGrad,                                                // appended: codes stay stable
  HardTanh, HardTanhGrad,                                        // two immediates: the bounds
  kCount,
};

// Number of register operands of an opcode (1 or 2).
int arity(Opcode op);

// The opcode that evaluates one ONNX (or ai.onnxtrain) node, with its immediate; false when the
// node is not one the kernel can run elementwise (wrong op, or attributes it does not cover).
struct Lowered {
  Opcode op;
  float immediate = 0;
  float immediate2 = 0;
};
bool lower(const Node& node, Lowered& out);

}  // namespace onnxtrain::fused
