// Transpose and its gradient (the inverse permutation).
#include <cstring>

#include "autodiff/grad_builder.h"
#include "ops/common/elementwise.h"
#include "ops/registry.h"

namespace onnxtrain {
namespace {

template <typename T>
void permute(ThreadPool& pool, const T* in, const TensorShape& in_shape, const std::vector<int64_t>& perm, T* out) {
  const int rank = in_shape.rank();
  TensorShape out_shape;
  for (int d = 0; d < rank; ++d) out_shape.push_back(in_shape[static_cast<int>(perm[d])]);
  // Input strides read in output order: a strided copy where the output is contiguous.
  std::array<int64_t, TensorShape::kMaxRank> in_strides{};
  int64_t s = 1;
  for (int d = rank - 1; d >= 0; --d) {
    in_strides[d] = s;
    s *= in_shape[d];
  }
  const int64_t n = out_shape.numel();
  if (n == 0) return;
  const int64_t inner = out_shape[rank - 1];
  const int64_t inner_stride = in_strides[static_cast<int>(perm[rank - 1])];
  const int64_t rows = n / inner;
  pool.parallel_for(rows, std::max<int64_t>(1, kParallelGrain / inner), [&](int64_t r0, int64_t r1) {
    std::array<int64_t, TensorShape::kMaxRank> idx{};
    int64_t rem = r0, off = 0;
    for (int d = rank - 2; d >= 0; --d) {
      idx[d] = rem % out_shape[d];
      rem /= out_shape[d];
      off += idx[d] * in_strides[static_cast<int>(perm[d])];
    }
    for (int64_t r = r0; r < r1; ++r) {
      T* o = out + r * inner;
      const T* p = in + off;
      if (inner_stride == 1) {
        std::memcpy(o, p, static_cast<size_t>(inner) * sizeof(T));
      } else {
        for (int64_t i = 0; i < inner; ++i) o[i] = p[i * inner_stride];
      }
      for (int d = rank - 2; d >= 0; --d) {
        const int64_t st = in_strides[static_cast<int>(perm[d])];
        if (++idx[d] < out_shape[d]) {
          off += st;
          break;
        }
        off -= st * (out_shape[d] - 1);
        idx[d] = 0;
      }
    }
  });
}

class TransposeKernel final : public Kernel {
 public:
  explicit TransposeKernel(const KernelInfo& info) : perm_(info.node.attr_ints("perm")) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    std::vector<int64_t> perm = perm_;
    if (perm.empty())
      for (int d = x.rank() - 1; d >= 0; --d) perm.push_back(d);
    OT_CHECK(static_cast<int>(perm.size()) == x.rank(), "perm has ", perm.size(), " entries for input ", x.str());
    std::vector<bool> seen(perm.size(), false);
    TensorShape shape;
    for (int64_t p : perm) {
      OT_CHECK(p >= 0 && p < x.rank() && !seen[p], "perm is not a permutation of the input's axes");
      seen[p] = true;
      shape.push_back(x.dim(static_cast<int>(p)));
    }
    if (x.rank() <= 1) {
      ctx.allocate_output(0, x.dtype(), shape).copy_from(x);
      return;
    }
    Tensor& y = ctx.allocate_output(0, x.dtype(), shape);
    dispatch_all(x.dtype(), "Transpose", [&](auto tag) {
      using T = typename decltype(tag)::type;
      permute<T>(ctx.threads(), x.data<T>(), x.shape(), perm, y.data<T>());
    });
  }

 private:
  std::vector<int64_t> perm_;
};

void transpose_gradient(GradBuilder& g) {
  std::vector<int64_t> perm = g.node().attr_ints("perm");
  if (perm.empty()) {  // default perm reverses the axes, and is its own inverse
    g.set_input_grad(0, g.op("Transpose", {g.output_grad(0)}));
    return;
  }
  std::vector<int64_t> inverse(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inverse[static_cast<size_t>(perm[i])] = static_cast<int64_t>(i);
  g.set_input_grad(0, g.op("Transpose", {g.output_grad(0)}, {{"perm", Attribute::of_ints(inverse)}}));
}

}  // namespace

ONNXTRAIN_KERNEL("", "Transpose", kernel_factory<TransposeKernel>());
ONNXTRAIN_GRADIENT("", "Transpose", transpose_gradient);

}  // namespace onnxtrain
