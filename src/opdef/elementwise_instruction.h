#pragma once
// The instruction set of ai.onnxtrain::FusedElementwise (ops/fused/), declared op by op: an op
// that a fused loop can run defines its instruction beside its standalone kernel, with the same
// formulas, and puts in its record (op_record.h) the lowering that turns one of its nodes into
// that instruction. The fusion pass (passes/elementwise_fusion.cc) and the kernel know no op.
//
// A program works on registers: registers [0, num_inputs) hold the node's inputs, and
// instruction i writes register num_inputs + i. Encoded in the node's attributes:
//   ops     STRINGS the name of each instruction
//   args    INTS    two register indices per instruction (the second ignored by unary ones)
//   consts  FLOATS  one immediate per instruction (LeakyRelu's alpha, HardTanh's lower bound;
//                   0 when unused)
//   consts2 FLOATS  a second immediate per instruction (HardTanh's upper bound); optional,
//                   absent when no instruction has one
//   outputs INTS    the register of each node output
#include <cstdint>

#include "ir/graph.h"

namespace onnxtrain {

struct ElementwiseInstruction {
  const char* name;  // unique among instructions: the program names its instructions by it
  int arity;         // register operands: 1 or 2
  // out[i] = f(a[i], b[i]) for i < n, given the instruction's immediates; b is null when arity
  // is 1. The float32 form is the standalone kernel's own (its vector forms where it has them),
  // so that fusing changes no bit; 16-bit floats are computed on in float32.
  void (*float32)(const float* a, const float* b, float* out, int64_t n, float imm, float imm2);
  void (*float64)(const double* a, const double* b, double* out, int64_t n, float imm, float imm2);
};

struct LoweredInstruction {
  const ElementwiseInstruction* instruction = nullptr;
  float immediate = 0;
  float immediate2 = 0;
};

// Lowers one node of the op to an instruction; false when the node is not one the fused loop can
// run (another number of inputs, attributes the instruction does not cover).
using ElementwiseLowering = bool (*)(const Node& node, LoweredInstruction& out);

}  // namespace onnxtrain
