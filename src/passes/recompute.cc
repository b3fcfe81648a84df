// After autodiff, on the joint graph: activations that backward would read from the stash are
// recomputed in backward instead, by copies of their forward nodes placed just before the first
// backward node that reads them. The stash then holds the copies' inputs instead.
//
// Two sources of such nodes:
// - torch.utils.checkpoint segments (Node::recompute, set by checkpoint_segments.cc): every
//   segment value backward reads is recomputed from the segment's inputs, whatever those cost;
// - with `cheap_activations` (DebugOptions(memory_optimization="recompute")), elementwise ops,
//   activations and normalizations whose inputs backward keeps anyway (or recomputes itself):
//   recomputing them only ever takes values out of the stash.
//
// Random draws are never drawn again: a training-mode Dropout is recomputed from its stashed mask
// (ai.onnxtrain::DropoutGrad applied to its input computes exactly its output), and any other
// random op keeps its outputs in the stash. ai.onnxtrain::PythonOp runs user code, which must run
// once per forward: it too keeps its outputs.
#include <algorithm>
#include <limits>
#include <unordered_map>
#include <unordered_set>

#include "opdef/op_registry.h"
#include "passes/passes.h"

namespace onnxtrain {
namespace {

bool is_shape_query(const Node& n) { return n.domain.empty() && (n.op_type == "Shape" || n.op_type == "Size"); }

// Declared by each op's record (op_record.h): elementwise math, activations, normalizations.
bool is_cheap(const Node& n) {
  const OpRecord* record = OpRegistry::instance().find(n);
  return record && record->recompute == Recompute::Cheap;
}

// A Dropout that draws a mask when it runs (opset 12 and later, given a training_mode input).
bool is_drawing_dropout(const Node& n, int opset) {
  return n.domain.empty() && n.op_type == "Dropout" && opset >= 12 && n.has_input(2);
}

// Whether backward may recompute output `o` of `n` (all that a copy of the node computes
// equals what the forward computed).
bool recomputable_output(const Graph& g, const Node& n, size_t o) {
  if (is_drawing_dropout(n, g.opset())) return o == 0 && n.outputs.size() > 1 && !n.outputs[1].empty();
  if (is_unrepeatable_op(n)) return false;
  for (const auto& kv : n.attrs)
    if (kv.second.kind == Attribute::Kind::Graph && kv.second.g && has_unrepeatable_ops(*kv.second.g)) return false;
  return true;
}

// A value small enough that keeping it for a recompute costs nothing worth counting (shapes,
// scalars), judged from its declared static shape.
bool is_tiny(const Graph& g, const std::string& v) {
  const ValueInfo* vi = g.info(v);
  if (!vi || !vi->shape) return false;
  int64_t numel = 1;
  for (const Dim& d : *vi->shape) {
    if (!d.is_static()) return false;
    numel *= d.value;
    if (numel > 64) return false;
  }
  return true;
}

}  // namespace

std::vector<std::string> recompute_activations(Graph& g, bool cheap_activations) {
  std::unordered_map<std::string, size_t> producer;  // forward values only
  for (size_t k = 0; k < g.nodes.size(); ++k)
    if (!g.nodes[k].in_backward)
      for (const auto& v : g.nodes[k].outputs)
        if (!v.empty()) producer[v] = k;
  const std::unordered_set<std::string> graph_outputs(g.outputs.begin(), g.outputs.end());
  // Forward value -> first backward reader. Shape queries do not count: partitioning moves them
  // into the forward, so they keep no tensor for backward (passes/partition.h).
  std::unordered_map<std::string, size_t> first_reader;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    if (!g.nodes[k].in_backward || is_shape_query(g.nodes[k])) continue;
    for (const auto& in : g.nodes[k].inputs)
      if (!in.empty() && producer.count(in)) first_reader.emplace(in, k);
  }

  auto output_index = [&](size_t p, const std::string& v) {
    const auto& outs = g.nodes[p].outputs;
    return static_cast<size_t>(std::find(outs.begin(), outs.end(), v) - outs.begin());
  };
  // Whether `v`'s producer may be copied into backward to recompute it; `checkpointed` asks
  // for segment nodes only.
  auto may_recompute = [&](const std::string& v, bool checkpointed) {
    auto it = producer.find(v);
    if (it == producer.end() || graph_outputs.count(v)) return false;
    const Node& n = g.nodes[it->second];
    if (checkpointed ? !n.recompute : !(n.recompute || (cheap_activations && is_cheap(n)))) return false;
    return recomputable_output(g, n, output_index(it->second, v));
  };

  // The values to recompute: those backward reads, and for checkpointed segments whatever their
  // recompute needs from inside the segment.
  std::unordered_set<std::string> recompute;
  std::vector<std::string> pending;
  for (const auto& kv : first_reader)
    if (may_recompute(kv.first, false) && recompute.insert(kv.first).second) pending.push_back(kv.first);
  while (!pending.empty()) {
    const Node& n = g.nodes[producer.at(pending.back())];
    pending.pop_back();
    if (!n.recompute) continue;
    for (const auto& in : n.inputs)
      if (!in.empty() && may_recompute(in, true) && recompute.insert(in).second) pending.push_back(in);
  }
  // A cheap node is recomputed only when the stash keeps its inputs anyway; dropping one from
  // the recompute puts it in the stash, which can only let others stay.
  auto kept_anyway = [&](const std::string& v) {
    return !producer.count(v) || graph_outputs.count(v) || (first_reader.count(v) && !recompute.count(v)) ||
           is_tiny(g, v);
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (auto it = recompute.begin(); it != recompute.end();) {
      const Node& n = g.nodes[producer.at(*it)];
      bool stays = n.recompute;
      if (!stays) {
        stays = true;
        const bool dropout = is_drawing_dropout(n, g.opset());
        for (size_t i = 0; i < n.inputs.size(); ++i) {
          const std::string& in = n.inputs[i];
          if (in.empty() || recompute.count(in) || kept_anyway(in)) continue;
          stays = false;
        }
        if (dropout && !kept_anyway(n.outputs[1])) stays = false;
      }
      if (stays) {
        ++it;
      } else {
        it = recompute.erase(it);
        changed = true;
      }
    }
  }
  if (recompute.empty()) return {};

  // One copy per forward node, in forward order; each placed before the first backward node that
  // reads what it computes, directly or through other copies.
  std::vector<size_t> copied;
  for (const auto& v : recompute) copied.push_back(producer.at(v));
  std::sort(copied.begin(), copied.end());
  copied.erase(std::unique(copied.begin(), copied.end()), copied.end());
  std::unordered_map<std::string, std::string> renamed;  // forward value -> its recomputed copy
  std::unordered_map<size_t, Node> copy_of;
  for (size_t p : copied) {
    const Node& n = g.nodes[p];
    Node c;
    c.name = n.name + "/recompute";
    c.in_backward = true;
    if (is_drawing_dropout(n, g.opset())) {
      c.op_type = "DropoutGrad";
      c.domain = kOnnxTrainDomain;
      c.inputs = {n.inputs[0], n.outputs[1], n.has_input(1) ? n.inputs[1] : "", n.inputs[2]};
      c.outputs = {n.outputs[0]};
    } else {
      c.op_type = n.op_type;
      c.domain = n.domain;
      c.attrs = n.attrs;
      c.inputs = n.inputs;
      c.outputs = n.outputs;
    }
    for (auto& out : c.outputs) {
      if (out.empty()) continue;
      const std::string fresh = g.unique_name(out + "/recomputed");
      if (const ValueInfo* vi = g.info(out)) g.value_info[fresh] = *vi;
      renamed[out] = fresh;
      out = fresh;
    }
    copy_of.emplace(p, std::move(c));
  }
  for (auto& kv : copy_of)
    for (auto& in : kv.second.inputs)
      if (recompute.count(in)) in = renamed.at(in);

  // Reverse forward order: a copy's readers among the copies come later, so their places are
  // final when its own is.
  constexpr size_t kUnused = std::numeric_limits<size_t>::max();
  std::unordered_map<size_t, size_t> place;  // forward node -> backward position of its copy
  for (size_t p : copied) {
    size_t at = kUnused;
    for (const auto& v : g.nodes[p].outputs) {
      auto r = first_reader.find(v);
      if (r != first_reader.end() && recompute.count(v)) at = std::min(at, r->second);
    }
    place[p] = at;
  }
  for (auto it = copied.rbegin(); it != copied.rend(); ++it)
    for (const auto& in : g.nodes[*it].inputs)
      if (!in.empty() && recompute.count(in)) {
        size_t& at = place.at(producer.at(in));
        at = std::min(at, place.at(*it));
      }

  std::vector<Node> nodes;
  nodes.reserve(g.nodes.size() + copied.size());
  std::unordered_map<size_t, std::vector<size_t>> before;  // backward position -> copies, forward order
  for (size_t p : copied)
    if (place.at(p) != kUnused) before[place.at(p)].push_back(p);
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    auto b = before.find(k);
    if (b != before.end())
      for (size_t p : b->second) nodes.push_back(std::move(copy_of.at(p)));
    Node& n = g.nodes[k];
    if (n.in_backward && !is_shape_query(n))
      for (auto& in : n.inputs)
        if (!in.empty() && recompute.count(in)) in = renamed.at(in);
    nodes.push_back(std::move(n));
  }
  g.nodes = std::move(nodes);

  std::vector<std::string> saved;  // what the stash no longer holds, in forward order
  for (const auto& kv : first_reader)
    if (recompute.count(kv.first)) saved.push_back(kv.first);
  std::sort(saved.begin(), saved.end(), [&](const std::string& a, const std::string& b) {
    return producer.at(a) != producer.at(b) ? producer.at(a) < producer.at(b) : a < b;
  });
  return saved;
}

}  // namespace onnxtrain
