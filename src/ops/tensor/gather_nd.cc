// GatherND (with batch_dims), ScatterND (reduction none/add/mul), and GatherNDGrad, the
// scatter-add GatherND's gradient uses.
//
// Both ops see indices [batch..., tuples..., k] and data [batch..., k indexed dims, slice dims]:
// each k-tuple picks one contiguous slice. Scatter-style writes are split across threads by
// batch and by column ranges of the slice, never by tuple, so repeated tuples cannot race.
#include <cstring>

#include "opdef/op_registry.h"
#include "ops/common/elementwise.h"
#include "ops/tensor/indexing.h"
#include "runtime/thread_pool.h"

namespace onnxtrain {
namespace {

struct NdAddressing {
  int64_t batches = 1;   // product of the batch dims
  int64_t tuples = 1;    // index tuples per batch
  int64_t slice = 1;     // elements per slice
  int64_t* offset = nullptr;  // per (batch, tuple): element offset of its slice in data
  TensorShape gathered;  // GatherND's output shape: indices[:-1] + data[batch_dims + k:]
};

NdAddressing address_slices(KernelContext& ctx, const TensorShape& ds, const Tensor& indices, int64_t batch_dims,
                            const char* what) {
  const TensorShape& is = indices.shape();
  OT_CHECK(indices.dtype() == DType::Int64 || indices.dtype() == DType::Int32, what,
           ": indices must be int32 or int64, got ", indices.str());
  OT_CHECK(ds.rank() >= 1 && is.rank() >= 1, what, ": data ", ds.str(), " and indices ", indices.str(),
           " must have rank >= 1");
  OT_CHECK(batch_dims >= 0 && batch_dims < std::min(ds.rank(), is.rank()), what, ": batch_dims ", batch_dims,
           " must be in [0, ", std::min(ds.rank(), is.rank()), ")");
  const int b = static_cast<int>(batch_dims);
  const int64_t k = is.back();
  OT_CHECK(k >= 1 && k <= ds.rank() - b, what, ": the last dim of indices ", indices.str(), " must be in [1, ",
           ds.rank() - b, "] for data ", ds.str(), " with batch_dims ", b);
  for (int d = 0; d < b; ++d)
    OT_CHECK(is[d] == ds[d], what, ": batch dim ", d, " differs between data ", ds.str(), " and indices ",
             indices.str());
  NdAddressing a;
  a.batches = ds.size_between(0, b);
  a.tuples = is.size_between(b, is.rank() - 1);
  const int first_slice_dim = b + static_cast<int>(k);
  a.slice = ds.size_between(first_slice_dim, ds.rank());
  for (int d = 0; d + 1 < is.rank(); ++d) a.gathered.push_back(is[d]);
  for (int d = first_slice_dim; d < ds.rank(); ++d) a.gathered.push_back(ds[d]);
  const int64_t count = a.batches * a.tuples;
  a.offset = static_cast<int64_t*>(ctx.scratch(static_cast<size_t>(count) * sizeof(int64_t)));
  const Strides dstr = contiguous_strides(ds);
  const int64_t batch_stride = ds.size_between(b, ds.rank());
  for (int64_t t = 0; t < count; ++t) {
    int64_t off = (t / std::max<int64_t>(a.tuples, 1)) * batch_stride;
    for (int64_t i = 0; i < k; ++i) {
      const int dim = b + static_cast<int>(i);
      const int64_t v = indices.dtype() == DType::Int64 ? indices.data<int64_t>()[t * k + i]
                                                        : indices.data<int32_t>()[t * k + i];
      off += normalize_index(v, ds[dim], what) * dstr[dim];
    }
    a.offset[t] = off;
  }
  return a;
}

// Column ranges of a slice handled by one task in scatter-style writes.
constexpr int64_t kColumnChunk = 4096;

// Calls f(c0, c1) for column ranges of [0, slice) in parallel: every task sees every tuple.
template <typename F>
void for_column_chunks(ThreadPool& pool, int64_t batches, int64_t slice, F&& f) {
  const int64_t chunks = std::max<int64_t>(1, (slice + kColumnChunk - 1) / kColumnChunk);
  pool.parallel_for(batches * chunks, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t c = t % chunks;
      f(t / chunks, c * kColumnChunk, std::min(slice, (c + 1) * kColumnChunk));
    }
  });
}

class GatherNDKernel final : public Kernel {
 public:
  explicit GatherNDKernel(const KernelInfo& info)
      : batch_dims_(info.opset >= 12 ? info.node.attr_int("batch_dims", 0) : 0) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& data = ctx.input(0);
    NdAddressing a = address_slices(ctx, data.shape(), ctx.input(1), batch_dims_, "GatherND");
    Tensor& out = ctx.allocate_output(0, data.dtype(), a.gathered);
    if (out.numel() == 0) return;
    const size_t bytes = static_cast<size_t>(a.slice) * dtype_size(data.dtype());
    const auto* src = static_cast<const uint8_t*>(data.raw_data());
    auto* dst = static_cast<uint8_t*>(out.raw_data());
    const int64_t count = a.batches * a.tuples;
    const int64_t es = static_cast<int64_t>(dtype_size(data.dtype()));
    ctx.threads().parallel_for(count, std::max<int64_t>(1, kParallelGrain / a.slice), [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t)
        std::memcpy(dst + t * static_cast<int64_t>(bytes), src + a.offset[t] * es, bytes);
    });
  }

 private:
  int64_t batch_dims_;
};

// GatherNDGrad(dY, indices, data_shape): zeros(data_shape) with dY's slices added at their tuples.
class GatherNDGradKernel final : public Kernel {
 public:
  explicit GatherNDGradKernel(const KernelInfo& info) : batch_dims_(info.node.attr_int("batch_dims", 0)) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& dy = ctx.input(0);
    const TensorShape shape(int_values(ctx.input(2), "GatherNDGrad data shape"));
    NdAddressing a = address_slices(ctx, shape, ctx.input(1), batch_dims_, "GatherNDGrad");
    OT_CHECK(dy.shape() == a.gathered, "GatherNDGrad: dY ", dy.str(), " must have shape ", a.gathered.str());
    Tensor& dx = ctx.allocate_output(0, dy.dtype(), shape);
    dispatch_float(dy.dtype(), "GatherNDGrad", [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* out = dx.data<T>();
      const T* g = dy.data<T>();
      std::fill(out, out + dx.numel(), T(0));
      for_column_chunks(ctx.threads(), a.batches, a.slice, [&](int64_t batch, int64_t c0, int64_t c1) {
        for (int64_t t = batch * a.tuples; t < (batch + 1) * a.tuples; ++t) {
          T* d = out + a.offset[t];
          const T* s = g + t * a.slice;
          for (int64_t c = c0; c < c1; ++c) d[c] += s[c];
        }
      });
    });
  }

 private:
  int64_t batch_dims_;
};

class ScatterNDKernel final : public Kernel {
 public:
  explicit ScatterNDKernel(const KernelInfo& info) : reduction_(parse_scatter_reduction(info.node, info.opset)) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& data = ctx.input(0);
    const Tensor& updates = ctx.input(2);
    NdAddressing a = address_slices(ctx, data.shape(), ctx.input(1), 0, "ScatterND");
    OT_CHECK(updates.shape() == a.gathered, "updates ", updates.str(), " must have shape ", a.gathered.str(),
             " (indices[:-1] + data[k:])");
    OT_CHECK(updates.dtype() == data.dtype(), "updates ", updates.str(), " must have data's element type ",
             dtype_name(data.dtype()));
    Tensor& out = ctx.allocate_output(0, data.dtype(), data.shape());
    out.copy_from(data);
    // Tuples apply in order within each column range: with repeated tuples and no reduction the
    // last one wins, as in ONNX's reference implementation.
    auto apply = [&](auto tag, auto op) {
      using T = typename decltype(tag)::type;
      T* dst = static_cast<T*>(out.raw_data());
      const T* upd = static_cast<const T*>(updates.raw_data());
      for_column_chunks(ctx.threads(), 1, a.slice, [&](int64_t, int64_t c0, int64_t c1) {
        for (int64_t t = 0; t < a.tuples; ++t) {
          T* d = dst + a.offset[t];
          const T* s = upd + t * a.slice;
          for (int64_t c = c0; c < c1; ++c) d[c] = op(d[c], s[c]);
        }
      });
    };
    if (reduction_ == ScatterReduction::None) {
      dispatch_bytes(data.dtype(), "ScatterND", [&](auto tag) {
        using T = typename decltype(tag)::type;
        apply(tag, [](T, T u) { return u; });
      });
      return;
    }
    dispatch_numeric(data.dtype(), "ScatterND", [&](auto tag) {
      using T = typename decltype(tag)::type;
      if (reduction_ == ScatterReduction::Add) apply(tag, [](T x, T u) { return static_cast<T>(x + u); });
      else apply(tag, [](T x, T u) { return static_cast<T>(x * u); });
    });
  }

 private:
  ScatterReduction reduction_;
};

void gather_nd_gradient(GradBuilder& g) {
  const int64_t batch_dims = g.opset() >= 12 ? g.node().attr_int("batch_dims", 0) : 0;
  std::string dx = g.op("GatherNDGrad", {g.output_grad(0), g.input(1), g.shape_of(g.input(0))},
                        {{"batch_dims", Attribute::of_int(batch_dims)}}, kOnnxTrainDomain);
  same_dtype(g, dx, g.input(0));
  g.set_input_grad(0, dx);
}

// As for ScatterElements (and torch's index_put): data gets dY with the written slices zeroed,
// updates get dY gathered back, every duplicate included.
void scatter_nd_gradient(GradBuilder& g) {
  const ScatterReduction reduction = parse_scatter_reduction(g.node(), g.opset());
  if (reduction == ScatterReduction::Mul)
    throw UnsupportedError("the gradient of ScatterND with reduction 'mul' is not implemented");
  const std::string& dy = g.output_grad(0);
  if (g.needs_input_grad(0)) {
    if (reduction == ScatterReduction::Add) {
      g.set_input_grad(0, dy);
    } else {
      std::string zeros = g.zeros_like(g.input(2), g.dtype_of(g.input(0)));
      std::string dx = g.op("ScatterND", {dy, g.input(1), zeros});
      same_dtype(g, dx, g.input(0));
      g.set_input_grad(0, dx);
    }
  }
  if (g.needs_input_grad(2)) {
    std::string du = g.op("GatherND", {dy, g.input(1)});
    same_dtype(g, du, g.input(2));
    g.set_input_grad(2, du);
  }
}

}  // namespace

ONNXTRAIN_KERNEL("", "GatherND", kernel_factory<GatherNDKernel>(), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "GatherNDGrad", kernel_factory<GatherNDGradKernel>(),
                 Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL("", "ScatterND", kernel_factory<ScatterNDKernel>(), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_GRADIENT("", "GatherND", gather_nd_gradient);
ONNXTRAIN_GRADIENT("", "ScatterND", scatter_nd_gradient);

}  // namespace onnxtrain
