#include "ops/registry.h"

#include <algorithm>

#include "autodiff/grad_builder.h"

namespace onnxtrain {

OpRegistry& OpRegistry::instance() {
  static OpRegistry registry;
  return registry;
}

std::string OpRegistry::key(const std::string& domain, const std::string& op_type) {
  return domain + "::" + op_type;
}

bool OpRegistry::add_kernel(const std::string& domain, const std::string& op_type, KernelFactory factory) {
  OT_CHECK(!kernels_.count(key(domain, op_type)), "kernel for ", op_type, " registered twice");
  kernels_[key(domain, op_type)] = std::move(factory);
  return true;
}

bool OpRegistry::add_gradient(const std::string& domain, const std::string& op_type, GradientRule rule) {
  OT_CHECK(!gradients_.count(key(domain, op_type)), "gradient for ", op_type, " registered twice");
  gradients_[key(domain, op_type)] = rule;
  return true;
}

namespace {
void zero_gradient(GradBuilder& g) {
  for (int i = 0; i < g.num_inputs(); ++i)
    if (g.needs_input_grad(i)) g.set_input_grad(i, g.zeros_like(g.input(i)));
}
}  // namespace

bool OpRegistry::add_zero_gradient(const std::string& domain, const std::string& op_type) {
  zero_gradients_[key(domain, op_type)] = true;
  return add_gradient(domain, op_type, &zero_gradient);
}

bool OpRegistry::has_zero_gradient(const std::string& domain, const std::string& op_type) const {
  return zero_gradients_.count(key(domain, op_type)) > 0;
}

bool OpRegistry::add_native_16bit_floats(const std::string& domain, const std::string& op_type,
                                         std::vector<DType> types) {
  for (DType t : types)
    OT_CHECK(is_16bit_float(t), domain, "::", op_type, ": ", dtype_name(t),
             " is not a 16-bit float type");
  auto& known = native_16bit_floats_[key(domain, op_type)];
  known.insert(known.end(), types.begin(), types.end());
  return true;
}

bool OpRegistry::computes_natively(const std::string& domain, const std::string& op_type, DType type) const {
  auto it = native_16bit_floats_.find(key(domain, op_type));
  return it != native_16bit_floats_.end() && std::find(it->second.begin(), it->second.end(), type) != it->second.end();
}

bool OpRegistry::add_not_differentiable(const std::string& domain, const std::string& op_type) {
  not_differentiable_[key(domain, op_type)] = true;
  return true;
}

bool OpRegistry::is_not_differentiable(const std::string& domain, const std::string& op_type) const {
  return not_differentiable_.count(key(domain, op_type)) > 0;
}

bool OpRegistry::add_output_differentiability(const std::string& domain, const std::string& op_type,
                                              OutputDifferentiability predicate) {
  output_differentiability_[key(domain, op_type)] = predicate;
  return true;
}

OutputDifferentiability OpRegistry::output_differentiability(const std::string& domain,
                                                             const std::string& op_type) const {
  auto it = output_differentiability_.find(key(domain, op_type));
  return it == output_differentiability_.end() ? nullptr : it->second;
}

bool OpRegistry::add_records_requires_grad(const std::string& domain, const std::string& op_type) {
  records_requires_grad_[key(domain, op_type)] = true;
  return true;
}

bool OpRegistry::records_requires_grad(const std::string& domain, const std::string& op_type) const {
  return records_requires_grad_.count(key(domain, op_type)) > 0;
}

bool OpRegistry::add_float32_sums(const std::string& domain, const std::string& op_type) {
  float32_sums_[key(domain, op_type)] = true;
  return true;
}

bool OpRegistry::writes_float32_sums(const std::string& domain, const std::string& op_type) const {
  return float32_sums_.count(key(domain, op_type)) > 0;
}

bool OpRegistry::add_gradient_refused(const std::string& domain, const std::string& op_type, const std::string& why) {
  gradient_refused_[key(domain, op_type)] = why;
  return true;
}

const std::string* OpRegistry::gradient_refused(const std::string& domain, const std::string& op_type) const {
  auto it = gradient_refused_.find(key(domain, op_type));
  return it == gradient_refused_.end() ? nullptr : &it->second;
}

bool OpRegistry::add_differentiable_input(const std::string& domain, const std::string& op_type, int index) {
  differentiable_inputs_[key(domain, op_type) + "#" + std::to_string(index)] = true;
  return true;
}

bool OpRegistry::is_differentiable_input(const std::string& domain, const std::string& op_type, int index) const {
  return differentiable_inputs_.count(key(domain, op_type) + "#" + std::to_string(index)) > 0;
}

const KernelFactory* OpRegistry::kernel(const std::string& domain, const std::string& op_type) const {
  auto it = kernels_.find(key(domain, op_type));
  return it == kernels_.end() ? nullptr : &it->second;
}

GradientRule OpRegistry::gradient(const std::string& domain, const std::string& op_type) const {
  auto it = gradients_.find(key(domain, op_type));
  return it == gradients_.end() ? nullptr : it->second;
}

namespace {
template <typename Map>
std::vector<std::pair<std::string, std::string>> split_keys(const Map& m) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& kv : m) {
    size_t sep = kv.first.find("::");
    out.emplace_back(kv.first.substr(0, sep), kv.first.substr(sep + 2));
  }
  std::sort(out.begin(), out.end());
  return out;
}
}  // namespace

std::vector<std::pair<std::string, std::string>> OpRegistry::ops_with_kernels() const { return split_keys(kernels_); }
std::vector<std::pair<std::string, std::string>> OpRegistry::ops_with_gradients() const { return split_keys(gradients_); }

}  // namespace onnxtrain
