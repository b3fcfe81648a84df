#include "runtime/program.h"

#include <map>
#include <set>

#include <onnx/defs/schema.h>

#include "opdef/op_registry.h"
#include "runtime/half_compute.h"

namespace onnxtrain {
namespace {

// For each output of n, the first input given (not omitted) whose formal parameter has the same
// type constraint ("T2") in n's schema; -1 where none does, or n has no schema.
std::vector<int> output_type_sources(const Node& n, int opset) {
  std::vector<int> sources(n.outputs.size(), -1);
  const onnx::OpSchema* schema = onnx::OpSchemaRegistry::Schema(n.op_type, opset, n.domain);
  if (!schema || schema->inputs().empty() || schema->outputs().empty()) return sources;
  const auto& ins = schema->inputs();
  const auto& outs = schema->outputs();
  for (size_t o = 0; o < n.outputs.size(); ++o) {
    const std::string& constraint = outs[std::min(o, outs.size() - 1)].GetTypeStr();
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      if (!n.inputs[i].empty() && ins[std::min(i, ins.size() - 1)].GetTypeStr() == constraint) {
        sources[o] = static_cast<int>(i);
        break;
      }
    }
  }
  return sources;
}

}  // namespace

DType KernelInfo::input_dtype(size_t i) const {
  if (!node.has_input(i)) return DType::Undefined;
  const ValueInfo* vi = graph.info(node.inputs[i]);
  return vi ? vi->dtype : DType::Undefined;
}

DType KernelInfo::output_dtype(size_t i) const {
  if (i >= node.outputs.size() || node.outputs[i].empty()) return DType::Undefined;
  const ValueInfo* vi = graph.info(node.outputs[i]);
  return vi ? vi->dtype : DType::Undefined;
}

void check_kernels_exist(const Graph& graph) {
  std::map<std::string, std::vector<std::string>> missing;
  const auto& registry = OpRegistry::instance();
  for (const auto& n : graph.nodes) {
    if (registry.kernel(n.domain, n.op_type)) continue;
    std::string op = (n.domain.empty() ? "" : n.domain + "::") + n.op_type + " (opset " +
                     std::to_string(graph.opset(n.domain)) + ")";
    missing[op].push_back("'" + (n.name.empty() ? n.outputs.at(0) : n.name) + "'");
  }
  if (missing.empty()) return;
  std::string msg = "onnxtrain has no kernel for ";
  bool first = true;
  for (const auto& kv : missing) {
    msg += (first ? "" : "; ") + kv.first + ", used by node";
    msg += kv.second.size() > 1 ? "s " : " ";
    for (size_t i = 0; i < kv.second.size() && i < 5; ++i) msg += (i ? ", " : "") + kv.second[i];
    if (kv.second.size() > 5) msg += ", ...";
    first = false;
  }
  throw UnsupportedError(msg);
}

int Program::intern(const std::string& name) {
  auto it = value_ids_.find(name);
  if (it != value_ids_.end()) return it->second;
  int id = static_cast<int>(value_names_.size());
  value_names_.push_back(name);
  value_ids_.emplace(name, id);
  placement_.push_back(Placement::Arena);
  last_use_.push_back(-1);
  producer_.push_back(-1);
  return id;
}

int Program::value_id(const std::string& name) const {
  auto it = value_ids_.find(name);
  OT_CHECK(it != value_ids_.end(), "no value named '", name, "' in graph '", graph_.name, "'");
  return it->second;
}

Program::Program(Graph graph, const std::vector<std::string>& standalone_values) : graph_(std::move(graph)) {
  check_kernels_exist(graph_);
  for (const auto& v : graph_.inputs) placement_[intern(v)] = Placement::External;
  for (const auto& name : graph_.initializer_order) {
    int id = intern(name);
    if (placement_[id] == Placement::External) continue;  // an input with a default: the caller's wins
    placement_[id] = Placement::Constant;
    constants_.emplace_back(id, graph_.initializers.at(name));
  }
  const auto& registry = OpRegistry::instance();
  int anonymous = 0;
  for (size_t k = 0; k < graph_.nodes.size(); ++k) {
    const Node& n = graph_.nodes[k];
    CompiledNode cn;
    cn.node = &n;
    cn.opset = graph_.opset(n.domain);
    for (const auto& v : n.inputs) {
      if (v.empty()) {
        cn.inputs.push_back(-1);
        continue;
      }
      auto it = value_ids_.find(v);
      OT_CHECK(it != value_ids_.end(), n.describe(), ": input '", v, "' is used before it is defined");
      cn.inputs.push_back(it->second);
      last_use_[it->second] = static_cast<int>(k);
    }
    for (const auto& v : n.outputs) {
      std::string name = v.empty() ? "<unused output " + std::to_string(anonymous++) + ">" : v;
      OT_CHECK(!value_ids_.count(name), n.describe(), ": output '", name, "' is defined twice");
      int id = intern(name);
      producer_[id] = static_cast<int>(k);
      cn.outputs.push_back(id);
    }
    cn.widen_float16 = computes_in_float32(n.domain, n.op_type, DType::Float16);
    cn.widen_bfloat16 = computes_in_float32(n.domain, n.op_type, DType::BFloat16);
    if (cn.widen_float16 || cn.widen_bfloat16) cn.output_type_sources = output_type_sources(n, cn.opset);
    for (const auto& v : n.outputs) {
      const ValueInfo* vi = v.empty() ? nullptr : graph_.info(v);
      cn.float32_outputs.push_back(vi && vi->dtype == DType::Float32);
    }
    try {
      cn.kernel = (*registry.kernel(n.domain, n.op_type))(KernelInfo{n, cn.opset, graph_});
    } catch (const UnsupportedError& e) {
      throw UnsupportedError(str_cat(n.describe(), " (opset ", cn.opset, "): ", e.what()));
    } catch (const Error& e) {
      OT_THROW(n.describe(), " (opset ", cn.opset, "): ", e.what());
    }
    nodes_.push_back(std::move(cn));
  }
  for (const auto& v : graph_.outputs) {
    int id = value_id(v);
    if (placement_[id] == Placement::Arena) placement_[id] = Placement::Standalone;
  }
  for (const auto& v : standalone_values) {
    int id = value_id(v);
    if (placement_[id] == Placement::Arena) placement_[id] = Placement::Standalone;
  }
  // Standalone values stay until the caller takes them; arena values die after their last reader.
  release_after_.resize(nodes_.size());
  for (int id = 0; id < num_values(); ++id) {
    if (placement_[id] != Placement::Arena || producer_[id] < 0) continue;
    int at = std::max(last_use_[id], producer_[id]);
    release_after_[static_cast<size_t>(at)].push_back(id);
  }
}

}  // namespace onnxtrain
