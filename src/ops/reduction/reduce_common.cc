#include "ops/reduction/reduce_common.h"

#include "autodiff/grad_builder.h"

namespace onnxtrain {

ReduceAxes::ReduceAxes(const KernelInfo& info, int axes_input_since, const char* op)
    : op_(op),
      axes_(info.node.attr_ints("axes")),
      from_input_(info.opset >= axes_input_since),
      keepdims_(info.node.attr_int("keepdims", 1) != 0),
      noop_(info.node.attr_int("noop_with_empty_axes", 0) != 0) {}

bool ReduceAxes::resolve(const KernelContext& ctx, const TensorShape& in, std::vector<bool>& reduce) const {
  std::vector<int64_t> axes = axes_;
  if (from_input_) {
    axes.clear();
    if (ctx.has_input(1)) {
      const Tensor& t = ctx.input(1);
      OT_CHECK(t.dtype() == DType::Int64, "input 'axes' must be int64, got ", t.str());
      OT_CHECK(t.rank() <= 1, "input 'axes' must be 1-D, got ", t.str());
      axes = t.to_int64_vector();
    }
  }
  reduce.assign(static_cast<size_t>(in.rank()), axes.empty());
  if (axes.empty()) return !noop_;
  for (int64_t a : axes) {
    OT_CHECK(a >= -in.rank() && a < in.rank(), "axis ", a, " is out of range for the input ", in.str());
    int d = normalize_axis(a, in.rank(), op_);
    OT_CHECK(!reduce[d], "axis ", a, " is listed twice in axes");
    reduce[d] = true;
  }
  return true;
}

bool reduce_is_identity(const GradBuilder& g, int axes_input_since) {
  const Node& n = g.node();
  if (n.attr_int("noop_with_empty_axes", 0) == 0) return false;
  if (g.opset() >= axes_input_since) return !g.has_input(1);
  return n.attr_ints("axes").empty();
}

std::string reduced_keepdims(GradBuilder& g, const std::string& v, int axes_input_since) {
  const Node& n = g.node();
  if (n.attr_int("keepdims", 1) != 0) return v;
  // Unsqueeze normalizes negative axes against its output's rank, the input's rank here, exactly
  // as the reduction did; empty axes (reduce all) leave a scalar that broadcasts as it is.
  if (g.opset() >= axes_input_since) return g.has_input(1) ? g.op("Unsqueeze", {v, g.input(1)}) : v;
  std::vector<int64_t> axes = n.attr_ints("axes");
  return axes.empty() ? v : g.op("Unsqueeze", {v, g.int64s(axes)});
}

std::string expand_to_input(GradBuilder& g, const std::string& v) {
  return g.op("Expand", {v, g.shape_of(g.input(0))});
}

}  // namespace onnxtrain
