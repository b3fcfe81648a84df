#pragma once
// Where ops declare their records (op_record.h): each from its own source file, through the
// macros below, from static initializers. Nothing else lists the ops.
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "opdef/op_record.h"

namespace onnxtrain {

// Both 16-bit float types, for ONNXTRAIN_NATIVE_16BIT_FLOATS.
inline const std::vector<DType> kBothHalfFloats = {DType::Float16, DType::BFloat16};

class OpRegistry {
 public:
  static OpRegistry& instance();

  // The record of (domain, op_type), made empty on first use: for the registration macros.
  OpRecord& declare(const std::string& domain, const std::string& op_type);
  bool add_kernel(const std::string& domain, const std::string& op_type, KernelFactory factory, Recompute recompute,
                  Rounding rounding);
  bool add_gradient(const std::string& domain, const std::string& op_type, GradientRule rule);
  bool add_instruction(const ElementwiseInstruction& instruction);
  // Refuses a type that is not a 16-bit float.
  bool add_native_16bit_floats(const std::string& domain, const std::string& op_type, const std::vector<DType>& types);

  // The record of (domain, op_type), or null when nothing of it is registered.
  const OpRecord* find(const std::string& domain, const std::string& op_type) const;
  const OpRecord* find(const Node& node) const { return find(node.domain, node.op_type); }
  // The instruction of that name, or null.
  const ElementwiseInstruction* instruction(const std::string& name) const;

  const KernelFactory* kernel(const std::string& domain, const std::string& op_type) const;
  GradientRule gradient(const std::string& domain, const std::string& op_type) const;
  bool computes_natively(const std::string& domain, const std::string& op_type, DType type) const;
  bool writes_float32_sums(const std::string& domain, const std::string& op_type) const;

  // Every record, sorted by (domain, op_type): for coverage tests and reports.
  std::vector<const OpRecord*> records() const;
  // The names of every instruction, sorted.
  std::vector<std::string> instruction_names() const;
  // (domain, op_type) pairs, sorted: for conformance reports and coverage tests.
  std::vector<std::pair<std::string, std::string>> ops_with_kernels() const;
  std::vector<std::pair<std::string, std::string>> ops_with_gradients() const;

 private:
  static std::string key(const std::string& domain, const std::string& op_type);
  std::unordered_map<std::string, OpRecord> records_;
  std::unordered_map<std::string, const ElementwiseInstruction*> instructions_;
};

// Whether a node's results are random draws (Repeatability::RandomDraw).
bool is_random_op(const Node& n);
// Whether a node's results may differ between two runs on the same inputs: random draws, and user
// code (a PyTorch autograd.Function, which may also count its calls or keep state).
bool is_unrepeatable_op(const Node& n);
// Whether any node of `g`, or of a body inside it, is unrepeatable: a recompute of `g` could give
// other values.
bool has_unrepeatable_ops(const Graph& g);

// The gradient rule of ONNXTRAIN_ZERO_GRADIENT: zeros for every input that needs a gradient
// (defined with the rules, in ops/common/zero_gradient.cc).
void zero_gradient_rule(GradBuilder& g);

template <typename K>
KernelFactory kernel_factory() {
  return [](const KernelInfo& info) -> std::unique_ptr<Kernel> { return std::make_unique<K>(info); };
}
inline KernelFactory kernel_factory(FunctionKernel::Fn fn) {
  return [fn](const KernelInfo&) -> std::unique_ptr<Kernel> { return std::make_unique<FunctionKernel>(fn); };
}

}  // namespace onnxtrain

#define OT_CONCAT_INNER(a, b) a##b
#define OT_CONCAT(a, b) OT_CONCAT_INNER(a, b)
#define OT_DECLARE(what)                                                   \
  static const bool OT_CONCAT(ot_op_declared_, __COUNTER__) = [] {        \
    what;                                                                   \
    return true;                                                            \
  }()
#define OT_RECORD(domain, op_type) ::onnxtrain::OpRegistry::instance().declare(domain, op_type)

// ONNXTRAIN_KERNEL("", "Relu", kernel_factory<ReluKernel>(), Recompute::Cheap, Rounding::PerValue),
// or kernel_factory(&relu_fn): every kernel states whether backward may recompute it and how its
// rounding error grows (op_record.h).
#define ONNXTRAIN_KERNEL(domain, op_type, factory, recompute, rounding)                       \
  static const bool OT_CONCAT(ot_kernel_registered_, __COUNTER__) =                           \
      ::onnxtrain::OpRegistry::instance().add_kernel(domain, op_type, factory, ::onnxtrain::recompute, \
                                                     ::onnxtrain::rounding)

// ONNXTRAIN_GRADIENT("", "Relu", relu_gradient): the rule emits the backward nodes.
#define ONNXTRAIN_GRADIENT(domain, op_type, rule)                                \
  static const bool OT_CONCAT(ot_gradient_registered_, __COUNTER__) =           \
      ::onnxtrain::OpRegistry::instance().add_gradient(domain, op_type, rule)

// ONNXTRAIN_ZERO_GRADIENT("", "Sign"): differentiable with gradient zero, as in PyTorch.
#define ONNXTRAIN_ZERO_GRADIENT(domain, op_type)                                   \
  OT_DECLARE(::onnxtrain::OpRegistry::instance().add_gradient(domain, op_type,     \
                                                              &::onnxtrain::zero_gradient_rule); \
             OT_RECORD(domain, op_type).zero_gradient = true)

// ONNXTRAIN_DIFFERENTIABLE_INPUT("", "GridSample", 1): input 1 receives a gradient although
// ONNX's schema calls it non-differentiable.
#define ONNXTRAIN_DIFFERENTIABLE_INPUT(domain, op_type, index) \
  OT_DECLARE(OT_RECORD(domain, op_type).differentiable_inputs.push_back(index))

// ONNXTRAIN_NOT_DIFFERENTIABLE("", "RandomUniformLike"): its inputs never receive a gradient.
#define ONNXTRAIN_NOT_DIFFERENTIABLE(domain, op_type) OT_DECLARE(OT_RECORD(domain, op_type).not_differentiable = true)

// ONNXTRAIN_GRADIENT_REFUSED("", "QuantizeLinear", "why"): training through it is refused.
#define ONNXTRAIN_GRADIENT_REFUSED(domain, op_type, why) OT_DECLARE(OT_RECORD(domain, op_type).gradient_refused = why)

// ONNXTRAIN_OUTPUT_DIFFERENTIABILITY(domain, op, predicate): see OutputDifferentiability.
#define ONNXTRAIN_OUTPUT_DIFFERENTIABILITY(domain, op_type, predicate) \
  OT_DECLARE(OT_RECORD(domain, op_type).output_differentiability = predicate)

// ONNXTRAIN_RECORDS_REQUIRES_GRAD(domain, op): autodiff annotates its nodes' inputs.
#define ONNXTRAIN_RECORDS_REQUIRES_GRAD(domain, op_type) \
  OT_DECLARE(OT_RECORD(domain, op_type).records_requires_grad = true)

// ONNXTRAIN_NATIVE_16BIT_FLOATS("", "Transpose", kBothHalfFloats): its kernel handles these
// 16-bit float types itself, so the executor does not widen them.
#define ONNXTRAIN_NATIVE_16BIT_FLOATS(domain, op_type, ...)                                \
  static const bool OT_CONCAT(ot_native_16bit_floats_registered_, __COUNTER__) =         \
      ::onnxtrain::OpRegistry::instance().add_native_16bit_floats(domain, op_type, __VA_ARGS__)

// ONNXTRAIN_FLOAT32_SUMS(domain, "ReduceSumTo"): its node writes float32 sums given to = FLOAT.
#define ONNXTRAIN_FLOAT32_SUMS(domain, op_type) OT_DECLARE(OT_RECORD(domain, op_type).float32_sums = true)

// ONNXTRAIN_RANDOM_DRAW("", "Bernoulli"): its results are random draws (Repeatability).
#define ONNXTRAIN_RANDOM_DRAW(domain, op_type) \
  OT_DECLARE(OT_RECORD(domain, op_type).repeatability = ::onnxtrain::Repeatability::RandomDraw)

// ONNXTRAIN_RUNS_USER_CODE(domain, "PythonOp"): it runs code the engine cannot see (Repeatability).
#define ONNXTRAIN_RUNS_USER_CODE(domain, op_type) \
  OT_DECLARE(OT_RECORD(domain, op_type).repeatability = ::onnxtrain::Repeatability::UserCode)

// ONNXTRAIN_AUDITED_OUTPUTS("", "TopK", topk_audited_output): see AuditedOutputKind.
#define ONNXTRAIN_AUDITED_OUTPUTS(domain, op_type, kind) OT_DECLARE(OT_RECORD(domain, op_type).audited_output = kind)

// ONNXTRAIN_ELEMENTWISE("", "Exp", lower_exp): FusedElementwise runs its nodes through the
// instruction the lowering picks (elementwise_instruction.h).
#define ONNXTRAIN_ELEMENTWISE(domain, op_type, lowering) OT_DECLARE(OT_RECORD(domain, op_type).elementwise = lowering)

// ONNXTRAIN_INSTRUCTION(kExpInstruction): makes the instruction known by its name.
#define ONNXTRAIN_INSTRUCTION(instruction)                                   \
  static const bool OT_CONCAT(ot_instruction_registered_, __COUNTER__) =    \
      ::onnxtrain::OpRegistry::instance().add_instruction(instruction)
