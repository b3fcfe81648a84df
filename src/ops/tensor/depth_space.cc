// DepthToSpace (DCR and CRD modes), SpaceToDepth, and DepthToSpaceGrad (the inverse of
// DepthToSpace in either mode). Each is a reshape to 6-D, a fixed permutation and a reshape back,
// so each is one permuted copy.
#include "opdef/op_registry.h"
#include "ops/tensor/indexing.h"

namespace onnxtrain {
namespace {

struct Rearrangement {
  TensorShape view;       // the input seen as 6-D
  std::vector<int> perm;  // output 6-D dim d is view dim perm[d]
  TensorShape out;        // 4-D result
};

int64_t blocksize_attr(const Node& node) {
  const int64_t b = node.attr_int("blocksize", 0);
  OT_CHECK(b >= 1, "blocksize must be >= 1, got ", b);
  return b;
}

bool crd_mode(const Node& node, int opset) {
  // The mode attribute exists since opset 11; DepthToSpace-1 is DCR.
  const std::string m = opset >= 11 ? node.attr_string("mode", "DCR") : "DCR";
  OT_CHECK(m == "DCR" || m == "CRD", "mode must be DCR or CRD, got '", m, "'");
  return m == "CRD";
}

Rearrangement depth_to_space(const TensorShape& x, int64_t b, bool crd) {
  OT_CHECK(x.rank() == 4, "input must be 4-D [N, C, H, W], got ", x.str());
  OT_CHECK(x[1] % (b * b) == 0, "channels of ", x.str(), " are not divisible by blocksize^2 = ", b * b);
  const int64_t n = x[0], c = x[1] / (b * b), h = x[2], w = x[3];
  if (crd) return {{n, c, b, b, h, w}, {0, 1, 4, 2, 5, 3}, {n, c, h * b, w * b}};
  return {{n, b, b, c, h, w}, {0, 3, 4, 1, 5, 2}, {n, c, h * b, w * b}};
}

Rearrangement inverse(const Rearrangement& r, const TensorShape& original) {
  Rearrangement inv;
  inv.perm.assign(r.perm.size(), 0);
  for (size_t d = 0; d < r.perm.size(); ++d) {
    inv.view.push_back(r.view[r.perm[d]]);
    inv.perm[static_cast<size_t>(r.perm[d])] = static_cast<int>(d);
  }
  inv.out = original;
  return inv;
}

void rearrange(KernelContext& ctx, const Tensor& x, const Rearrangement& r) {
  Tensor& y = ctx.allocate_output(0, x.dtype(), r.out);
  permute_copy(ctx.threads(), dtype_size(x.dtype()), r.view, r.perm, x.raw_data(), y.raw_data());
}

class DepthToSpaceKernel final : public Kernel {
 public:
  explicit DepthToSpaceKernel(const KernelInfo& info)
      : blocksize_(blocksize_attr(info.node)), crd_(crd_mode(info.node, info.opset)) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    rearrange(ctx, x, depth_to_space(x.shape(), blocksize_, crd_));
  }

 private:
  int64_t blocksize_;
  bool crd_;
};

// DepthToSpaceGrad(dY, mode, blocksize): dX = the inverse permutation applied to dY.
class DepthToSpaceGradKernel final : public Kernel {
 public:
  explicit DepthToSpaceGradKernel(const KernelInfo& info)
      : blocksize_(blocksize_attr(info.node)), crd_(info.node.attr_string("mode", "DCR") == "CRD") {}
  void compute(KernelContext& ctx) const override {
    const Tensor& dy = ctx.input(0);
    const int64_t b = blocksize_;
    OT_CHECK(dy.rank() == 4 && dy.dim(2) % b == 0 && dy.dim(3) % b == 0, "DepthToSpaceGrad: dY ", dy.str(),
             " is not a DepthToSpace output for blocksize ", b);
    const TensorShape x{dy.dim(0), dy.dim(1) * b * b, dy.dim(2) / b, dy.dim(3) / b};
    rearrange(ctx, dy, inverse(depth_to_space(x, b, crd_), x));
  }

 private:
  int64_t blocksize_;
  bool crd_;
};

class SpaceToDepthKernel final : public Kernel {
 public:
  explicit SpaceToDepthKernel(const KernelInfo& info) : blocksize_(blocksize_attr(info.node)) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    const int64_t b = blocksize_;
    OT_CHECK(x.rank() == 4, "input must be 4-D [N, C, H, W], got ", x.str());
    OT_CHECK(x.dim(2) % b == 0 && x.dim(3) % b == 0, "height and width of ", x.str(),
             " are not divisible by blocksize ", b);
    // SpaceToDepth is the inverse of DepthToSpace in DCR mode.
    const TensorShape y{x.dim(0), x.dim(1) * b * b, x.dim(2) / b, x.dim(3) / b};
    rearrange(ctx, x, inverse(depth_to_space(y, b, false), y));
  }

 private:
  int64_t blocksize_;
};

void depth_to_space_gradient(GradBuilder& g) {
  const Node& n = g.node();
  const int64_t b = blocksize_attr(n);
  const bool crd = crd_mode(n, g.opset());
  std::string dx = crd ? g.op("DepthToSpaceGrad", {g.output_grad(0)},
                              {{"blocksize", Attribute::of_int(b)}, {"mode", Attribute::of_string("CRD")}},
                              kOnnxTrainDomain)
                       : g.op("SpaceToDepth", {g.output_grad(0)}, {{"blocksize", Attribute::of_int(b)}});
  same_dtype(g, dx, g.input(0));
  g.set_input_grad(0, dx);
}

void space_to_depth_gradient(GradBuilder& g) {
  const AttributeMap attrs{{"blocksize", Attribute::of_int(blocksize_attr(g.node()))},
                           {"mode", Attribute::of_string("DCR")}};
  std::string dx = g.op("DepthToSpace", {g.output_grad(0)}, attrs);
  same_dtype(g, dx, g.input(0));
  g.set_input_grad(0, dx);
}

}  // namespace

ONNXTRAIN_KERNEL("", "DepthToSpace", kernel_factory<DepthToSpaceKernel>(), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "DepthToSpaceGrad", kernel_factory<DepthToSpaceGradKernel>(),
                 Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL("", "SpaceToDepth", kernel_factory<SpaceToDepthKernel>(), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_GRADIENT("", "DepthToSpace", depth_to_space_gradient);
ONNXTRAIN_GRADIENT("", "SpaceToDepth", space_to_depth_gradient);

}  // namespace onnxtrain
