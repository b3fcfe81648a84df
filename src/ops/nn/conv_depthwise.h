#pragma once
// Depthwise convolutions (one input channel per group, two groups or more, any channel
// multiplier), without im2col. Each (image, block of 16 float or 8 double output channels) is
// transposed from NCHW into a zero-padded block with the channels side by side, so that every tap
// is one vector multiply-add for any stride, dilation, padding or plane size, and the result is
// transposed back. Used by Conv, ConvGradX and ConvGradW
// for every 1-D to 3-D geometry of that kind. Scratch comes from the kernel's context.
#include "opdef/kernel.h"
#include "ops/nn/conv_common.h"

namespace onnxtrain {

// One input channel per group (group == input channels > 1). A single-channel input with one group
// (an MNIST network's first layer) is an ordinary convolution: oneDNN and im2col run it faster
// than 16 channel lanes of which its few outputs fill some.
bool is_depthwise(const ConvGeometry& g);

// y = conv(x, w) + b (b may be null).
template <typename T>
void depthwise_forward(KernelContext& ctx, const ConvGeometry& g, const T* x, const T* w, const T* b, T* y);
// dx = conv's adjoint applied to dy.
template <typename T>
void depthwise_backward_data(KernelContext& ctx, const ConvGeometry& g, const T* dy, const T* w, T* dx);
// dw = sum over the batch and positions of dy * x.
template <typename T>
void depthwise_backward_weights(KernelContext& ctx, const ConvGeometry& g, const T* x, const T* dy, T* dw);

}  // namespace onnxtrain
