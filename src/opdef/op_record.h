#pragma once
// Everything the engine knows about one op, in one record. Each op declares its record from its
// own source file (ops/<family>/) through the macros of op_registry.h; autodiff, the passes, the
// runtime and the audit read it. No other file lists ops by name.
#include <string>
#include <vector>

#include "opdef/elementwise_instruction.h"
#include "opdef/kernel.h"

namespace onnxtrain {

class GradBuilder;
using GradientRule = void (*)(GradBuilder&);
// Whether output `index` of `node` carries gradient, for ops that decide per node (PythonOp: the
// user's Function marked some outputs non-differentiable).
using OutputDifferentiability = bool (*)(const Node& node, size_t index);

// Whether backward may run the op again on values it keeps anyway, instead of keeping the op's
// outputs, under DebugOptions(memory_optimization="recompute") (passes/recompute.cc). Cheap ops
// are elementwise math, activations and normalizations: one pass over data backward reads anyway.
enum class Recompute { Undeclared, Cheap, Costly };

// How the rounding error of the op's float outputs grows, for the audit (audit/audit_compare.cc):
// with each output's own magnitude (elementwise math, data movement, normalizations), or with the
// magnitudes of the many terms summed into it (products, convolutions, reductions), which a sum
// that cancels leaves far larger than the sum itself.
enum class Rounding { Undeclared, PerValue, SumOfTerms };

// Whether two runs on the same inputs give the same outputs. Random draws and user code are never
// folded into constants, merged with a twin or recomputed in the expectation of the same values.
enum class Repeatability { Deterministic, RandomDraw, UserCode };

// What one output of a node is, where the audit must judge it otherwise than by the op's Rounding.
enum class AuditedOutput {
  Value,          // judged by the op's Rounding
  ChannelSums,    // per-channel sums (batch means, BatchNormGrad's dscale and dB): a channel whose
                  // terms cancel has a sum that is rounding noise, judged against its terms
  SelectedIndex,  // an index chosen by comparing values (ArgMax, TopK's indices): judged by the
                  // values it selects, since near-ties may pick another index
};
using AuditedOutputKind = AuditedOutput (*)(const Node& node, size_t index);

struct OpRecord {
  std::string domain, op_type;

  KernelFactory kernel;  // empty for an op with only a gradient or schema registered
  Recompute recompute = Recompute::Undeclared;
  Rounding rounding = Rounding::Undeclared;

  GradientRule gradient = nullptr;
  // ONNX calls it non-differentiable, PyTorch differentiates it as constant zero (Sign, Round).
  bool zero_gradient = false;
  // Inputs differentiated although ONNX's schema says not (GridSample's grid, as PyTorch does).
  std::vector<int> differentiable_inputs;
  // Outputs are constants to autodiff whatever ONNX's schema says (draws that read only a shape).
  bool not_differentiable = false;
  // Non-empty: differentiating through the op is an error, and this says why (QuantizeLinear's
  // integer outputs would end the chain of gradients without a word).
  std::string gradient_refused;
  OutputDifferentiability output_differentiability = nullptr;
  // The kernel must know which inputs require grad (PythonOp, for ctx.needs_input_grad): autodiff
  // writes that into the node as the ints attribute "input_requires_grad".
  bool records_requires_grad = false;

  // The 16-bit float types the kernel reads and writes itself. Every other 16-bit input is widened
  // to float32 for the kernel and its outputs rounded back once (runtime/half_compute.h).
  std::vector<DType> native_16bit_floats;
  // Sums 16-bit values in float32 and rounds once, and writes the float32 sums unrounded when its
  // node has the attribute to = FLOAT (passes/float32_sums.cc).
  bool float32_sums = false;

  Repeatability repeatability = Repeatability::Deterministic;
  AuditedOutputKind audited_output = nullptr;  // null: every output is a Value
  // How ai.onnxtrain::FusedElementwise runs a node of the op inside a fused loop; null when it
  // cannot (passes/elementwise_fusion.cc).
  ElementwiseLowering elementwise = nullptr;

  bool computes_natively(DType type) const;
  AuditedOutput audited(const Node& node, size_t index) const {
    return audited_output ? audited_output(node, index) : AuditedOutput::Value;
  }
  // What a complete record still lacks, in words; empty when it lacks nothing.
  std::string missing() const;
};

}  // namespace onnxtrain
