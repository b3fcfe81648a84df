// ai.onnxtrain::AdaptiveAveragePool: torch.nn.AdaptiveAvgPool{1,2,3}d, which ONNX lacks (torch
// can only export it as AveragePool when the input size is fixed, and onnxtrain exports every
// dim dynamic). Output index i of a dim of size I pooled to O averages [floor(i*I/O),
// ceil((i+1)*I/O)), PyTorch's windows. The gradient spreads dY over the same windows.
#include "autodiff/grad_builder.h"
#include "onnx/custom_schema.h"
#include "opdef/op_registry.h"
#include "runtime/thread_pool.h"

namespace onnxtrain {
namespace {

constexpr int kMaxSpatial = 3;

// Window bounds along each spatial dim, padded to 3 dims with size-1 dims in front.
struct AdaptiveGeometry {
  int64_t planes = 1;
  int64_t in[kMaxSpatial] = {1, 1, 1}, out[kMaxSpatial] = {1, 1, 1};
  int64_t begin(int d, int64_t i) const { return i * in[d] / out[d]; }
  int64_t end(int d, int64_t i) const { return ((i + 1) * in[d] + out[d] - 1) / out[d]; }
  int64_t in_size() const { return in[0] * in[1] * in[2]; }
  int64_t out_size() const { return out[0] * out[1] * out[2]; }
};

AdaptiveGeometry adaptive_geometry(const TensorShape& x, const std::vector<int64_t>& output_size,
                                   TensorShape* out_shape) {
  const int spatial = x.rank() - 2;
  OT_CHECK(spatial >= 1 && spatial <= kMaxSpatial, "input must be N x C x (1 to 3 spatial dims), got ", x.str());
  OT_CHECK(static_cast<int>(output_size.size()) == spatial, "output_size has ", output_size.size(),
           " entries for ", spatial, " spatial dims");
  AdaptiveGeometry g;
  g.planes = x[0] * x[1];
  *out_shape = {x[0], x[1]};
  for (int d = 0; d < spatial; ++d) {
    const int slot = kMaxSpatial - spatial + d;
    const int64_t o = output_size[d] < 0 ? x[2 + d] : output_size[d];  // -1: keep the input size (None)
    OT_CHECK(o > 0 && x[2 + d] > 0, "cannot pool ", x.str(), " to output size ", o, " along dim ", 2 + d);
    g.in[slot] = x[2 + d];
    g.out[slot] = o;
    out_shape->push_back(o);
  }
  return g;
}

// Calls fn(out_index, window begin/end along each of the 3 dims, window size) per output position.
template <typename Fn>
void for_each_window(const AdaptiveGeometry& g, Fn&& fn) {
  int64_t o = 0;
  for (int64_t i0 = 0; i0 < g.out[0]; ++i0)
    for (int64_t i1 = 0; i1 < g.out[1]; ++i1)
      for (int64_t i2 = 0; i2 < g.out[2]; ++i2, ++o) {
        const int64_t b0 = g.begin(0, i0), e0 = g.end(0, i0), b1 = g.begin(1, i1), e1 = g.end(1, i1);
        const int64_t b2 = g.begin(2, i2), e2 = g.end(2, i2);
        fn(o, b0, e0, b1, e1, b2, e2, (e0 - b0) * (e1 - b1) * (e2 - b2));
      }
}

class AdaptiveAveragePoolKernel final : public Kernel {
 public:
  explicit AdaptiveAveragePoolKernel(const KernelInfo& info) : output_size_(info.node.attr_ints("output_size")) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    TensorShape shape;
    const AdaptiveGeometry g = adaptive_geometry(x.shape(), output_size_, &shape);
    Tensor& y = ctx.allocate_output(0, x.dtype(), shape);
    dispatch_float(x.dtype(), "AdaptiveAveragePool", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* px = x.data<T>();
      T* py = y.data<T>();
      const int64_t H = g.in[1], W = g.in[2];
      ctx.threads().parallel_for(g.planes, 1, [&](int64_t p0, int64_t p1) {
        for (int64_t p = p0; p < p1; ++p) {
          const T* xp = px + p * g.in_size();
          T* yp = py + p * g.out_size();
          for_each_window(g, [&](int64_t o, int64_t b0, int64_t e0, int64_t b1, int64_t e1, int64_t b2, int64_t e2,
                                 int64_t count) {
            T sum = 0;
            for (int64_t a = b0; a < e0; ++a)
              for (int64_t b = b1; b < e1; ++b)
                for (int64_t c = b2; c < e2; ++c) sum += xp[(a * H + b) * W + c];
            yp[o] = sum / static_cast<T>(count);
          });
        }
      });
    });
  }

 private:
  std::vector<int64_t> output_size_;
};

// Inputs: dY, shape of X.
class AdaptiveAveragePoolGradKernel final : public Kernel {
 public:
  explicit AdaptiveAveragePoolGradKernel(const KernelInfo& info)
      : output_size_(info.node.attr_ints("output_size")) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& dy = ctx.input(0);
    const TensorShape x_shape(ctx.input(1).to_int64_vector());
    TensorShape shape;
    const AdaptiveGeometry g = adaptive_geometry(x_shape, output_size_, &shape);
    OT_CHECK(shape == dy.shape(), "dY is ", dy.str(), ", the pooled shape is ", shape.str());
    Tensor& dx = ctx.allocate_output(0, dy.dtype(), x_shape);
    dispatch_float(dy.dtype(), "AdaptiveAveragePoolGrad", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* pdy = dy.data<T>();
      T* pdx = dx.data<T>();
      const int64_t H = g.in[1], W = g.in[2];
      ctx.threads().parallel_for(g.planes, 1, [&](int64_t p0, int64_t p1) {
        for (int64_t p = p0; p < p1; ++p) {
          T* xp = pdx + p * g.in_size();
          const T* yp = pdy + p * g.out_size();
          std::fill(xp, xp + g.in_size(), T(0));
          for_each_window(g, [&](int64_t o, int64_t b0, int64_t e0, int64_t b1, int64_t e1, int64_t b2, int64_t e2,
                                 int64_t count) {
            const T share = yp[o] / static_cast<T>(count);
            for (int64_t a = b0; a < e0; ++a)
              for (int64_t b = b1; b < e1; ++b)
                for (int64_t c = b2; c < e2; ++c) xp[(a * H + b) * W + c] += share;
          });
        }
      });
    });
  }

 private:
  std::vector<int64_t> output_size_;
};

void adaptive_average_pool_gradient(GradBuilder& g) {
  AttributeMap attrs{{"output_size", Attribute::of_ints(g.node().attr_ints("output_size"))}};
  g.set_input_grad(0, g.op("AdaptiveAveragePoolGrad", {g.output_grad(0), g.shape_of(g.input(0))}, attrs,
                           kOnnxTrainDomain));
}

onnx::OpSchema adaptive_average_pool_schema() {
  onnx::OpSchema schema;
  schema.SetName("AdaptiveAveragePool")
      .SetDomain(kOnnxTrainDomain)
      .SinceVersion(1)
      .SetDoc("torch.nn.AdaptiveAvgPool{1,2,3}d: average pooling to a fixed output size.")
      .Attr("output_size", "output spatial size; -1 keeps the input's", onnx::AttributeProto::INTS)
      .Input(0, "X", "N x C x spatial", "T")
      .Output(0, "Y", "N x C x output_size", "T")
      .TypeConstraint("T", {"tensor(float)", "tensor(double)"}, "float types")
      .TypeAndShapeInferenceFunction([](onnx::InferenceContext& ctx) {
        onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0);
        if (!onnx::hasNInputShapes(ctx, 1)) return;
        const auto& in = ctx.getInputType(0)->tensor_type().shape();
        const auto* attr = ctx.getAttribute("output_size");
        if (!attr || in.dim_size() != attr->ints_size() + 2) return;
        auto* out = ctx.getOutputType(0)->mutable_tensor_type()->mutable_shape();
        *out->add_dim() = in.dim(0);
        *out->add_dim() = in.dim(1);
        for (int i = 0; i < attr->ints_size(); ++i) {
          if (attr->ints(i) < 0) *out->add_dim() = in.dim(2 + i);
          else out->add_dim()->set_dim_value(attr->ints(i));
        }
      });
  return schema;
}

}  // namespace

ONNXTRAIN_SCHEMA(adaptive_average_pool_schema());
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "AdaptiveAveragePool", kernel_factory<AdaptiveAveragePoolKernel>(),
                 Recompute::Costly, Rounding::SumOfTerms);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "AdaptiveAveragePoolGrad", kernel_factory<AdaptiveAveragePoolGradKernel>(),
                 Recompute::Costly, Rounding::SumOfTerms);
ONNXTRAIN_GRADIENT(kOnnxTrainDomain, "AdaptiveAveragePool", adaptive_average_pool_gradient);

}  // namespace onnxtrain
