#include "onnx/sequence_lowering.h"

#include <limits>
#include <unordered_set>

namespace onnxtrain {
namespace {

class Lowering {
 public:
  explicit Lowering(Graph& graph) : graph_(graph) {
    for (size_t k = 0; k < graph.nodes.size(); ++k)
      for (const auto& out : graph.nodes[k].outputs)
        if (!out.empty()) producer_[out] = k;
  }

  int run() {
    std::vector<Node> rewritten;
    for (const Node& n : graph_.nodes) {
      out_ = &rewritten;
      if (!n.domain.empty() || !lower(n)) rewritten.push_back(n);
    }
    graph_.nodes = std::move(rewritten);
    if (rewrites_) drop_unread_sequences();
    return rewrites_;
  }

 private:
  const Node* producer(const std::string& value, const char* op_type) const {
    auto it = producer_.find(value);
    if (it == producer_.end()) return nullptr;
    const Node& p = graph_.nodes[it->second];
    return p.domain.empty() && p.op_type == op_type ? &p : nullptr;
  }

  // The value of a scalar int constant (initializer or Constant node), if `value` is one.
  bool constant_int(const std::string& value, int64_t& out) const {
    const Tensor* t = nullptr;
    if (graph_.is_initializer(value)) {
      t = &graph_.initializers.at(value);
    } else if (const Node* c = producer(value, "Constant")) {
      auto it = c->attrs.find("value");
      if (it != c->attrs.end() && it->second.kind == Attribute::Kind::Tensor) t = &it->second.t;
    }
    if (!t || t->numel() != 1 || (t->dtype() != DType::Int64 && t->dtype() != DType::Int32)) return false;
    out = t->item_as_int();
    return true;
  }

  // Declared or structural rank (a Concat's output is never a scalar); -1 when unknown.
  int rank_of(const std::string& value) const {
    if (const ValueInfo* vi = graph_.info(value); vi && vi->shape) return static_cast<int>(vi->shape->size());
    if (graph_.is_initializer(value)) return graph_.initializers.at(value).rank();
    if (const Node* c = producer(value, "Constant"); c && c->has_attr("value")) return c->attrs.at("value").t.rank();
    if (producer(value, "Concat")) return 1;
    return -1;
  }

  std::string emit(const std::string& op_type, std::vector<std::string> inputs, AttributeMap attrs,
                   const std::string& base, DType dtype) {
    Node n;
    n.op_type = op_type;
    n.inputs = std::move(inputs);
    n.attrs = std::move(attrs);
    n.outputs = {graph_.unique_name(base)};
    n.name = n.outputs[0];
    if (dtype != DType::Undefined) graph_.value_info[n.outputs[0]].dtype = dtype;
    out_->push_back(n);
    return n.outputs[0];
  }

  std::string int64s(const std::vector<int64_t>& values, const std::string& base) {
    AttributeMap attrs;
    attrs["value"] = Attribute::of_tensor(Tensor::from_vector<int64_t>(values, {static_cast<int64_t>(values.size())}));
    return emit("Constant", {}, attrs, base, DType::Int64);
  }

  // Replaces `n` (one output) by the value `replacement`: an Identity keeps the output's name.
  void finish(const Node& n, const std::string& replacement) {
    Node id;
    id.op_type = "Identity";
    id.name = n.name;
    id.inputs = {replacement};
    id.outputs = {n.outputs[0]};
    out_->push_back(id);
    ++rewrites_;
  }

  bool lower(const Node& n) {
    if (n.op_type == "SequenceAt") return lower_at(n);
    if (n.op_type == "SequenceLength") {
      const Node* construct = producer(n.inputs[0], "SequenceConstruct");
      if (!construct) return false;
      AttributeMap attrs;
      attrs["value"] = Attribute::of_tensor(Tensor::scalar<int64_t>(static_cast<int64_t>(construct->inputs.size())));
      finish(n, emit("Constant", {}, attrs, n.outputs[0] + "_length", DType::Int64));
      return true;
    }
    if (n.op_type == "ConcatFromSequence") {
      const Node* construct = producer(n.inputs[0], "SequenceConstruct");
      if (!construct || construct->inputs.empty()) return false;
      const int64_t axis = n.attr_int("axis", 0);
      std::vector<std::string> parts = construct->inputs;
      if (n.attr_int("new_axis", 0) != 0) {
        const std::string axes = int64s({axis}, n.outputs[0] + "_axes");
        for (auto& p : parts) p = emit("Unsqueeze", {p, axes}, {}, p + "_unsqueezed", graph_.info(p) ? graph_.info(p)->dtype : DType::Undefined);
      }
      AttributeMap attrs;
      attrs["axis"] = Attribute::of_int(axis);
      finish(n, emit("Concat", parts, attrs, n.outputs[0] + "_concat", DType::Undefined));
      return true;
    }
    return false;
  }

  bool lower_at(const Node& n) {
    int64_t p = 0;
    if (n.inputs.size() < 2 || !constant_int(n.inputs[1], p)) return false;
    if (const Node* construct = producer(n.inputs[0], "SequenceConstruct")) {
      const int64_t count = static_cast<int64_t>(construct->inputs.size());
      if (p < -count || p >= count) return false;  // the kernel reports it at run time
      finish(n, construct->inputs[static_cast<size_t>(p < 0 ? p + count : p)]);
      return true;
    }
    const Node* split = producer(n.inputs[0], "SplitToSequence");
    if (!split) return false;
    const std::string& x = split->inputs[0];
    const std::string base = n.outputs[0];
    const DType x_dtype = graph_.info(x) ? graph_.info(x)->dtype : DType::Undefined;
    const std::string axes = int64s({split->attr_int("axis", 0)}, base + "_axes");
    // Slice's ends for one element at p: p + 1, except that p = -1 runs to the end.
    const int64_t end_of_p = p == -1 ? std::numeric_limits<int64_t>::max() : p + 1;
    if (!split->has_input(1)) {
      std::string element = emit("Slice", {x, int64s({p}, base + "_start"), int64s({end_of_p}, base + "_end"), axes},
                                 {}, base + "_slice", x_dtype);
      if (split->attr_int("keepdims", 1) == 0) element = emit("Squeeze", {element, axes}, {}, base + "_squeeze", x_dtype);
      finish(n, element);
      return true;
    }
    const std::string& sizes_in = split->inputs[1];
    const int sizes_rank = rank_of(sizes_in);
    if (sizes_rank < 0) return false;  // scalar or list unknown: leave it to the kernel
    AttributeMap to_int64;
    to_int64["to"] = Attribute::of_int(static_cast<int64_t>(DType::Int64));
    const std::string sizes = emit("Cast", {sizes_in}, to_int64, base + "_sizes", DType::Int64);
    std::string start, end;
    if (sizes_rank == 0) {
      if (p < 0) return false;  // needs the element count; the kernel handles it
      const std::string size = emit("Reshape", {sizes, int64s({1}, base + "_one")}, {}, base + "_size", DType::Int64);
      start = emit("Mul", {size, int64s({p}, base + "_p")}, {}, base + "_start", DType::Int64);
      end = emit("Mul", {size, int64s({p + 1}, base + "_p1")}, {}, base + "_end", DType::Int64);
    } else {
      AttributeMap exclusive;
      exclusive["exclusive"] = Attribute::of_int(1);
      const std::string offsets =
          emit("CumSum", {sizes, int64s({0}, base + "_cumsum_axis")}, exclusive, base + "_offsets", DType::Int64);
      const std::string at = int64s({p}, base + "_p"), after = int64s({end_of_p}, base + "_p1");
      const std::string zero_axis = int64s({0}, base + "_axis0");
      start = emit("Slice", {offsets, at, after, zero_axis}, {}, base + "_start", DType::Int64);
      const std::string length = emit("Slice", {sizes, at, after, zero_axis}, {}, base + "_length", DType::Int64);
      end = emit("Add", {start, length}, {}, base + "_end", DType::Int64);
    }
    finish(n, emit("Slice", {x, start, end, axes}, {}, base + "_slice", x_dtype));
    return true;
  }

  // SplitToSequence / SequenceConstruct nodes whose sequence nothing reads now.
  void drop_unread_sequences() {
    std::unordered_set<std::string> read(graph_.outputs.begin(), graph_.outputs.end());
    for (const Node& n : graph_.nodes)
      for (const auto& in : n.inputs) read.insert(in);
    std::vector<bool> removed(graph_.nodes.size(), false);
    for (size_t k = 0; k < graph_.nodes.size(); ++k) {
      const Node& n = graph_.nodes[k];
      if (n.domain.empty() && (n.op_type == "SplitToSequence" || n.op_type == "SequenceConstruct") &&
          !read.count(n.outputs[0]))
        removed[k] = true;
    }
    graph_.remove_nodes(removed);
  }

  Graph& graph_;
  std::unordered_map<std::string, size_t> producer_;
  std::vector<Node>* out_ = nullptr;
  int rewrites_ = 0;
};

}  // namespace

int lower_sequences(Graph& graph) {
  int rewrites = 0;
  for (Node& n : graph.nodes)
    for (auto& [key, attr] : n.attrs)
      if (attr.kind == Attribute::Kind::Graph && attr.g) rewrites += lower_sequences(*attr.g);
  return rewrites + Lowering(graph).run();
}

}  // namespace onnxtrain
