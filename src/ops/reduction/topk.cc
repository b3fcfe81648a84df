// TopK (k as an attribute before opset 10, as input 1 since; largest/sorted since 11) and its
// gradient: dValues scattered to the selected indices (TopKGrad), as PyTorch's topk backward.
#include <algorithm>
#include <cmath>

#include "autodiff/grad_builder.h"
#include "opdef/op_registry.h"
#include "ops/common/reduce.h"
#include "runtime/thread_pool.h"

namespace onnxtrain {
namespace {

// Orders that rank NaN above every number (as PyTorch does) and stay strict weak orders, which
// std::sort needs; ties go to the lower index, as the ONNX spec asks.
template <typename T>
bool greater(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) return a > b || (std::isnan(a) && !std::isnan(b));
  else return a > b;
}

class TopKKernel final : public Kernel {
 public:
  explicit TopKKernel(const KernelInfo& info)
      : axis_(info.node.attr_int("axis", -1)),
        largest_(info.opset < 11 || info.node.attr_int("largest", 1) != 0),
        k_from_input_(info.opset >= 10),
        k_attr_(info.node.attr_int("k", -1)) {}

  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    OT_CHECK(x.rank() >= 1, "the input must have rank >= 1, got ", x.str());
    const int axis = normalize_axis(axis_, x.rank(), "TopK");
    int64_t k = k_attr_;
    if (k_from_input_) {
      const Tensor& kt = ctx.input(1);
      OT_CHECK(kt.dtype() == DType::Int64 && kt.numel() == 1, "input 'K' must hold one int64, got ", kt.str());
      k = kt.item_as_int(0);
    }
    const AxisSplit s = split_at_axis(x.shape(), axis);
    OT_CHECK(k >= 0 && k <= s.n, "k = ", k, " is out of range for axis ", axis_, " of ", x.str());
    TensorShape shape = x.shape();
    shape[axis] = k;
    Tensor& values = ctx.allocate_output(0, x.dtype(), shape);
    Tensor& indices = ctx.allocate_output(1, DType::Int64, shape);
    const int64_t slices = s.outer * s.inner;
    if (k == 0 || slices == 0) return;
    dispatch_numeric(x.dtype(), "TopK", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* px = x.data<T>();
      T* pv = values.data<T>();
      int64_t* pi = indices.data<int64_t>();
      // One task per thread, each with its own row of values and index order in scratch.
      const int64_t tasks = std::min<int64_t>(slices, ctx.threads().num_threads());
      const size_t row_bytes = (static_cast<size_t>(s.n) * (sizeof(T) + sizeof(int64_t)) + 63) / 64 * 64;
      auto* mem = static_cast<uint8_t*>(ctx.scratch(row_bytes * static_cast<size_t>(tasks)));
      const bool largest = largest_;
      ctx.threads().parallel_for(tasks, 1, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
          auto* order = reinterpret_cast<int64_t*>(mem + row_bytes * t);
          T* row = reinterpret_cast<T*>(order + s.n);
          auto before = [&](int64_t a, int64_t b) {
            const T va = row[a], vb = row[b];
            if (largest ? greater(va, vb) : greater(vb, va)) return true;
            if (largest ? greater(vb, va) : greater(va, vb)) return false;
            return a < b;
          };
          for (int64_t slice = slices * t / tasks; slice < slices * (t + 1) / tasks; ++slice) {
            const int64_t o = slice / s.inner, i = slice % s.inner;
            const T* src = px + o * s.n * s.inner + i;
            for (int64_t j = 0; j < s.n; ++j) {
              row[j] = src[j * s.inner];
              order[j] = j;
            }
            // Sorted output either way: "sorted = 0" leaves the order open, so this is valid too.
            std::partial_sort(order, order + k, order + s.n, before);
            T* dv = pv + o * k * s.inner + i;
            int64_t* di = pi + o * k * s.inner + i;
            for (int64_t j = 0; j < k; ++j) {
              dv[j * s.inner] = row[order[j]];
              di[j * s.inner] = order[j];
            }
          }
        }
      });
    });
  }

 private:
  int64_t axis_;
  bool largest_;
  bool k_from_input_;
  int64_t k_attr_;
};

// Inputs: dValues, Indices, shape of X. dX is zero except at the selected elements.
class TopKGradKernel final : public Kernel {
 public:
  explicit TopKGradKernel(const KernelInfo& info) : axis_(info.node.attr_int("axis", -1)) {}

  void compute(KernelContext& ctx) const override {
    const Tensor& dv = ctx.input(0);
    const Tensor& idx = ctx.input(1);
    TensorShape shape(ctx.input(2).to_int64_vector());
    OT_CHECK(idx.dtype() == DType::Int64 && idx.shape() == dv.shape(), "Indices ", idx.str(),
             " must be int64 shaped like dValues ", dv.str());
    OT_CHECK(dv.rank() == shape.rank(), "dValues ", dv.str(), " and the input shape ", shape.str(), " differ in rank");
    const int axis = normalize_axis(axis_, shape.rank(), "TopKGrad");
    const AxisSplit s = split_at_axis(shape, axis);
    const int64_t k = dv.rank() ? dv.dim(axis) : 1;
    Tensor& dx = ctx.allocate_output(0, dv.dtype(), shape);
    dispatch_float(dv.dtype(), "TopKGrad", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* pg = dv.data<T>();
      const int64_t* pi = idx.data<int64_t>();
      T* px = dx.data<T>();
      ctx.threads().parallel_for(s.outer, std::max<int64_t>(1, (1 << 15) / std::max<int64_t>(1, s.n * s.inner)),
                                 [&](int64_t o0, int64_t o1) {
                                   std::fill(px + o0 * s.n * s.inner, px + o1 * s.n * s.inner, T(0));
                                   for (int64_t o = o0; o < o1; ++o)
                                     for (int64_t j = 0; j < k; ++j)
                                       for (int64_t i = 0; i < s.inner; ++i) {
                                         const int64_t at = (o * k + j) * s.inner + i;
                                         const int64_t target = pi[at];
                                         OT_CHECK(target >= 0 && target < s.n, "index ", target,
                                                  " is out of range for axis size ", s.n);
                                         px[(o * s.n + target) * s.inner + i] += pg[at];
                                       }
                                 });
    });
  }

 private:
  int64_t axis_;
};

void topk_gradient(GradBuilder& g) {
  const int64_t axis = g.node().attr_int("axis", -1);
  g.set_input_grad(0, g.op("TopKGrad", {g.output_grad(0), g.output(1), g.shape_of(g.input(0))},
                           {{"axis", Attribute::of_int(axis)}}, kOnnxTrainDomain));
}

}  // namespace

ONNXTRAIN_KERNEL("", "TopK", kernel_factory<TopKKernel>(), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "TopKGrad", kernel_factory<TopKGradKernel>(), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_GRADIENT("", "TopK", topk_gradient);

// The indices are chosen by comparing values: the audit judges them by the values they select.
static AuditedOutput topk_audited_output(const Node&, size_t index) {
  return index == 1 ? AuditedOutput::SelectedIndex : AuditedOutput::Value;
}
ONNXTRAIN_AUDITED_OUTPUTS("", "TopK", topk_audited_output);

}  // namespace onnxtrain
