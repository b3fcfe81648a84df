#pragma once
// Convolutions with one input channel per group: depthwise ones (with any channel multiplier) and
// single-channel inputs (an MNIST network's first layer), as direct loops over each image plane
// in NCHW: no layout reorders and no im2col. Each output row is a sum of input rows scaled by one
// tap, so the loops run along W and vectorize. Used by Conv, ConvGradX and ConvGradW for every
// 1-D to 3-D geometry of that kind.
#include "ops/nn/conv_common.h"

namespace onnxtrain {

// One input channel per group (group == input channels).
bool is_depthwise(const ConvGeometry& g);

// y = conv(x, w) + b (b may be null).
template <typename T>
void depthwise_forward(ThreadPool& pool, const ConvGeometry& g, const T* x, const T* w, const T* b, T* y);
// dx = conv's adjoint applied to dy.
template <typename T>
void depthwise_backward_data(ThreadPool& pool, const ConvGeometry& g, const T* dy, const T* w, T* dx);
// dw = sum over the batch and positions of dy * x.
template <typename T>
void depthwise_backward_weights(ThreadPool& pool, const ConvGeometry& g, const T* x, const T* dy, T* dw);

}  // namespace onnxtrain
