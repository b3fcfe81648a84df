// Gather, ai.onnxtrain::Embedding (Gather along axis 0 of a table, with torch's padding_idx) and
// GatherGrad, the scatter-add both gradients use.
//
// GatherGrad is built for embedding tables: a [vocab, dim] gradient fed by many repeated
// indices. A counting sort groups the positions of each row, then every output row is written
// by exactly one task (zeroed, then its positions summed in order): no atomics, no races, and
// the same bits on every run whatever the thread count.
#include <onnx/defs/shape_inference.h>

#include <cstring>

#include "onnx/custom_schema.h"
#include "opdef/op_registry.h"
#include "ops/common/elementwise.h"
#include "ops/tensor/indexing.h"
#include "runtime/thread_pool.h"

namespace onnxtrain {
namespace {

// out[o, j, :] = data[o, idx[j], :], data seen as [outer, n, inner].
void gather_rows(KernelContext& ctx, const Tensor& data, const Tensor& indices, int axis, const char* what) {
  const TensorShape& ds = data.shape();
  const int64_t outer = ds.size_between(0, axis), n = ds[axis], inner = ds.size_between(axis + 1, ds.rank());
  TensorShape out_shape;
  for (int d = 0; d < axis; ++d) out_shape.push_back(ds[d]);
  for (int64_t d : indices.shape()) out_shape.push_back(d);
  for (int d = axis + 1; d < ds.rank(); ++d) out_shape.push_back(ds[d]);
  const int64_t m = indices.numel();
  auto* idx = static_cast<int64_t*>(ctx.scratch(static_cast<size_t>(m) * sizeof(int64_t)));
  normalize_indices(indices, n, idx, what);
  Tensor& out = ctx.allocate_output(0, data.dtype(), out_shape);
  if (out.numel() == 0) return;
  dispatch_bytes(data.dtype(), what, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = static_cast<const T*>(data.raw_data());
    T* dst = static_cast<T*>(out.raw_data());
    const int64_t rows = outer * m;
    ctx.threads().parallel_for(rows, std::max<int64_t>(1, kParallelGrain / inner), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t o = r / m, j = r % m;
        const T* s = src + (o * n + idx[j]) * inner;
        T* d = dst + r * inner;
        if (inner == 1) {
          *d = *s;
        } else {
          std::memcpy(d, s, static_cast<size_t>(inner) * sizeof(T));
        }
      }
    });
  });
}

class GatherKernel final : public Kernel {
 public:
  explicit GatherKernel(const KernelInfo& info) : axis_(info.node.attr_int("axis", 0)) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& data = ctx.input(0);
    OT_CHECK(data.rank() >= 1, "data must have rank >= 1, got ", data.str());
    gather_rows(ctx, data, ctx.input(1), normalize_axis(axis_, data.rank(), "Gather"), "Gather");
  }

 private:
  int64_t axis_;
};

int64_t padding_idx_attr(const Node& node) {
  const int64_t p = node.attr_int("padding_idx", -1);
  OT_CHECK(p >= -1, "padding_idx must be a row index or -1 (none), got ", p);
  return p;
}

class EmbeddingKernel final : public Kernel {
 public:
  explicit EmbeddingKernel(const KernelInfo& info) { padding_idx_attr(info.node); }
  void compute(KernelContext& ctx) const override {
    const Tensor& weight = ctx.input(0);
    OT_CHECK(weight.rank() >= 1, "weight must have rank >= 1, got ", weight.str());
    gather_rows(ctx, weight, ctx.input(1), 0, "Embedding");
  }
};

// GatherGrad(dY, indices, data_shape): dX = zeros(data_shape) with dY scatter-added along axis.
// padding_idx (>= 0) names a row of the axis whose gradient stays zero, as in torch.nn.Embedding.
class GatherGradKernel final : public Kernel {
 public:
  explicit GatherGradKernel(const KernelInfo& info)
      : axis_(info.node.attr_int("axis", 0)), padding_idx_(padding_idx_attr(info.node)) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& dy = ctx.input(0);
    const Tensor& indices = ctx.input(1);
    const TensorShape shape(int_values(ctx.input(2), "GatherGrad data shape"));
    OT_CHECK(shape.rank() >= 1, "GatherGrad: data shape must have rank >= 1, got ", shape.str());
    const int axis = normalize_axis(axis_, shape.rank(), "GatherGrad");
    const int64_t outer = shape.size_between(0, axis), n = shape[axis];
    const int64_t inner = shape.size_between(axis + 1, shape.rank());
    const int64_t m = indices.numel();
    OT_CHECK(dy.numel() == outer * m * inner, "GatherGrad: dY ", dy.str(), " does not match indices ", indices.str(),
             " gathered from ", shape.str());
    Tensor& dx = ctx.allocate_output(0, dy.dtype(), shape);
    if (dx.numel() == 0) return;
    // Scratch: normalized indices, then the counting sort (row starts, positions by row).
    auto* idx = static_cast<int64_t*>(ctx.scratch(static_cast<size_t>(2 * m + 2 * n + 1) * sizeof(int64_t)));
    int64_t* start = idx + m;
    int64_t* cursor = start + n + 1;
    int64_t* pos = cursor + n;
    normalize_indices(indices, n, idx, "GatherGrad");
    std::fill(start, start + n + 1, 0);
    for (int64_t j = 0; j < m; ++j) ++start[idx[j] + 1];
    for (int64_t r = 0; r < n; ++r) start[r + 1] += start[r];
    std::copy(start, start + n, cursor);
    for (int64_t j = 0; j < m; ++j) pos[cursor[idx[j]]++] = j;
    const int64_t pad = padding_idx_;
    OT_CHECK(pad < n, "GatherGrad: padding_idx ", pad, " is out of range for ", n, " rows");
    dispatch_float(dy.dtype(), "GatherGrad", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* g = dy.data<T>();
      T* out = dx.data<T>();
      const int64_t rows = outer * n;
      const int64_t avg = std::max<int64_t>(1, (m / std::max<int64_t>(n, 1) + 1) * inner);
      ctx.threads().parallel_for(rows, std::max<int64_t>(1, kParallelGrain / avg), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          const int64_t o = r / n, row = r % n;
          T* d = out + r * inner;
          std::fill(d, d + inner, T(0));
          if (row == pad) continue;
          const T* base = g + o * m * inner;
          for (int64_t p = start[row]; p < start[row + 1]; ++p) {
            const T* s = base + pos[p] * inner;
            for (int64_t i = 0; i < inner; ++i) d[i] += s[i];
          }
        }
      });
    });
  }

 private:
  int64_t axis_, padding_idx_;
};

std::string gather_grad(GradBuilder& g, int64_t axis, int64_t padding_idx) {
  AttributeMap attrs{{"axis", Attribute::of_int(axis)}};
  if (padding_idx >= 0) attrs["padding_idx"] = Attribute::of_int(padding_idx);
  std::string dx =
      g.op("GatherGrad", {g.output_grad(0), g.input(1), g.shape_of(g.input(0))}, attrs, kOnnxTrainDomain);
  same_dtype(g, dx, g.input(0));
  return dx;
}

void gather_gradient(GradBuilder& g) { g.set_input_grad(0, gather_grad(g, g.node().attr_int("axis", 0), -1)); }

void embedding_gradient(GradBuilder& g) {
  g.set_input_grad(0, gather_grad(g, 0, padding_idx_attr(g.node())));
}

// Embedding replaces an ordinary Gather in exported models, so it gets a schema with Gather's
// shape rule: indices.shape + weight.shape[1:].
onnx::OpSchema embedding_schema() {
  onnx::OpSchema schema;
  schema.SetName("Embedding")
      .SetDomain(kOnnxTrainDomain)
      .SinceVersion(1)
      .SetDoc("Gather along axis 0 of a table; the padding_idx row gets no gradient (torch.nn.Embedding).")
      .Attr("padding_idx", "row whose gradient stays zero, -1 for none", onnx::AttributeProto::INT,
            static_cast<int64_t>(-1))
      .Input(0, "weight", "the table", "T", onnx::OpSchema::Single, true, 1, onnx::OpSchema::Differentiable)
      .Input(1, "indices", "rows to look up", "Tind", onnx::OpSchema::Single, true, 1,
             onnx::OpSchema::NonDifferentiable)
      .Output(0, "output", "the rows", "T", onnx::OpSchema::Single, true, 1, onnx::OpSchema::Differentiable)
      .TypeConstraint("T", onnx::OpSchema::all_tensor_types(), "any tensor type")
      .TypeConstraint("Tind", {"tensor(int32)", "tensor(int64)"}, "index types")
      .TypeAndShapeInferenceFunction([](onnx::InferenceContext& ctx) {
        onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0);
        if (!onnx::hasNInputShapes(ctx, 2)) return;
        const auto& weight = ctx.getInputType(0)->tensor_type().shape();
        const auto& indices = ctx.getInputType(1)->tensor_type().shape();
        if (weight.dim_size() < 1) return;
        auto* out = ctx.getOutputType(0)->mutable_tensor_type()->mutable_shape();
        for (const auto& d : indices.dim()) *out->add_dim() = d;
        for (int i = 1; i < weight.dim_size(); ++i) *out->add_dim() = weight.dim(i);
      });
  return schema;
}


}  // namespace

ONNXTRAIN_KERNEL("", "Gather", kernel_factory<GatherKernel>(), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_NATIVE_16BIT_FLOATS("", "Gather", kBothHalfFloats);
ONNXTRAIN_SCHEMA(embedding_schema());
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "Embedding", kernel_factory<EmbeddingKernel>(),
                 Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "GatherGrad", kernel_factory<GatherGradKernel>(),
                 Recompute::Costly, Rounding::SumOfTerms);
ONNXTRAIN_GRADIENT("", "Gather", gather_gradient);
ONNXTRAIN_GRADIENT(kOnnxTrainDomain, "Embedding", embedding_gradient);

}  // namespace onnxtrain
