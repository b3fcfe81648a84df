// GatherElements, ScatterElements (and Scatter, its deprecated opset 9-10 name), and
// GatherElementsGrad, the scatter-add GatherElements' gradient uses.
//
// All three address data the same way: element e of indices (shape I, same rank as data) names
// data[e with its axis coordinate replaced by indices[e]]. Indices may be smaller than data in
// the other dims (as torch.gather allows), never larger. Writes are split across threads by the
// coordinates before the axis, which no two colliding elements can differ in.
#include "opdef/op_registry.h"
#include "ops/common/elementwise.h"
#include "ops/tensor/indexing.h"
#include "runtime/thread_pool.h"

namespace onnxtrain {
namespace {

struct ElementAddressing {
  int axis;
  int64_t blocks;      // product of indices' dims before the axis: the unit of parallel writes
  int64_t block_size;  // elements of indices per block
  int64_t* offset;     // per element of indices: its offset in data
};

// Normalizes the indices against data's axis and turns them into data offsets (in scratch).
ElementAddressing address_elements(KernelContext& ctx, const TensorShape& ds, const Tensor& indices, int64_t axis_attr,
                                   const char* what) {
  const TensorShape& is = indices.shape();
  OT_CHECK(ds.rank() >= 1, what, ": data must have rank >= 1, got ", ds.str());
  OT_CHECK(is.rank() == ds.rank(), what, ": indices ", indices.str(), " must have the rank of data ", ds.str());
  ElementAddressing a;
  a.axis = normalize_axis(axis_attr, ds.rank(), what);
  for (int d = 0; d < ds.rank(); ++d)
    OT_CHECK(d == a.axis || is[d] <= ds[d], what, ": indices ", indices.str(), " are larger than data ", ds.str(),
             " in dim ", d);
  a.blocks = is.size_between(0, a.axis);
  a.block_size = is.size_between(a.axis, is.rank());
  const int64_t n = is.numel();
  a.offset = static_cast<int64_t*>(ctx.scratch(static_cast<size_t>(n) * sizeof(int64_t)));
  normalize_indices(indices, ds[a.axis], a.offset, what);
  const Strides dstr = contiguous_strides(ds);
  const int rank = is.rank();
  const int64_t inner = is[rank - 1];
  if (n == 0) return a;
  ctx.threads().parallel_for(n / inner, std::max<int64_t>(1, kParallelGrain / inner), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      // Offset of the row's start in data, the axis coordinate left out.
      int64_t rem = r, base = 0;
      for (int d = rank - 2; d >= 0; --d) {
        const int64_t i = rem % is[d];
        rem /= is[d];
        if (d != a.axis) base += i * dstr[d];
      }
      int64_t* o = a.offset + r * inner;
      const int64_t step = a.axis == rank - 1 ? 0 : 1;
      for (int64_t j = 0; j < inner; ++j) o[j] = base + j * step + o[j] * dstr[a.axis];
    }
  });
  return a;
}

class GatherElementsKernel final : public Kernel {
 public:
  explicit GatherElementsKernel(const KernelInfo& info) : axis_(info.node.attr_int("axis", 0)) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& data = ctx.input(0);
    const Tensor& indices = ctx.input(1);
    ElementAddressing a = address_elements(ctx, data.shape(), indices, axis_, "GatherElements");
    Tensor& out = ctx.allocate_output(0, data.dtype(), indices.shape());
    dispatch_bytes(data.dtype(), "GatherElements", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* src = static_cast<const T*>(data.raw_data());
      T* dst = static_cast<T*>(out.raw_data());
      const int64_t* off = a.offset;
      ctx.threads().parallel_for(out.numel(), kParallelGrain, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) dst[i] = src[off[i]];
      });
    });
  }

 private:
  int64_t axis_;
};

// GatherElementsGrad(dY, indices, data_shape): zeros(data_shape) with dY added at the gathered places.
class GatherElementsGradKernel final : public Kernel {
 public:
  explicit GatherElementsGradKernel(const KernelInfo& info) : axis_(info.node.attr_int("axis", 0)) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& dy = ctx.input(0);
    const Tensor& indices = ctx.input(1);
    const TensorShape shape(int_values(ctx.input(2), "GatherElementsGrad data shape"));
    OT_CHECK(dy.shape() == indices.shape(), "GatherElementsGrad: dY ", dy.str(), " must match indices ", indices.str());
    ElementAddressing a = address_elements(ctx, shape, indices, axis_, "GatherElementsGrad");
    Tensor& dx = ctx.allocate_output(0, dy.dtype(), shape);
    dispatch_float(dy.dtype(), "GatherElementsGrad", [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* out = dx.data<T>();
      const T* g = dy.data<T>();
      std::fill(out, out + dx.numel(), T(0));
      ctx.threads().parallel_for(a.blocks, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(a.block_size, 1)),
                                 [&](int64_t b0, int64_t b1) {
                                   for (int64_t i = b0 * a.block_size; i < b1 * a.block_size; ++i)
                                     out[a.offset[i]] += g[i];
                                 });
    });
  }

 private:
  int64_t axis_;
};

class ScatterElementsKernel final : public Kernel {
 public:
  explicit ScatterElementsKernel(const KernelInfo& info)
      : axis_(info.node.attr_int("axis", 0)), reduction_(parse_scatter_reduction(info.node, info.opset)) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& data = ctx.input(0);
    const Tensor& indices = ctx.input(1);
    const Tensor& updates = ctx.input(2);
    OT_CHECK(updates.shape() == indices.shape(), "updates ", updates.str(), " must have the shape of indices ",
             indices.str());
    OT_CHECK(updates.dtype() == data.dtype(), "updates ", updates.str(), " must have data's element type ",
             dtype_name(data.dtype()));
    ElementAddressing a = address_elements(ctx, data.shape(), indices, axis_, "ScatterElements");
    Tensor& out = ctx.allocate_output(0, data.dtype(), data.shape());
    out.copy_from(data);
    const int64_t grain = std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(a.block_size, 1));
    // Within a block, elements are applied in order: with repeated indices and no reduction the
    // last update wins, as in ONNX's reference implementation.
    auto apply = [&](auto tag, auto op) {
      using T = typename decltype(tag)::type;
      T* dst = static_cast<T*>(out.raw_data());
      const T* upd = static_cast<const T*>(updates.raw_data());
      ctx.threads().parallel_for(a.blocks, grain, [&](int64_t b0, int64_t b1) {
        for (int64_t i = b0 * a.block_size; i < b1 * a.block_size; ++i) dst[a.offset[i]] = op(dst[a.offset[i]], upd[i]);
      });
    };
    if (reduction_ == ScatterReduction::None) {
      dispatch_bytes(data.dtype(), "ScatterElements", [&](auto tag) {
        using T = typename decltype(tag)::type;
        apply(tag, [](T, T u) { return u; });
      });
      return;
    }
    dispatch_numeric(data.dtype(), "ScatterElements", [&](auto tag) {
      using T = typename decltype(tag)::type;
      if (reduction_ == ScatterReduction::Add) apply(tag, [](T x, T u) { return static_cast<T>(x + u); });
      else apply(tag, [](T x, T u) { return static_cast<T>(x * u); });
    });
  }

 private:
  int64_t axis_;
  ScatterReduction reduction_;
};

void gather_elements_gradient(GradBuilder& g) {
  std::string dx = g.op("GatherElementsGrad", {g.output_grad(0), g.input(1), g.shape_of(g.input(0))},
                        {{"axis", Attribute::of_int(g.node().attr_int("axis", 0))}}, kOnnxTrainDomain);
  same_dtype(g, dx, g.input(0));
  g.set_input_grad(0, dx);
}

// torch.Tensor.scatter's gradient: data gets dY with the overwritten places zeroed, updates get
// dY gathered back. With repeated indices every duplicate update receives the gradient of the
// place it targets, as in PyTorch (although only one of them survives in the forward value).
void scatter_elements_gradient(GradBuilder& g) {
  const ScatterReduction reduction = parse_scatter_reduction(g.node(), g.opset());
  if (reduction == ScatterReduction::Mul)
    throw UnsupportedError("the gradient of ScatterElements with reduction 'mul' is not implemented");
  const std::string& dy = g.output_grad(0);
  const AttributeMap axis{{"axis", Attribute::of_int(g.node().attr_int("axis", 0))}};
  if (g.needs_input_grad(0)) {
    if (reduction == ScatterReduction::Add) {
      g.set_input_grad(0, dy);
    } else {
      std::string zeros = g.zeros_like(g.input(1), g.dtype_of(g.input(0)));
      std::string dx = g.op("ScatterElements", {dy, g.input(1), zeros}, axis);
      same_dtype(g, dx, g.input(0));
      g.set_input_grad(0, dx);
    }
  }
  if (g.needs_input_grad(2)) {
    std::string du = g.op("GatherElements", {dy, g.input(1)}, axis);
    same_dtype(g, du, g.input(2));
    g.set_input_grad(2, du);
  }
}

}  // namespace

ONNXTRAIN_KERNEL("", "GatherElements", kernel_factory<GatherElementsKernel>(), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_NATIVE_16BIT_FLOATS("", "GatherElements", kBothHalfFloats);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "GatherElementsGrad", kernel_factory<GatherElementsGradKernel>(),
                 Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL("", "ScatterElements", kernel_factory<ScatterElementsKernel>(), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL("", "Scatter", kernel_factory<ScatterElementsKernel>(), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_GRADIENT("", "GatherElements", gather_elements_gradient);
ONNXTRAIN_GRADIENT("", "ScatterElements", scatter_elements_gradient);

}  // namespace onnxtrain
