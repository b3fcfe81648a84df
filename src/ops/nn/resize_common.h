#pragma once
// Resize geometry and resampling shared by Resize, Upsample and ResizeGrad (resize.cc).
//
// Every mode (nearest, linear, cubic) is a tensor product of 1-D maps: output j along an axis is
// a weighted sum of a few input taps along it. The forward applies one 1-D pass per resized axis;
// the backward applies the transposed passes in reverse order. tf_crop_and_resize outputs whose
// source coordinate falls outside the input are the extrapolation value (zero gradient).
#include <array>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ir/graph.h"

namespace onnxtrain {

class ThreadPool;

namespace resize {

enum class Mode { Nearest, Linear, Cubic };
enum class Coord { HalfPixel, PytorchHalfPixel, AlignCorners, Asymmetric, TfHalfPixelForNn, TfCropAndResize };
enum class Rounding { RoundPreferFloor, RoundPreferCeil, Floor, Ceil };

struct Options {
  Mode mode = Mode::Nearest;
  Coord coord = Coord::HalfPixel;
  Rounding rounding = Rounding::RoundPreferFloor;
  double cubic_a = -0.75;
  bool exclude_outside = false;
  double extrapolation = 0;
};

// Resize 11+ attributes; `legacy` (Resize 10, Upsample) has only `mode`, with asymmetric
// coordinates and floor rounding for nearest (PyTorch's nearest, which exports to these).
Options parse_options(const Node& node, bool legacy);
// The attributes that reproduce `o` on a ResizeGrad node.
AttributeMap options_to_attrs(const Options& o);

struct Geometry {
  TensorShape in, out;
  // Per axis: the scale of the coordinate transforms, and length_resized as the ONNX reference
  // computes it (in * scale, which need not be an integer when scales are given).
  std::array<double, TensorShape::kMaxRank> scale{}, out_length{}, roi_start{}, roi_end{};
};

// Geometry from `scales` or `sizes` (the other empty) and an optional `roi` (start..., end...).
// With scales, out = floor(in * scale), times (roi_end - roi_start) for tf_crop_and_resize.
Geometry make_geometry(const Options& o, const TensorShape& in, const std::vector<double>& scales,
                       const std::vector<int64_t>& sizes, const std::vector<double>& roi);

// Scratch bytes that forward/backward need for this geometry and element size.
size_t scratch_bytes(const Options& o, const Geometry& g, size_t elem_size);

template <typename T>
void forward(ThreadPool& pool, const Options& o, const Geometry& g, const T* x, T* y, void* scratch);
template <typename T>
void backward(ThreadPool& pool, const Options& o, const Geometry& g, const T* dy, T* dx, void* scratch);

// Reads a float tensor (scales, roi) of any floating type, or an int64 one (sizes).
std::vector<double> read_doubles(const Tensor& t);

}  // namespace resize
}  // namespace onnxtrain
