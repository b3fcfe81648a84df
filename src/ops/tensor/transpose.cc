// Transpose and its gradient (the inverse permutation).
#include <array>
#include <cstring>

#include "autodiff/grad_builder.h"
#include "opdef/op_registry.h"
#include "ops/common/elementwise.h"

namespace onnxtrain {
namespace {

// A permutation with its dims coalesced: size-1 dims dropped, and input axes that stay adjacent
// and in order merged into one. `shape` is the output's, `in_stride[d]` the input stride of
// output dim d.
struct Permutation {
  int rank = 0;
  std::array<int64_t, TensorShape::kMaxRank> shape{}, in_stride{};
};

Permutation coalesce(const TensorShape& in_shape, const std::vector<int64_t>& perm) {
  const int rank = in_shape.rank();
  std::array<int64_t, TensorShape::kMaxRank> stride{};
  int64_t s = 1;
  for (int d = rank - 1; d >= 0; --d) {
    stride[d] = s;
    s *= in_shape[d];
  }
  Permutation p;
  int last_axis = -2;
  for (int d = 0; d < rank; ++d) {
    const int axis = static_cast<int>(perm[d]);
    const int64_t size = in_shape[axis];
    if (size == 1) continue;
    if (p.rank > 0 && axis == last_axis + 1) {  // continues the previous input axis: merge
      p.shape[p.rank - 1] *= size;
      p.in_stride[p.rank - 1] = stride[axis];
    } else {
      p.shape[p.rank] = size;
      p.in_stride[p.rank] = stride[axis];
      ++p.rank;
    }
    last_axis = axis;
  }
  return p;
}

// Calls fn(out_offset, in_offset) for every combination of output dims [0, dims) except `skip`
// (-1: none), in row-major order; out_stride gives the output strides.
template <typename Fn>
void for_each_outer(const Permutation& p, const std::array<int64_t, TensorShape::kMaxRank>& out_stride, int dims,
                    int skip, int64_t begin, int64_t end, Fn fn) {
  std::array<int64_t, TensorShape::kMaxRank> idx{};
  int64_t rem = begin, out_off = 0, in_off = 0;
  for (int d = dims - 1; d >= 0; --d) {
    if (d == skip) continue;
    idx[d] = rem % p.shape[d];
    rem /= p.shape[d];
    out_off += idx[d] * out_stride[d];
    in_off += idx[d] * p.in_stride[d];
  }
  for (int64_t r = begin; r < end; ++r) {
    fn(out_off, in_off);
    for (int d = dims - 1; d >= 0; --d) {
      if (d == skip) continue;
      if (++idx[d] < p.shape[d]) {
        out_off += out_stride[d];
        in_off += p.in_stride[d];
        break;
      }
      out_off -= out_stride[d] * (p.shape[d] - 1);
      in_off -= p.in_stride[d] * (p.shape[d] - 1);
      idx[d] = 0;
    }
  }
}

// out = in permuted. Two cases after coalescing: the input's innermost axis stays innermost (rows
// are copied whole), or it moves to output dim q (then tiles of q x last are transposed through
// the cache: reading the input's innermost axis along q and writing the output's along last, so
// neither side strides through memory a cache line per element).
template <typename T>
void permute(ThreadPool& pool, const T* in, const TensorShape& in_shape, const std::vector<int64_t>& perm, T* out) {
  const Permutation p = coalesce(in_shape, perm);
  const int64_t n = in_shape.numel();
  if (n == 0) return;
  if (p.rank <= 1) {
    std::memcpy(out, in, static_cast<size_t>(n) * sizeof(T));
    return;
  }
  std::array<int64_t, TensorShape::kMaxRank> out_stride{};
  int64_t s = 1;
  for (int d = p.rank - 1; d >= 0; --d) {
    out_stride[d] = s;
    s *= p.shape[d];
  }
  const int last = p.rank - 1;
  if (p.in_stride[last] == 1) {
    const int64_t inner = p.shape[last], rows = n / inner;
    pool.parallel_for(rows, std::max<int64_t>(1, kParallelGrain / inner), [&](int64_t r0, int64_t r1) {
      for_each_outer(p, out_stride, last, -1, r0, r1, [&](int64_t o, int64_t i) {
        std::memcpy(out + o, in + i, static_cast<size_t>(inner) * sizeof(T));
      });
    });
    return;
  }
  int q = 0;
  while (p.in_stride[q] != 1) ++q;
  constexpr int64_t kTile = 16;
  const int64_t nq = p.shape[q], nl = p.shape[last], sq = out_stride[q], sl_in = p.in_stride[last];
  const int64_t tq = (nq + kTile - 1) / kTile, tl = (nl + kTile - 1) / kTile;
  const int64_t outer = n / (nq * nl);
  pool.parallel_for(outer * tq, std::max<int64_t>(1, kParallelGrain / (kTile * nl)), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t o_index = t / tq, i0 = (t % tq) * kTile, i1 = std::min(nq, i0 + kTile);
      for_each_outer(p, out_stride, last, q, o_index, o_index + 1, [&](int64_t ob, int64_t ib) {
        for (int64_t jt = 0; jt < tl; ++jt) {
          const int64_t j0 = jt * kTile, j1 = std::min(nl, j0 + kTile);
          for (int64_t i = i0; i < i1; ++i) {
            T* o = out + ob + i * sq;
            const T* src = in + ib + i;
            for (int64_t j = j0; j < j1; ++j) o[j] = src[j * sl_in];
          }
        }
      });
    }
  });
}

void check_permutation(const std::vector<int64_t>& perm) {
  std::vector<bool> seen(perm.size(), false);
  for (int64_t p : perm) {
    OT_CHECK(p >= 0 && p < static_cast<int64_t>(perm.size()) && !seen[static_cast<size_t>(p)], "perm (entry ", p,
             " of ", perm.size(), ") is not a permutation of the input's axes");
    seen[static_cast<size_t>(p)] = true;
  }
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
    check_permutation(perm);
    TensorShape shape;
    for (int64_t p : perm) shape.push_back(x.dim(static_cast<int>(p)));
    if (x.rank() <= 1) {
      ctx.allocate_output(0, x.dtype(), shape).copy_from(x);
      return;
    }
    Tensor& y = ctx.allocate_output(0, x.dtype(), shape);
    dispatch_by_width(x.dtype(), "Transpose", [&](auto tag) {
      using Bits = typename decltype(tag)::type;
      permute<Bits>(ctx.threads(), static_cast<const Bits*>(x.raw_data()), x.shape(), perm,
                    static_cast<Bits*>(y.raw_data()));
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
  check_permutation(perm);  // the builder names the node
  std::vector<int64_t> inverse(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inverse[static_cast<size_t>(perm[i])] = static_cast<int64_t>(i);
  g.set_input_grad(0, g.op("Transpose", {g.output_grad(0)}, {{"perm", Attribute::of_ints(inverse)}}));
}

}  // namespace

ONNXTRAIN_KERNEL("", "Transpose", kernel_factory<TransposeKernel>(), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_NATIVE_16BIT_FLOATS("", "Transpose", kBothHalfFloats);
ONNXTRAIN_GRADIENT("", "Transpose", transpose_gradient);

}  // namespace onnxtrain
