// Concat and Split, each the other's gradient.
#include <cstring>

#include "core/checked_math.h"
#include "opdef/op_registry.h"
#include "ops/common/elementwise.h"
#include "ops/tensor/indexing.h"
#include "runtime/thread_pool.h"

namespace onnxtrain {
namespace {

class ConcatKernel final : public Kernel {
 public:
  // Concat-1 had a default axis of 1; since opset 4 the attribute is required.
  explicit ConcatKernel(const KernelInfo& info) : axis_(info.node.attr_int("axis", 1)) {
    OT_CHECK(info.opset < 4 || info.node.has_attr("axis"), "the 'axis' attribute is required");
  }
  void compute(KernelContext& ctx) const override {
    const int count = ctx.num_inputs();
    OT_CHECK(count >= 1, "Concat needs at least one input");
    const Tensor& first = ctx.input(0);
    OT_CHECK(first.rank() >= 1, "inputs must have rank >= 1, got ", first.str());
    const int axis = normalize_axis(axis_, first.rank(), "Concat");
    TensorShape shape = first.shape();
    shape[axis] = 0;
    for (int i = 0; i < count; ++i) {
      const Tensor& t = ctx.input(i);
      OT_CHECK(t.dtype() == first.dtype(), "input ", i, " ", t.str(), " differs in element type from input 0 ",
               first.str());
      OT_CHECK(t.rank() == first.rank(), "input ", i, " ", t.str(), " differs in rank from input 0 ", first.str());
      for (int d = 0; d < t.rank(); ++d)
        OT_CHECK(d == axis || t.dim(d) == first.dim(d), "input ", i, " ", t.str(), " differs from input 0 ",
                 first.str(), " in dim ", d, " (only axis ", axis, " may differ)");
      shape[axis] = checked_add(shape[axis], t.dim(axis), "Concat");
    }
    Tensor& out = ctx.allocate_output(0, first.dtype(), shape);
    if (out.numel() == 0) return;
    const int64_t es = static_cast<int64_t>(dtype_size(first.dtype()));
    const int64_t outer = shape.size_between(0, axis), inner = shape.size_between(axis + 1, shape.rank()) * es;
    const int64_t row = shape[axis] * inner;  // bytes of one output row
    auto* dst = static_cast<uint8_t*>(out.raw_data());
    // Tasks are (outer row, input) pieces: one large piece per input when the axis is 0.
    ctx.threads().parallel_for(outer * count, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(row, 1)),
                               [&](int64_t t0, int64_t t1) {
                                 for (int64_t t = t0; t < t1; ++t) {
                                   const int64_t o = t / count;
                                   const int i = static_cast<int>(t % count);
                                   int64_t at = 0;
                                   for (int j = 0; j < i; ++j) at += ctx.input(j).dim(axis) * inner;
                                   const Tensor& in = ctx.input(i);
                                   const int64_t piece = in.dim(axis) * inner;
                                   if (piece == 0) continue;
                                   const auto* src = static_cast<const uint8_t*>(in.raw_data());
                                   std::memcpy(dst + o * row + at, src + o * piece, static_cast<size_t>(piece));
                                 }
                               });
  }

 private:
  int64_t axis_;
};

class SplitKernel final : public Kernel {
 public:
  explicit SplitKernel(const KernelInfo& info)
      : axis_(info.node.attr_int("axis", 0)),
        sizes_from_input_(info.opset >= 13 || (info.opset < 2 && info.node.has_input(1))),
        sizes_(info.node.attr_ints("split")) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    OT_CHECK(x.rank() >= 1, "input must have rank >= 1, got ", x.str());
    const int axis = normalize_axis(axis_, x.rank(), "Split");
    const int outputs = ctx.num_outputs();
    const int64_t dim = x.dim(axis);
    std::vector<int64_t> sizes = sizes_;
    if (sizes_from_input_) sizes = ctx.has_input(1) ? int_values(ctx.input(1), "split") : std::vector<int64_t>{};
    if (sizes.empty()) {
      OT_CHECK(dim % outputs == 0, "cannot split dim ", axis, " of ", x.str(), " into ", outputs, " equal parts");
      sizes.assign(static_cast<size_t>(outputs), dim / outputs);
    }
    OT_CHECK(static_cast<int>(sizes.size()) == outputs, "split has ", sizes.size(), " sizes for ", outputs,
             " outputs");
    int64_t total = 0;
    for (int64_t s : sizes) {
      OT_CHECK(s >= 0, "split sizes must not be negative, got ", s);
      total = checked_add(total, s, "Split");
    }
    OT_CHECK(total == dim, "split sizes add up to ", total, ", but dim ", axis, " of ", x.str(), " is ", dim);
    const int64_t es = static_cast<int64_t>(dtype_size(x.dtype()));
    const int64_t outer = x.shape().size_between(0, axis), inner = x.shape().size_between(axis + 1, x.rank()) * es;
    const int64_t row = dim * inner;
    const auto* src = static_cast<const uint8_t*>(x.raw_data());
    int64_t at = 0;
    for (int k = 0; k < outputs; ++k) {
      TensorShape shape = x.shape();
      shape[axis] = sizes[static_cast<size_t>(k)];
      const int64_t piece = shape[axis] * inner;
      if (!ctx.output_needed(k)) {
        at += piece;
        continue;
      }
      auto* dst = static_cast<uint8_t*>(ctx.allocate_output(k, x.dtype(), shape).raw_data());
      if (piece > 0) {
        ctx.threads().parallel_for(outer, std::max<int64_t>(1, kParallelGrain / piece), [&](int64_t o0, int64_t o1) {
          for (int64_t o = o0; o < o1; ++o)
            std::memcpy(dst + o * piece, src + o * row + at, static_cast<size_t>(piece));
        });
      }
      at += piece;
    }
  }

 private:
  int64_t axis_;
  bool sizes_from_input_;
  std::vector<int64_t> sizes_;
};

// dX_i = the part of dY that input i filled: Split with each input's size along the axis, taken
// from the declared shapes when they are static, else from the inputs' shapes at run time.
void concat_gradient(GradBuilder& g) {
  const int64_t axis = g.node().attr_int("axis", 1);
  const int n = g.num_inputs();
  std::vector<int64_t> sizes;
  for (int i = 0; i < n; ++i) {
    const ValueInfo* vi = g.info(g.input(i));
    if (!vi || !vi->shape || vi->shape->empty()) break;
    const int rank = static_cast<int>(vi->shape->size());
    if (axis < -rank || axis >= rank) break;
    const Dim& d = (*vi->shape)[static_cast<size_t>(axis < 0 ? axis + rank : axis)];
    if (!d.is_static()) break;
    sizes.push_back(d.value);
  }
  std::string split;
  if (static_cast<int>(sizes.size()) == n) {
    split = g.int64s(sizes);
  } else {
    std::vector<std::string> parts;
    for (int i = 0; i < n; ++i) parts.push_back(g.op("Gather", {g.shape_of(g.input(i)), g.int64s({axis})}));
    split = n == 1 ? parts[0] : g.op("Concat", parts, {{"axis", Attribute::of_int(0)}});
    g.set_dtype(split, DType::Int64);
  }
  std::vector<std::string> grads =
      g.op_multi("Split", {g.output_grad(0), split}, n, {{"axis", Attribute::of_int(axis)}});
  for (int i = 0; i < n; ++i) {
    if (!g.needs_input_grad(i)) continue;
    same_dtype(g, grads[static_cast<size_t>(i)], g.input(i));
    g.set_input_grad(i, grads[static_cast<size_t>(i)]);
  }
}

// dX = the outputs' gradients concatenated back, zeros standing in for outputs without one.
void split_gradient(GradBuilder& g) {
  std::vector<std::string> parts;
  for (int k = 0; k < g.num_outputs(); ++k) parts.push_back(g.output_grad_or_zeros(k));
  std::string dx = g.op("Concat", parts, {{"axis", Attribute::of_int(g.node().attr_int("axis", 0))}});
  same_dtype(g, dx, g.input(0));
  g.set_input_grad(0, dx);
}

}  // namespace

ONNXTRAIN_KERNEL("", "Concat", kernel_factory<ConcatKernel>(), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_NATIVE_16BIT_FLOATS("", "Concat", kBothHalfFloats);
ONNXTRAIN_KERNEL("", "Split", kernel_factory<SplitKernel>(), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_NATIVE_16BIT_FLOATS("", "Split", kBothHalfFloats);
ONNXTRAIN_GRADIENT("", "Concat", concat_gradient);
ONNXTRAIN_GRADIENT("", "Split", split_gradient);

}  // namespace onnxtrain
