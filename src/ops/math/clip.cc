// Clip: bounds are attributes before opset 11 and optional scalar inputs since; integer types
// too. y = min(max(x, lo), hi), so lo > hi gives hi everywhere (numpy.clip and torch.clamp agree)
// and NaN passes through. The gradient, ClipGrad(dY, X, lo?, hi?), is PyTorch's clamp backward:
// dY where lo <= x <= hi (bounds included), else 0.
#include <limits>

#include "autodiff/grad_builder.h"
#include "opdef/op_registry.h"
#include "ops/math/float_kernels.h"

namespace onnxtrain {
namespace {

// Reads optional scalar input i as T, or `fallback` when it is omitted.
template <typename T>
T bound_input(KernelContext& ctx, int i, T fallback, const char* name) {
  if (!ctx.has_input(i)) return fallback;
  const Tensor& b = ctx.input(i);
  OT_CHECK(b.numel() == 1, "Clip: '", name, "' must be a scalar, got ", b.str());
  OT_CHECK(b.dtype() == ctx.input(0).dtype(), "Clip: '", name, "' is ", b.str(), ", input is ", ctx.input(0).str());
  return b.data<T>()[0];
}

class ClipKernel final : public Kernel {
 public:
  explicit ClipKernel(const KernelInfo& info) : attr_bounds_(info.opset < 11) {
    lo_ = info.node.attr_float("min", -std::numeric_limits<float>::infinity());
    hi_ = info.node.attr_float("max", std::numeric_limits<float>::infinity());
  }

  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    dispatch_numeric(x.dtype(), "Clip", [&](auto tag) {
      using T = typename decltype(tag)::type;
      // A missing bound is no bound: infinite for floats, so that +-inf pass through unclipped.
      constexpr T kLowest = std::numeric_limits<T>::has_infinity ? -std::numeric_limits<T>::infinity()
                                                                  : std::numeric_limits<T>::lowest();
      constexpr T kHighest = std::numeric_limits<T>::has_infinity ? std::numeric_limits<T>::infinity()
                                                                   : std::numeric_limits<T>::max();
      T lo, hi;
      if (attr_bounds_) {
        if constexpr (std::is_floating_point_v<T>) {
          lo = static_cast<T>(lo_);
          hi = static_cast<T>(hi_);
        } else {
          OT_THROW("Clip before opset 11 takes float inputs only, got ", x.str());
        }
      } else {
        lo = bound_input<T>(ctx, 1, kLowest, "min");
        hi = bound_input<T>(ctx, 2, kHighest, "max");
      }
      unary_kernel<T>(ctx, [lo, hi](T v) {
        T a = v < lo ? lo : v;
        return a > hi ? hi : a;
      });
    });
  }

 private:
  bool attr_bounds_;
  float lo_, hi_;
};

// Inputs dY, X, optional lo, optional hi (0-d tensors).
void clip_grad(KernelContext& ctx) {
  const Tensor& dy = ctx.input(0);
  const Tensor& x = ctx.input(1);
  Tensor& out = ctx.allocate_output(0, dy.dtype(), dy.shape());
  dispatch_float(dy.dtype(), "ClipGrad", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T lo = ctx.has_input(2) ? ctx.input(2).data<T>()[0] : -std::numeric_limits<T>::infinity();
    const T hi = ctx.has_input(3) ? ctx.input(3).data<T>()[0] : std::numeric_limits<T>::infinity();
    binary_broadcast(ctx.threads(), dy.data<T>(), dy.shape(), x.data<T>(), x.shape(), out.data<T>(), dy.shape(),
                     [lo, hi](T g, T v) { return v >= lo && v <= hi ? g : T(0); });
  });
}

// Training graphs are opset 13+, so the bounds are inputs here.
void clip_gradient(GradBuilder& g) {
  std::vector<std::string> in{g.output_grad(0), g.input(0), g.has_input(1) ? g.input(1) : "",
                              g.has_input(2) ? g.input(2) : ""};
  while (in.back().empty()) in.pop_back();
  g.set_input_grad(0, g.op("ClipGrad", in, {}, kOnnxTrainDomain));
}

}  // namespace

ONNXTRAIN_KERNEL("", "Clip", kernel_factory<ClipKernel>(), Recompute::Cheap, Rounding::PerValue);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "ClipGrad", kernel_factory(&clip_grad), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_GRADIENT("", "Clip", clip_gradient);

}  // namespace onnxtrain
