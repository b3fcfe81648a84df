#include "ir/graph.h"

#include <algorithm>
#include <queue>

namespace onnxtrain {

namespace {
const Attribute* find_attr(const Node& n, const std::string& key, Attribute::Kind kind) {
  auto it = n.attrs.find(key);
  if (it == n.attrs.end()) return nullptr;
  OT_CHECK(it->second.kind == kind, n.describe(), ": attribute '", key, "' has an unexpected kind");
  return &it->second;
}
}  // namespace

int64_t Node::attr_int(const std::string& key, int64_t fallback) const {
  const Attribute* a = find_attr(*this, key, Attribute::Kind::Int);
  return a ? a->i : fallback;
}
float Node::attr_float(const std::string& key, float fallback) const {
  const Attribute* a = find_attr(*this, key, Attribute::Kind::Float);
  return a ? a->f : fallback;
}
std::string Node::attr_string(const std::string& key, const std::string& fallback) const {
  const Attribute* a = find_attr(*this, key, Attribute::Kind::String);
  return a ? a->s : fallback;
}
std::vector<int64_t> Node::attr_ints(const std::string& key, std::vector<int64_t> fallback) const {
  const Attribute* a = find_attr(*this, key, Attribute::Kind::Ints);
  return a ? a->ints : fallback;
}
std::vector<float> Node::attr_floats(const std::string& key, std::vector<float> fallback) const {
  const Attribute* a = find_attr(*this, key, Attribute::Kind::Floats);
  return a ? a->floats : fallback;
}
std::vector<std::string> Node::attr_strings(const std::string& key, std::vector<std::string> fallback) const {
  const Attribute* a = find_attr(*this, key, Attribute::Kind::Strings);
  return a ? a->strings : fallback;
}

std::string Node::describe() const {
  std::string op = domain.empty() ? op_type : domain + "::" + op_type;
  return op + " node '" + (name.empty() ? (outputs.empty() ? "?" : outputs[0]) : name) + "'";
}

int Graph::opset(const std::string& domain) const {
  auto it = opsets.find(domain);
  return it == opsets.end() ? 0 : it->second;
}

const ValueInfo* Graph::info(const std::string& value) const {
  auto it = value_info.find(value);
  return it == value_info.end() ? nullptr : &it->second;
}

bool Graph::may_be_floating(const std::string& value) const {
  const ValueInfo* vi = info(value);
  return !vi || vi->dtype == DType::Undefined || is_floating(vi->dtype);
}

void Graph::add_initializer(const std::string& value, Tensor t) {
  if (!initializers.count(value)) initializer_order.push_back(value);
  ValueInfo& vi = value_info[value];
  vi.dtype = t.dtype();
  std::vector<Dim> dims;
  for (int64_t d : t.shape()) dims.push_back(Dim{d, ""});
  vi.shape = dims;
  initializers[value] = std::move(t);
  if (names_collected_) used_names_.insert(value);
}

bool Graph::is_input(const std::string& value) const {
  return std::find(inputs.begin(), inputs.end(), value) != inputs.end();
}

void Graph::collect_names() {
  for (const auto& v : inputs) used_names_.insert(v);
  for (const auto& kv : initializers) used_names_.insert(kv.first);
  for (const auto& kv : value_info) used_names_.insert(kv.first);
  for (const auto& n : nodes) {
    used_names_.insert(n.name);
    for (const auto& v : n.outputs) used_names_.insert(v);
    for (const auto& v : n.inputs) used_names_.insert(v);
  }
  names_collected_ = true;
}

std::string Graph::unique_name(const std::string& base) {
  if (!names_collected_) collect_names();
  std::string candidate = base;
  while (candidate.empty() || used_names_.count(candidate))
    candidate = base + "_" + std::to_string(++name_counter_);
  used_names_.insert(candidate);
  return candidate;
}

size_t Graph::add_node(Node node) {
  if (names_collected_) {
    used_names_.insert(node.name);
    for (const auto& v : node.outputs) used_names_.insert(v);
  }
  nodes.push_back(std::move(node));
  return nodes.size() - 1;
}

void Graph::remove_nodes(const std::vector<bool>& removed) {
  std::vector<Node> kept;
  kept.reserve(nodes.size());
  for (size_t k = 0; k < nodes.size(); ++k)
    if (k >= removed.size() || !removed[k]) kept.push_back(std::move(nodes[k]));
  nodes = std::move(kept);
}

namespace {
void collect_subgraph_reads(const Graph& g, std::unordered_set<std::string>& names) {
  for (const Node& n : g.nodes)
    for (const auto& [key, a] : n.attrs) {
      if (a.kind != Attribute::Kind::Graph || !a.g) continue;
      for (const Node& inner : a.g->nodes) names.insert(inner.inputs.begin(), inner.inputs.end());
      names.insert(a.g->outputs.begin(), a.g->outputs.end());
      collect_subgraph_reads(*a.g, names);
    }
}
}  // namespace

std::unordered_set<std::string> Graph::names_read_by_subgraphs() const {
  std::unordered_set<std::string> names;
  collect_subgraph_reads(*this, names);
  return names;
}

std::unordered_map<std::string, size_t> Graph::producers() const {
  std::unordered_map<std::string, size_t> out;
  for (size_t i = 0; i < nodes.size(); ++i)
    for (const auto& v : nodes[i].outputs)
      if (!v.empty()) out[v] = i;
  return out;
}

std::unordered_map<std::string, std::vector<size_t>> Graph::consumers() const {
  std::unordered_map<std::string, std::vector<size_t>> out;
  for (size_t i = 0; i < nodes.size(); ++i)
    for (const auto& v : nodes[i].inputs)
      if (!v.empty() && (out[v].empty() || out[v].back() != i)) out[v].push_back(i);
  return out;
}

void Graph::sort_topologically() {
  auto producer = producers();
  std::unordered_set<std::string> available(inputs.begin(), inputs.end());
  for (const auto& kv : initializers) available.insert(kv.first);

  // Kahn's algorithm keyed on original positions keeps an already valid order unchanged.
  std::vector<int> pending(nodes.size(), 0);
  std::vector<std::vector<size_t>> dependents(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (const auto& v : nodes[i].inputs) {
      if (v.empty() || available.count(v)) continue;
      auto it = producer.find(v);
      OT_CHECK(it != producer.end(), nodes[i].describe(), ": input '", v,
               "' is not a graph input, an initializer or the output of any node");
      ++pending[i];
      dependents[it->second].push_back(i);
    }
  }
  std::priority_queue<size_t, std::vector<size_t>, std::greater<size_t>> ready;
  for (size_t i = 0; i < nodes.size(); ++i)
    if (pending[i] == 0) ready.push(i);
  std::vector<Node> ordered;
  ordered.reserve(nodes.size());
  while (!ready.empty()) {
    size_t i = ready.top();
    ready.pop();
    for (size_t d : dependents[i])
      if (--pending[d] == 0) ready.push(d);
    ordered.push_back(std::move(nodes[i]));
  }
  if (ordered.size() != nodes.size()) {
    for (size_t i = 0; i < nodes.size(); ++i)
      if (pending[i] > 0) OT_THROW("the graph has a cycle through ", nodes[i].describe());
  }
  nodes = std::move(ordered);
}

}  // namespace onnxtrain
