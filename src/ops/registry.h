#pragma once
// Where op families register their kernels and gradient rules: each from its own source file,
// through the macros below. Nothing else lists the ops.
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ops/kernel.h"

namespace onnxtrain {

class GradBuilder;

// Both 16-bit float types, for ONNXTRAIN_NATIVE_16BIT_FLOATS.
inline const std::vector<DType> kBothHalfFloats = {DType::Float16, DType::BFloat16};
using GradientRule = void (*)(GradBuilder&);
// Whether output `index` of `node` carries gradient, for ops that decide per node (PythonOp: the
// user's Function marked some outputs non-differentiable).
using OutputDifferentiability = bool (*)(const Node& node, size_t index);

class OpRegistry {
 public:
  static OpRegistry& instance();

  bool add_kernel(const std::string& domain, const std::string& op_type, KernelFactory factory);
  bool add_gradient(const std::string& domain, const std::string& op_type, GradientRule rule);
  // Ops that ONNX's schema calls non-differentiable but PyTorch differentiates as constant zero
  // (sign, round, floor, ceil): their outputs keep requires_grad and their gradient is zeros.
  bool add_zero_gradient(const std::string& domain, const std::string& op_type);
  bool has_zero_gradient(const std::string& domain, const std::string& op_type) const;
  // Inputs that onnxtrain differentiates although ONNX's schema calls them non-differentiable
  // (GridSample's grid, as PyTorch does).
  bool add_differentiable_input(const std::string& domain, const std::string& op_type, int index);
  bool is_differentiable_input(const std::string& domain, const std::string& op_type, int index) const;
  // Ops whose outputs are constants to autodiff whatever ONNX's schema says (random draws that
  // read only their input's shape): no gradient flows into their inputs.
  bool add_not_differentiable(const std::string& domain, const std::string& op_type);
  bool is_not_differentiable(const std::string& domain, const std::string& op_type) const;
  // Ops whose outputs are integers standing for a float input (QuantizeLinear): the chain of
  // gradients would end there without a word, so differentiating through one is an error.
  bool add_gradient_refused(const std::string& domain, const std::string& op_type, const std::string& why);
  const std::string* gradient_refused(const std::string& domain, const std::string& op_type) const;

  bool add_output_differentiability(const std::string& domain, const std::string& op_type,
                                    OutputDifferentiability predicate);
  OutputDifferentiability output_differentiability(const std::string& domain, const std::string& op_type) const;
  // Ops whose kernel must know which inputs require grad (PythonOp, for ctx.needs_input_grad):
  // autodiff writes that into the node as the ints attribute "input_requires_grad".
  bool add_records_requires_grad(const std::string& domain, const std::string& op_type);
  bool records_requires_grad(const std::string& domain, const std::string& op_type) const;

  // The 16-bit float types (float16, bfloat16) an op's kernel reads and writes itself: data
  // movement, Cast, the random draws, and kernels with their own bfloat16 path. Every other
  // 16-bit input is widened to float32 for the kernel and its outputs rounded back once
  // (runtime/half_compute.h).
  bool add_native_16bit_floats(const std::string& domain, const std::string& op_type, std::vector<DType> types);
  bool computes_natively(const std::string& domain, const std::string& op_type, DType type) const;

  // Ops that sum 16-bit values in float32 and round the sums once (the gradients' products and
  // reductions), and write the float32 sums unrounded when their node has the attribute to =
  // FLOAT: passes/float32_sums.cc gives them the Cast that would widen their output.
  bool add_float32_sums(const std::string& domain, const std::string& op_type);
  bool writes_float32_sums(const std::string& domain, const std::string& op_type) const;

  const KernelFactory* kernel(const std::string& domain, const std::string& op_type) const;
  GradientRule gradient(const std::string& domain, const std::string& op_type) const;

  // (domain, op_type) pairs, sorted: for conformance reports and coverage tests.
  std::vector<std::pair<std::string, std::string>> ops_with_kernels() const;
  std::vector<std::pair<std::string, std::string>> ops_with_gradients() const;

 private:
  static std::string key(const std::string& domain, const std::string& op_type);
  std::unordered_map<std::string, KernelFactory> kernels_;
  std::unordered_map<std::string, GradientRule> gradients_;
  std::unordered_map<std::string, bool> zero_gradients_;
  std::unordered_map<std::string, bool> differentiable_inputs_;
  std::unordered_map<std::string, bool> not_differentiable_;
  std::unordered_map<std::string, std::string> gradient_refused_;
  std::unordered_map<std::string, OutputDifferentiability> output_differentiability_;
  std::unordered_map<std::string, bool> records_requires_grad_;
  std::unordered_map<std::string, std::vector<DType>> native_16bit_floats_;
  std::unordered_map<std::string, bool> float32_sums_;
};

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

// ONNXTRAIN_KERNEL("", "Relu", kernel_factory<ReluKernel>()) or kernel_factory(&relu_fn).
#define ONNXTRAIN_KERNEL(domain, op_type, factory)                               \
  static const bool OT_CONCAT(ot_kernel_registered_, __COUNTER__) =             \
      ::onnxtrain::OpRegistry::instance().add_kernel(domain, op_type, factory)

// ONNXTRAIN_ZERO_GRADIENT("", "Sign"): differentiable with gradient zero, as in PyTorch.
#define ONNXTRAIN_ZERO_GRADIENT(domain, op_type)                                  \
  static const bool OT_CONCAT(ot_zero_gradient_registered_, __COUNTER__) =       \
      ::onnxtrain::OpRegistry::instance().add_zero_gradient(domain, op_type)

// ONNXTRAIN_DIFFERENTIABLE_INPUT("", "GridSample", 1): input 1 receives a gradient although
// ONNX's schema calls it non-differentiable.
#define ONNXTRAIN_DIFFERENTIABLE_INPUT(domain, op_type, index)                      \
  static const bool OT_CONCAT(ot_differentiable_input_registered_, __COUNTER__) = \
      ::onnxtrain::OpRegistry::instance().add_differentiable_input(domain, op_type, index)

// ONNXTRAIN_NOT_DIFFERENTIABLE("", "RandomUniformLike"): its inputs never receive a gradient.
#define ONNXTRAIN_NOT_DIFFERENTIABLE(domain, op_type)                             \
  static const bool OT_CONCAT(ot_not_differentiable_registered_, __COUNTER__) = \
      ::onnxtrain::OpRegistry::instance().add_not_differentiable(domain, op_type)

// ONNXTRAIN_GRADIENT_REFUSED("", "QuantizeLinear", "why"): training through it is refused.
#define ONNXTRAIN_GRADIENT_REFUSED(domain, op_type, why)                          \
  static const bool OT_CONCAT(ot_gradient_refused_registered_, __COUNTER__) =    \
      ::onnxtrain::OpRegistry::instance().add_gradient_refused(domain, op_type, why)

// ONNXTRAIN_OUTPUT_DIFFERENTIABILITY(domain, op, predicate): see OutputDifferentiability.
#define ONNXTRAIN_OUTPUT_DIFFERENTIABILITY(domain, op_type, predicate)                  \
  static const bool OT_CONCAT(ot_output_differentiability_registered_, __COUNTER__) = \
      ::onnxtrain::OpRegistry::instance().add_output_differentiability(domain, op_type, predicate)

// ONNXTRAIN_RECORDS_REQUIRES_GRAD(domain, op): autodiff annotates its nodes' inputs.
#define ONNXTRAIN_RECORDS_REQUIRES_GRAD(domain, op_type)                          \
  static const bool OT_CONCAT(ot_records_requires_grad_registered_, __COUNTER__) = \
      ::onnxtrain::OpRegistry::instance().add_records_requires_grad(domain, op_type)

// ONNXTRAIN_NATIVE_16BIT_FLOATS("", "Transpose", kBothHalfFloats): its kernel handles these
// 16-bit float types itself, so the executor does not widen them.
#define ONNXTRAIN_NATIVE_16BIT_FLOATS(domain, op_type, ...)                                \
  static const bool OT_CONCAT(ot_native_16bit_floats_registered_, __COUNTER__) =         \
      ::onnxtrain::OpRegistry::instance().add_native_16bit_floats(domain, op_type, __VA_ARGS__)

// ONNXTRAIN_FLOAT32_SUMS(domain, "ReduceSumTo"): its node writes float32 sums given to = FLOAT.
#define ONNXTRAIN_FLOAT32_SUMS(domain, op_type)                                  \
  static const bool OT_CONCAT(ot_float32_sums_registered_, __COUNTER__) =       \
      ::onnxtrain::OpRegistry::instance().add_float32_sums(domain, op_type)

// ONNXTRAIN_GRADIENT("", "Relu", relu_gradient): the rule emits the backward nodes.
#define ONNXTRAIN_GRADIENT(domain, op_type, rule)                                \
  static const bool OT_CONCAT(ot_gradient_registered_, __COUNTER__) =           \
      ::onnxtrain::OpRegistry::instance().add_gradient(domain, op_type, rule)
