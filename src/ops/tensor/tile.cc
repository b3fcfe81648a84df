// Tile and TileGrad (the sum of dY over all tile copies). Both walk rows of the larger tensor:
// a row of dY is `repeats[last]` copies of one row of X.
#include <cstring>

#include "core/checked_math.h"
#include "opdef/op_registry.h"
#include "ops/common/elementwise.h"
#include "ops/tensor/indexing.h"
#include "runtime/thread_pool.h"

namespace onnxtrain {
namespace {

class TileKernel final : public Kernel {
 public:
  explicit TileKernel(const KernelInfo& info) : legacy_(info.opset < 6) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    std::vector<int64_t> repeats;
    if (legacy_) {  // Tile-1: a scalar tile count and the axis it applies to
      repeats.assign(static_cast<size_t>(x.rank()), 1);
      const int axis = normalize_axis(int_values(ctx.input(2), "axis").at(0), x.rank(), "Tile");
      repeats[static_cast<size_t>(axis)] = int_values(ctx.input(1), "tiles").at(0);
    } else {
      repeats = int_values(ctx.input(1), "repeats");
    }
    OT_CHECK(static_cast<int>(repeats.size()) == x.rank(), "repeats has ", repeats.size(), " values for input ",
             x.str());
    TensorShape shape = x.shape();
    for (int d = 0; d < x.rank(); ++d) {
      const int64_t r = repeats[static_cast<size_t>(d)];
      OT_CHECK(r >= 0, "repeats must not be negative, got ", r);
      shape[d] = checked_mul(shape[d], r, "Tile");
    }
    Tensor& y = ctx.allocate_output(0, x.dtype(), shape);
    if (y.numel() == 0) return;
    if (x.rank() == 0) {
      y.copy_from(x);
      return;
    }
    const int rank = x.rank();
    const int64_t es = static_cast<int64_t>(dtype_size(x.dtype()));
    const int64_t in_row = x.dim(rank - 1) * es, reps = repeats.back();
    const int64_t rows = shape.numel() / shape[rank - 1];
    const auto* src = static_cast<const uint8_t*>(x.raw_data());
    auto* dst = static_cast<uint8_t*>(y.raw_data());
    const int64_t grain = std::max<int64_t>(1, kParallelGrain / (in_row * reps));
    ctx.threads().parallel_for(rows, grain, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        // Source row: each outer output coordinate taken modulo the input's dim.
        int64_t rem = r, src_row = 0, scale = 1;
        for (int d = rank - 2; d >= 0; --d) {
          src_row += (rem % shape[d]) % x.dim(d) * scale;
          rem /= shape[d];
          scale *= x.dim(d);
        }
        uint8_t* o = dst + r * in_row * reps;
        for (int64_t k = 0; k < reps; ++k)
          std::memcpy(o + k * in_row, src + src_row * in_row, static_cast<size_t>(in_row));
      }
    });
  }

 private:
  bool legacy_;
};

// TileGrad(dY, input_shape): dX[i] = sum of dY over every copy of element i.
void tile_grad(KernelContext& ctx) {
  const Tensor& dy = ctx.input(0);
  const TensorShape shape(int_values(ctx.input(1), "TileGrad input shape"));
  OT_CHECK(shape.rank() == dy.rank(), "TileGrad: dY ", dy.str(), " and input shape ", shape.str(), " differ in rank");
  std::vector<int64_t> reps(static_cast<size_t>(shape.rank()), 0);
  for (int d = 0; d < shape.rank(); ++d) {
    OT_CHECK(shape[d] == 0 ? dy.dim(d) == 0 : dy.dim(d) % shape[d] == 0, "TileGrad: dY ", dy.str(),
             " is not a tiling of ", shape.str());
    reps[static_cast<size_t>(d)] = shape[d] == 0 ? 0 : dy.dim(d) / shape[d];
  }
  Tensor& dx = ctx.allocate_output(0, dy.dtype(), shape);
  if (dx.numel() == 0) return;
  dispatch_float(dy.dtype(), "TileGrad", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* out = dx.data<T>();
    const T* g = dy.data<T>();
    if (shape.rank() == 0) {
      out[0] = g[0];
      return;
    }
    if (dy.numel() == 0) {  // some repeat is 0: no copy reached the output
      std::fill(out, out + dx.numel(), T(0));
      return;
    }
    const int rank = shape.rank();
    const int64_t width = shape[rank - 1], last_reps = reps.back();
    const int64_t rows = dx.numel() / width;
    // Copies of one dX row among dY's rows: the product of the outer repeats.
    int64_t copies = 1;
    for (int d = 0; d + 1 < rank; ++d) copies *= reps[static_cast<size_t>(d)];
    ctx.threads().parallel_for(rows, std::max<int64_t>(1, kParallelGrain / (width * last_reps * copies)),
                               [&](int64_t r0, int64_t r1) {
                                 std::array<int64_t, TensorShape::kMaxRank> idx{}, rep{};
                                 for (int64_t r = r0; r < r1; ++r) {
                                   int64_t rem = r;
                                   for (int d = rank - 2; d >= 0; --d) {
                                     idx[d] = rem % shape[d];
                                     rem /= shape[d];
                                   }
                                   T* o = out + r * width;
                                   std::fill(o, o + width, T(0));
                                   rep.fill(0);
                                   for (int64_t c = 0; c < copies; ++c) {
                                     int64_t dy_row = 0;
                                     for (int d = 0; d + 1 < rank; ++d)
                                       dy_row = dy_row * dy.dim(d) + rep[d] * shape[d] + idx[d];
                                     const T* s = g + dy_row * width * last_reps;
                                     for (int64_t k = 0; k < last_reps; ++k)
                                       for (int64_t i = 0; i < width; ++i) o[i] += s[k * width + i];
                                     for (int d = rank - 2; d >= 0; --d) {
                                       if (++rep[d] < reps[static_cast<size_t>(d)]) break;
                                       rep[d] = 0;
                                     }
                                   }
                                 }
                               });
  });
}

void tile_gradient(GradBuilder& g) {
  std::string dx = g.op("TileGrad", {g.output_grad(0), g.shape_of(g.input(0))}, {}, kOnnxTrainDomain);
  same_dtype(g, dx, g.input(0));
  g.set_input_grad(0, dx);
}

}  // namespace

ONNXTRAIN_KERNEL("", "Tile", kernel_factory<TileKernel>(), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_NATIVE_16BIT_FLOATS("", "Tile", kBothHalfFloats);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "TileGrad", kernel_factory(&tile_grad), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_GRADIENT("", "Tile", tile_gradient);

}  // namespace onnxtrain
