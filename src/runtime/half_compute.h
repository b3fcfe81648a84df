#pragma once
// float16 and bfloat16 for every kernel, in one place: a node whose kernel computes only in
// float32/float64 gets its 16-bit float inputs widened to float32 (exact), runs on those, and has
// its float32 outputs rounded back to the 16-bit type, once. That is PyTorch's CPU arithmetic for
// these types: reductions and matmuls accumulate in float32, elementwise ops compute in float32,
// and every op rounds its result once. Kernels that handle the 16-bit types themselves (data
// movement, Cast, the random ops, the bfloat16 products and convolutions, the fused elementwise
// loops) say so in their own registration (ONNXTRAIN_NATIVE_16BIT_FLOATS) and run unchanged.
#include "runtime/executor.h"

namespace onnxtrain {

// False for a 16-bit float type the op's kernel reads and writes itself.
bool computes_in_float32(const std::string& domain, const std::string& op_type, DType half_type);

// Runs cn's kernel, widening its 16-bit float inputs and narrowing its float32 outputs (except
// those the graph declares float32) when it has inputs of a type cn widens; plain compute
// otherwise.
void compute_with_16bit_floats_widened(RunState& state, const CompiledNode& cn, KernelContext& ctx);

}  // namespace onnxtrain
