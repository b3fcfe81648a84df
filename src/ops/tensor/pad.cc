// Pad (constant, reflect, edge; negative pads crop) and PadGrad, its gradient for every mode.
//
// Each axis gets a map from output position to input position (-1: the constant). The forward
// reads through the maps; PadGrad adds dY back through the same maps, so reflect and edge
// positions that read one input element several times sum their gradients, as in PyTorch.
// Reflect follows numpy.pad, which the ONNX reference uses: pads wider than dim-1 keep
// reflecting instead of failing (PyTorch rejects them).
#include <cstring>

#include "core/checked_math.h"
#include "opdef/op_registry.h"
#include "ops/common/elementwise.h"
#include "ops/tensor/indexing.h"
#include "runtime/thread_pool.h"

namespace onnxtrain {
namespace {

enum class PadMode { Constant, Reflect, Edge };

PadMode parse_mode(const Node& node) {
  const std::string m = node.attr_string("mode", "constant");
  if (m == "constant") return PadMode::Constant;
  if (m == "reflect") return PadMode::Reflect;
  if (m == "edge") return PadMode::Edge;
  throw UnsupportedError(str_cat("Pad mode '", m, "' is not supported (constant, reflect, edge)"));
}

// Output shape and the per-axis maps (concatenated, in scratch) for input `in` and `pads`.
struct PadPlan {
  TensorShape out;
  std::array<const int64_t*, TensorShape::kMaxRank> map{};
};

PadPlan plan_pad(KernelContext& ctx, const TensorShape& in, const std::vector<int64_t>& pads, PadMode mode) {
  const int rank = in.rank();
  OT_CHECK(static_cast<int>(pads.size()) == 2 * rank, "pads has ", pads.size(), " values, expected ", 2 * rank,
           " (begin and end for each axis of ", in.str(), ")");
  PadPlan p;
  int64_t total = 0;
  for (int d = 0; d < rank; ++d) {
    const int64_t n = checked_add(checked_add(in[d], pads[static_cast<size_t>(d)], "Pad"),
                                  pads[static_cast<size_t>(d + rank)], "Pad");
    OT_CHECK(n >= 0, "pads crop axis ", d, " of ", in.str(), " below zero");
    p.out.push_back(n);
    total = checked_add(total, n, "Pad");
  }
  auto* maps = static_cast<int64_t*>(ctx.scratch(static_cast<size_t>(std::max<int64_t>(total, 1)) * sizeof(int64_t)));
  for (int d = 0; d < rank; ++d) {
    const int64_t dim = in[d], begin = pads[static_cast<size_t>(d)];
    OT_CHECK(mode == PadMode::Constant || dim > 0 || p.out[d] == 0, "cannot pad axis ", d, " of ", in.str(),
             " in ", mode == PadMode::Edge ? "edge" : "reflect", " mode: it is empty");
    int64_t* m = maps;
    for (int64_t i = 0; i < p.out[d]; ++i) {
      const int64_t j = i - begin;
      if (mode == PadMode::Constant) {
        m[i] = j >= 0 && j < dim ? j : -1;
      } else if (mode == PadMode::Edge || dim == 1) {
        m[i] = std::clamp<int64_t>(j, 0, dim - 1);
      } else {
        const int64_t period = 2 * (dim - 1);
        const int64_t k = ((j % period) + period) % period;
        m[i] = k < dim ? k : period - k;
      }
    }
    p.map[d] = maps;
    maps += p.out[d];
  }
  return p;
}

// Calls f(out_row, in_row_offset or -1) for output rows [r0, r1) (rows: all dims but the last).
template <typename F>
void for_pad_rows(const PadPlan& p, const Strides& in_strides, int64_t r0, int64_t r1, F&& f) {
  const int rank = p.out.rank();
  for (int64_t r = r0; r < r1; ++r) {
    int64_t rem = r, off = 0;
    for (int d = rank - 2; d >= 0; --d) {
      const int64_t m = p.map[d][rem % p.out[d]];
      rem /= p.out[d];
      off = m < 0 || off < 0 ? -1 : off + m * in_strides[d];
    }
    f(r, off);
  }
}

class PadKernel final : public Kernel {
 public:
  explicit PadKernel(const KernelInfo& info) : mode_(parse_mode(info.node)), attributes_(info.opset < 11) {
    if (attributes_) {
      pads_ = info.node.attr_ints(info.opset < 2 ? "paddings" : "pads");
      value_ = info.node.attr_float("value", 0.0f);
    }
    if (info.node.has_input(3)) throw UnsupportedError("Pad with an 'axes' input (opset 18) is not supported");
  }
  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    const std::vector<int64_t> pads = attributes_ ? pads_ : int_values(ctx.input(1), "pads");
    PadPlan p = plan_pad(ctx, x.shape(), pads, mode_);
    Tensor& y = ctx.allocate_output(0, x.dtype(), p.out);
    if (y.numel() == 0) return;
    if (x.rank() == 0) {
      y.copy_from(x);
      return;
    }
    Tensor fill = constant(ctx, x.dtype());
    dispatch_bytes(x.dtype(), "Pad", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T c = *static_cast<const T*>(fill.raw_data());
      const T* src = static_cast<const T*>(x.raw_data());
      T* dst = static_cast<T*>(y.raw_data());
      const int rank = x.rank();
      const int64_t width = p.out[rank - 1];
      const int64_t* last = p.map[rank - 1];
      const Strides in_strides = contiguous_strides(x.shape());
      const int64_t grain = std::max<int64_t>(1, kParallelGrain / width);
      ctx.threads().parallel_for(y.numel() / width, grain, [&](int64_t r0, int64_t r1) {
        for_pad_rows(p, in_strides, r0, r1, [&](int64_t r, int64_t off) {
          T* o = dst + r * width;
          if (off < 0) {
            std::fill(o, o + width, c);
            return;
          }
          const T* s = src + off;
          for (int64_t i = 0; i < width; ++i) o[i] = last[i] < 0 ? c : s[last[i]];
        });
      });
    });
  }

 private:
  // The pad value as a 0-d tensor of the data's type.
  Tensor constant(const KernelContext& ctx, DType dtype) const {
    if (!attributes_ && ctx.has_input(2)) {
      const Tensor& v = ctx.input(2);
      OT_CHECK(v.dtype() == dtype && v.numel() == 1, "constant_value must be one ", dtype_name(dtype), " value, got ",
               v.str());
      return v;
    }
    if (is_16bit_float(dtype)) {
      OT_CHECK(value_ == 0.0f, "a non-zero pad value for ", dtype_name(dtype), " data is not supported");
      return Tensor::zeros(dtype, {});
    }
    return dispatch_all(dtype, "Pad", [&](auto tag) {
      using T = typename decltype(tag)::type;
      return Tensor::scalar<T>(static_cast<T>(value_));
    });
  }

  PadMode mode_;
  bool attributes_;
  std::vector<int64_t> pads_;
  float value_ = 0.0f;
};

// PadGrad(dY, pads): the input's gradient, input shape = dY's shape minus the pads.
class PadGradKernel final : public Kernel {
 public:
  explicit PadGradKernel(const KernelInfo& info) : mode_(parse_mode(info.node)) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& dy = ctx.input(0);
    const std::vector<int64_t> pads = int_values(ctx.input(1), "pads");
    const int rank = dy.rank();
    OT_CHECK(static_cast<int>(pads.size()) == 2 * rank, "PadGrad: pads has ", pads.size(), " values for dY ", dy.str());
    TensorShape in;
    for (int d = 0; d < rank; ++d) {
      in.push_back(checked_sub(checked_sub(dy.dim(d), pads[static_cast<size_t>(d)], "PadGrad"),
                               pads[static_cast<size_t>(d + rank)], "PadGrad"));
      OT_CHECK(in[d] >= 0, "PadGrad: dY ", dy.str(), " is smaller than its pads");
    }
    PadPlan p = plan_pad(ctx, in, pads, mode_);
    Tensor& dx = ctx.allocate_output(0, dy.dtype(), in);
    dispatch_float(dy.dtype(), "PadGrad", [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* out = dx.data<T>();
      const T* g = dy.data<T>();
      std::fill(out, out + dx.numel(), T(0));
      if (dx.numel() == 0 || dy.numel() == 0) return;
      if (rank == 0) {
        out[0] = g[0];
        return;
      }
      // Leading axes without padding map one-to-one, so their blocks never collide.
      int lead = 0;
      while (lead < rank - 1 && pads[static_cast<size_t>(lead)] == 0 && pads[static_cast<size_t>(lead + rank)] == 0)
        ++lead;
      const int64_t blocks = in.size_between(0, lead);
      const int64_t width = p.out[rank - 1];
      const int64_t rows_per_block = dy.numel() / width / blocks;
      const int64_t* last = p.map[rank - 1];
      const Strides in_strides = contiguous_strides(in);
      ctx.threads().parallel_for(blocks, std::max<int64_t>(1, kParallelGrain / (rows_per_block * width)),
                                 [&](int64_t b0, int64_t b1) {
                                   for_pad_rows(p, in_strides, b0 * rows_per_block, b1 * rows_per_block,
                                                [&](int64_t r, int64_t off) {
                                                  if (off < 0) return;
                                                  const T* s = g + r * width;
                                                  T* o = out + off;
                                                  for (int64_t i = 0; i < width; ++i)
                                                    if (last[i] >= 0) o[last[i]] += s[i];
                                                });
                                 });
    });
  }

 private:
  PadMode mode_;
};

void pad_gradient(GradBuilder& g) {
  const Node& n = g.node();
  std::string pads = g.opset() >= 11 ? g.input(1) : g.int64s(n.attr_ints(g.opset() < 2 ? "paddings" : "pads"));
  const AttributeMap mode{{"mode", Attribute::of_string(n.attr_string("mode", "constant"))}};
  std::string dx = g.op("PadGrad", {g.output_grad(0), pads}, mode, kOnnxTrainDomain);
  same_dtype(g, dx, g.input(0));
  g.set_input_grad(0, dx);
}

}  // namespace

ONNXTRAIN_KERNEL("", "Pad", kernel_factory<PadKernel>(), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_NATIVE_16BIT_FLOATS("", "Pad", kBothHalfFloats);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "PadGrad", kernel_factory<PadGradKernel>(), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_GRADIENT("", "Pad", pad_gradient);

}  // namespace onnxtrain
