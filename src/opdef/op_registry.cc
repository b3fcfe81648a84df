#include "opdef/op_registry.h"

#include <algorithm>
#include <tuple>

namespace onnxtrain {

OpRegistry& OpRegistry::instance() {
  static OpRegistry registry;
  return registry;
}

std::string OpRegistry::key(const std::string& domain, const std::string& op_type) {
  return domain + "::" + op_type;
}

OpRecord& OpRegistry::declare(const std::string& domain, const std::string& op_type) {
  OpRecord& record = records_[key(domain, op_type)];
  if (record.op_type.empty()) {
    record.domain = domain;
    record.op_type = op_type;
  }
  return record;
}

bool OpRegistry::add_kernel(const std::string& domain, const std::string& op_type, KernelFactory factory,
                            Recompute recompute, Rounding rounding) {
  OpRecord& record = declare(domain, op_type);
  OT_CHECK(!record.kernel, "kernel for ", op_type, " registered twice");
  record.kernel = std::move(factory);
  record.recompute = recompute;
  record.rounding = rounding;
  return true;
}

bool OpRegistry::add_gradient(const std::string& domain, const std::string& op_type, GradientRule rule) {
  OpRecord& record = declare(domain, op_type);
  OT_CHECK(!record.gradient, "gradient for ", op_type, " registered twice");
  record.gradient = rule;
  return true;
}

bool OpRegistry::add_instruction(const ElementwiseInstruction& instruction) {
  OT_CHECK(instruction.arity == 1 || instruction.arity == 2, "instruction ", instruction.name, " has arity ",
           instruction.arity);
  OT_CHECK(instructions_.emplace(instruction.name, &instruction).second, "instruction ", instruction.name,
           " registered twice");
  return true;
}

bool OpRegistry::add_native_16bit_floats(const std::string& domain, const std::string& op_type,
                                         const std::vector<DType>& types) {
  for (DType t : types)
    OT_CHECK(is_16bit_float(t), domain, "::", op_type, ": ", dtype_name(t), " is not a 16-bit float type");
  auto& native = declare(domain, op_type).native_16bit_floats;
  native.insert(native.end(), types.begin(), types.end());
  return true;
}

const OpRecord* OpRegistry::find(const std::string& domain, const std::string& op_type) const {
  auto it = records_.find(key(domain, op_type));
  return it == records_.end() ? nullptr : &it->second;
}

const ElementwiseInstruction* OpRegistry::instruction(const std::string& name) const {
  auto it = instructions_.find(name);
  return it == instructions_.end() ? nullptr : it->second;
}

const KernelFactory* OpRegistry::kernel(const std::string& domain, const std::string& op_type) const {
  const OpRecord* record = find(domain, op_type);
  return record && record->kernel ? &record->kernel : nullptr;
}

GradientRule OpRegistry::gradient(const std::string& domain, const std::string& op_type) const {
  const OpRecord* record = find(domain, op_type);
  return record ? record->gradient : nullptr;
}

bool OpRegistry::computes_natively(const std::string& domain, const std::string& op_type, DType type) const {
  const OpRecord* record = find(domain, op_type);
  return record && record->computes_natively(type);
}

bool OpRegistry::writes_float32_sums(const std::string& domain, const std::string& op_type) const {
  const OpRecord* record = find(domain, op_type);
  return record && record->float32_sums;
}

std::vector<const OpRecord*> OpRegistry::records() const {
  std::vector<const OpRecord*> out;
  for (const auto& kv : records_) out.push_back(&kv.second);
  std::sort(out.begin(), out.end(), [](const OpRecord* a, const OpRecord* b) {
    return std::tie(a->domain, a->op_type) < std::tie(b->domain, b->op_type);
  });
  return out;
}

std::vector<std::string> OpRegistry::instruction_names() const {
  std::vector<std::string> names;
  for (const auto& kv : instructions_) names.push_back(kv.first);
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<std::pair<std::string, std::string>> OpRegistry::ops_with_kernels() const {
  std::vector<std::pair<std::string, std::string>> out;
  for (const OpRecord* r : records())
    if (r->kernel) out.emplace_back(r->domain, r->op_type);
  return out;
}

std::vector<std::pair<std::string, std::string>> OpRegistry::ops_with_gradients() const {
  std::vector<std::pair<std::string, std::string>> out;
  for (const OpRecord* r : records())
    if (r->gradient) out.emplace_back(r->domain, r->op_type);
  return out;
}

bool OpRecord::computes_natively(DType type) const {
  return std::find(native_16bit_floats.begin(), native_16bit_floats.end(), type) != native_16bit_floats.end();
}

std::string OpRecord::missing() const {
  std::string out;
  auto lack = [&out](const char* what) { out += (out.empty() ? "" : "; ") + std::string(what); };
  if (kernel && recompute == Recompute::Undeclared) lack("whether backward may recompute it (Recompute)");
  if (kernel && rounding == Rounding::Undeclared) lack("how its rounding error grows (Rounding)");
  if (!kernel && (recompute != Recompute::Undeclared || elementwise || !native_16bit_floats.empty() || float32_sums ||
                  audited_output))
    lack("a kernel, for the properties of its kernel that it declares");
  if (zero_gradient && gradient != &zero_gradient_rule) lack("the zero gradient rule it declares");
  if (!gradient_refused.empty() && gradient) lack("a consistent gradient: it has a rule and refuses gradients");
  return out;
}

bool is_random_op(const Node& n) {
  const OpRecord* record = OpRegistry::instance().find(n);
  return record && record->repeatability == Repeatability::RandomDraw;
}

bool is_unrepeatable_op(const Node& n) {
  const OpRecord* record = OpRegistry::instance().find(n);
  return record && record->repeatability != Repeatability::Deterministic;
}

bool has_unrepeatable_ops(const Graph& g) {
  for (const Node& n : g.nodes) {
    if (is_unrepeatable_op(n)) return true;
    for (const auto& kv : n.attrs)
      if (kv.second.kind == Attribute::Kind::Graph && kv.second.g && has_unrepeatable_ops(*kv.second.g)) return true;
  }
  return false;
}

}  // namespace onnxtrain
