// Cast between numeric and bool types; the gradient casts back to the input's float type.
#include "autodiff/grad_builder.h"
#include "ops/common/elementwise.h"
#include "ops/registry.h"

namespace onnxtrain {
namespace {

template <typename From, typename To>
To convert(From v) {
  if constexpr (std::is_same_v<To, bool>) return v != From(0);
  else return static_cast<To>(v);
}

class CastKernel final : public Kernel {
 public:
  explicit CastKernel(const KernelInfo& info) {
    OT_CHECK(info.node.has_attr("to"), "Cast needs the attribute 'to'");
    to_ = dtype_from_onnx(static_cast<int32_t>(info.node.attr_int("to", 0)));
  }
  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    if (x.dtype() == to_) {
      ctx.alias_input(0, 0, x.shape());
      return;
    }
    Tensor& y = ctx.allocate_output(0, to_, x.shape());
    dispatch_all(x.dtype(), "Cast", [&](auto from_tag) {
      using From = typename decltype(from_tag)::type;
      dispatch_all(to_, "Cast", [&](auto to_tag) {
        using To = typename decltype(to_tag)::type;
        unary_map(ctx.threads(), x.data<From>(), y.data<To>(), x.numel(), [](From v) { return convert<From, To>(v); });
      });
    });
  }

 private:
  DType to_;
};

void cast_gradient(GradBuilder& g) {
  DType in = g.dtype_of(g.input(0));
  g.set_input_grad(0, g.op("Cast", {g.output_grad(0)}, {{"to", Attribute::of_int(static_cast<int64_t>(in))}}));
}

}  // namespace

ONNXTRAIN_KERNEL("", "Cast", kernel_factory<CastKernel>());
ONNXTRAIN_GRADIENT("", "Cast", cast_gradient);

}  // namespace onnxtrain
