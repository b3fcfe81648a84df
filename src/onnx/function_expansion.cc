#include "onnx/function_expansion.h"

#include <onnx/defs/schema.h>

#include <unordered_map>
#include <unordered_set>

#include "core/logging.h"
#include "onnx/proto_convert.h"
#include "onnx/shape_inference.h"
#include "onnx/subgraph_closure.h"
#include "opdef/op_registry.h"

namespace onnxtrain {
namespace {

// ONNX's function bodies nest two or three deep; a deeper chain means a body that (indirectly)
// uses its own op, which would never end.
constexpr int kMaxExpansionDepth = 8;

std::string normalized_domain(const std::string& domain) { return domain == "ai.onnx" ? "" : domain; }

const onnx::OpSchema* function_schema(const std::string& domain, const std::string& op_type, int opset) {
  if (OpRegistry::instance().kernel(domain, op_type)) return nullptr;
  // Ops with bodies (SequenceMap's function is a Loop) run in their closed form instead.
  if (domain.empty() && is_closed_op_type(op_type)) return nullptr;
  const onnx::OpSchema* schema = onnx::OpSchemaRegistry::Schema(op_type, opset, domain);
  if (!schema || !(schema->HasFunction() || schema->HasContextDependentFunction())) return nullptr;
  return schema;
}

// Every value and node name of a graph and its subgraphs: a fresh name must not shadow an outer
// value inside a subgraph either.
class NameSource {
 public:
  explicit NameSource(const Graph& g) { collect(g); }

  std::string fresh(const std::string& base) {
    std::string candidate = base;
    for (size_t n = 1; candidate.empty() || used_.count(candidate); ++n) candidate = base + "_" + std::to_string(n);
    used_.insert(candidate);
    return candidate;
  }

 private:
  void collect(const Graph& g) {
    used_.insert(g.inputs.begin(), g.inputs.end());
    used_.insert(g.outputs.begin(), g.outputs.end());
    for (const auto& kv : g.initializers) used_.insert(kv.first);
    for (const auto& kv : g.value_info) used_.insert(kv.first);
    for (const Node& n : g.nodes) {
      used_.insert(n.name);
      used_.insert(n.inputs.begin(), n.inputs.end());
      used_.insert(n.outputs.begin(), n.outputs.end());
      for (const auto& kv : n.attrs)
        if (kv.second.kind == Attribute::Kind::Graph && kv.second.g) collect(*kv.second.g);
    }
  }

  std::unordered_set<std::string> used_;
};

using Renaming = std::unordered_map<std::string, std::string>;

// A body node's subgraph (a Loop body inside a function) may read the function's values from its
// outer scope; those reads follow the renaming unless the subgraph defines the name itself.
void rename_free_values(Graph& g, const Renaming& renaming, std::unordered_set<std::string> defined) {
  defined.insert(g.inputs.begin(), g.inputs.end());
  for (const auto& kv : g.initializers) defined.insert(kv.first);
  for (const Node& n : g.nodes) defined.insert(n.outputs.begin(), n.outputs.end());
  auto rename = [&](std::string& v) {
    if (v.empty() || defined.count(v)) return;
    auto it = renaming.find(v);
    if (it != renaming.end()) v = it->second;
  };
  for (Node& n : g.nodes) {
    for (std::string& v : n.inputs) rename(v);
    for (auto& kv : n.attrs)
      if (kv.second.kind == Attribute::Kind::Graph && kv.second.g) rename_free_values(*kv.second.g, renaming, defined);
  }
  for (std::string& v : g.outputs) rename(v);
}

class FunctionExpander {
 public:
  FunctionExpander(Graph& top, NameSource& names) : top_(top), names_(names) {}

  bool needs_expansion(const Graph& g) const {
    for (const Node& n : g.nodes) {
      if (schema_for(n)) return true;
      for (const auto& kv : n.attrs)
        if (kv.second.kind == Attribute::Kind::Graph && kv.second.g && needs_expansion(*kv.second.g)) return true;
    }
    return false;
  }

  void expand_graph(Graph& g) {
    if (!needs_expansion(g)) return;
    std::vector<Node> old = std::move(g.nodes);
    g.nodes.clear();
    std::vector<Node> expanded;
    for (Node& n : old) expand_node(std::move(n), 0, expanded);
    for (Node& n : expanded) g.add_node(std::move(n));
  }

 private:
  const onnx::OpSchema* schema_for(const Node& n) const {
    auto opset = top_.opsets.find(n.domain);
    if (opset == top_.opsets.end()) return nullptr;
    return function_schema(n.domain, n.op_type, opset->second);
  }

  void expand_node(Node node, int depth, std::vector<Node>& out) {
    // Subgraphs may be shared with copies of the graph: expand a copy, never in place.
    for (auto& kv : node.attrs) {
      Attribute& a = kv.second;
      if (a.kind != Attribute::Kind::Graph || !a.g || !needs_expansion(*a.g)) continue;
      auto copy = std::make_shared<Graph>(*a.g);
      expand_graph(*copy);
      a.g = copy;
    }
    const onnx::OpSchema* schema = schema_for(node);
    onnx::FunctionProto body;
    if (!schema || !function_body(node, *schema, body) || !body_usable(node, body)) {
      out.push_back(std::move(node));
      return;
    }
    OT_CHECK(depth < kMaxExpansionDepth, node.describe(), ": function expansion nests more than ", kMaxExpansionDepth,
             " levels deep; the function bodies of ", node.op_type, " seem to use themselves");
    const std::string prefix = (node.name.empty() ? node.op_type : node.name) + "/";
    Renaming renaming;
    for (int i = 0; i < body.input_size(); ++i)
      renaming[body.input(i)] = static_cast<size_t>(i) < node.inputs.size() ? node.inputs[static_cast<size_t>(i)] : "";
    for (int i = 0; i < body.output_size(); ++i) {
      const bool wanted = static_cast<size_t>(i) < node.outputs.size() && !node.outputs[static_cast<size_t>(i)].empty();
      renaming[body.output(i)] = wanted ? node.outputs[static_cast<size_t>(i)] : names_.fresh(prefix + body.output(i));
    }
    for (const onnx::NodeProto& bn : body.node()) {
      Node n;
      n.op_type = bn.op_type();
      n.domain = normalized_domain(bn.domain());
      n.name = names_.fresh(prefix + (bn.name().empty() ? bn.op_type() : bn.name()));
      n.in_backward = node.in_backward;
      for (const std::string& v : bn.input()) {
        if (v.empty()) {
          n.inputs.emplace_back();
          continue;
        }
        auto it = renaming.find(v);
        OT_CHECK(it != renaming.end(), node.describe(), ": the function body of ", node.op_type, " reads '", v,
                 "' before any of its nodes defines it");
        n.inputs.push_back(it->second);
      }
      for (const std::string& v : bn.output()) {
        if (v.empty()) {
          n.outputs.emplace_back();
          continue;
        }
        auto it = renaming.find(v);
        if (it == renaming.end()) it = renaming.emplace(v, names_.fresh(prefix + v)).first;
        n.outputs.push_back(it->second);
      }
      for (const onnx::AttributeProto& a : bn.attribute()) resolve_attribute(node, *schema, a, renaming, n);
      expand_node(std::move(n), depth + 1, out);
    }
  }

  bool function_body(const Node& node, const onnx::OpSchema& schema, onnx::FunctionProto& body) const {
    if (schema.HasFunction()) {
      body = *schema.GetFunction();
      return true;
    }
    // The body depends on the node's attributes and input types: give it what is declared.
    onnx::NodeProto proto;
    node_to_proto(node, &proto);
    std::vector<onnx::TypeProto> input_types;
    for (const std::string& v : node.inputs) {
      input_types.emplace_back();
      const ValueInfo* info = v.empty() ? nullptr : top_.info(v);
      // libonnx's body builders read every input's type unchecked (the fuzzer found SequenceMap's).
      if (!info || info->dtype == DType::Undefined) return false;
      onnx::ValueInfoProto vi;
      value_info_to_proto(v, info, &vi);
      input_types.back() = vi.type();
    }
    onnx::FunctionBodyBuildContextImpl ctx(proto, input_types);
    try {
      return schema.BuildContextDependentFunction(ctx, body);
    } catch (const std::exception& e) {
      log(LogLevel::Verbose, "function expansion skipped ", node.describe(), ": ", e.what());
      return false;
    }
  }

  // A body is written against its own opset imports; each of its ops must mean the same at the
  // versions the model imports, which is what the kernels will read.
  bool body_usable(const Node& node, const onnx::FunctionProto& body) {
    if (node.inputs.size() > static_cast<size_t>(body.input_size()) ||
        node.outputs.size() > static_cast<size_t>(body.output_size()))
      return false;
    std::unordered_map<std::string, int> body_opsets;
    for (const auto& imp : body.opset_import()) body_opsets[normalized_domain(imp.domain())] = static_cast<int>(imp.version());
    for (const onnx::NodeProto& bn : body.node()) {
      const std::string domain = normalized_domain(bn.domain());
      auto model = top_.opsets.find(domain);
      auto own = body_opsets.find(domain);
      if (own == body_opsets.end()) {
        if (model != top_.opsets.end()) continue;  // the body takes the model's version
        log(LogLevel::Verbose, "function expansion skipped ", node.describe(), ": its body uses domain '", domain,
            "' without a version");
        return false;
      }
      if (model == top_.opsets.end()) continue;  // imported below at the body's version
      const onnx::OpSchema* in_body = onnx::OpSchemaRegistry::Schema(bn.op_type(), own->second, domain);
      const onnx::OpSchema* in_model = onnx::OpSchemaRegistry::Schema(bn.op_type(), model->second, domain);
      if (in_body != in_model) {
        log(LogLevel::Verbose, "function expansion skipped ", node.describe(), ": its body's ", bn.op_type(),
            " is version ", in_body ? in_body->SinceVersion() : 0, ", the model's is version ",
            in_model ? in_model->SinceVersion() : 0);
        return false;
      }
    }
    for (const auto& [domain, version] : body_opsets)
      if (!top_.opsets.count(domain)) top_.opsets[domain] = version;
    return true;
  }

  // Attributes of a body node: literal ones as written, references (ref_attr_name) to the
  // function's attributes taken from the node or, when it has none, the schema's default. A
  // reference to an attribute that is neither leaves the body node without it, as ONNX says.
  void resolve_attribute(const Node& node, const onnx::OpSchema& schema, const onnx::AttributeProto& a,
                         const Renaming& renaming, Node& n) const {
    if (!a.ref_attr_name().empty()) {
      auto given = node.attrs.find(a.ref_attr_name());
      if (given != node.attrs.end()) {
        n.attrs[a.name()] = given->second;
        return;
      }
      auto formal = schema.attributes().find(a.ref_attr_name());
      if (formal != schema.attributes().end() && formal->second.default_value.type() != onnx::AttributeProto::UNDEFINED)
        n.attrs[a.name()] = attribute_from_proto(formal->second.default_value);
      return;
    }
    Attribute value;
    try {
      value = attribute_from_proto(a);
    } catch (const UnsupportedError& e) {
      throw UnsupportedError(str_cat(node.describe(), ": expanding its function body: ", e.what()));
    }
    if (value.kind == Attribute::Kind::Graph && value.g) rename_free_values(*value.g, renaming, {});
    n.attrs[a.name()] = std::move(value);
  }

  Graph& top_;
  NameSource& names_;
};

}  // namespace

bool is_expandable_function(const std::string& domain, const std::string& op_type, int opset) {
  return function_schema(domain, op_type, opset) != nullptr;
}

void expand_functions(Graph& graph) {
  NameSource names(graph);
  FunctionExpander expander(graph, names);
  if (!expander.needs_expansion(graph)) return;
  // Bodies built from input types need those types; declarations alone rarely give them.
  bool context_dependent = false;
  for (const Node& n : graph.nodes) {
    auto opset = graph.opsets.find(n.domain);
    if (opset == graph.opsets.end()) continue;
    const onnx::OpSchema* s = function_schema(n.domain, n.op_type, opset->second);
    context_dependent = context_dependent || (s && !s->HasFunction());
  }
  if (context_dependent) infer_shapes(graph);
  expander.expand_graph(graph);
}

}  // namespace onnxtrain
