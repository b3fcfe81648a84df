#pragma once
// float32 and bfloat16 convolutions through oneDNN's JIT kernels, which on small images run 2-4x
// faster than im2col + GEMM. Tensors are reordered between PyTorch's layout (NCHW) and the blocked layouts
// those kernels want; the batch is split across the engine's pool, one single-threaded oneDNN
// call per chunk. Each function returns false when oneDNN has no JIT kernel for the geometry (or
// only its own im2col one), and the caller then takes the im2col path.
#include "ops/nn/conv_common.h"

namespace onnxtrain {

class KernelContext;

// The element type of the images, the weights and their gradients. bfloat16 convolutions
// accumulate in float32 and round each output once. The bias and the weight gradient are float32
// in both (the weight gradient is rounded by the caller, after the batch's parts are summed).
enum class ConvElements { Float32, BFloat16 };

// The bfloat16 instructions oneDNN's convolutions run on here. Without any it would emulate them,
// slower than widening to float32, so the caller widens instead. With AVX512_BF16 and with AMX
// tiles, oneDNN 2.6 has JIT kernels for different geometries (AVX512_BF16 none for some weight
// gradients of grouped convolutions).
enum class Bfloat16Instructions { None, Avx512Bf16, Amx };
Bfloat16Instructions onednn_bfloat16_instructions();
bool onednn_bfloat16_convolutions_native();  // AVX512_BF16 or AMX

// How many convolutions (calls of the three functions below) ran on oneDNN's bfloat16 kernels in
// this process: what shows that they, not the float32 path on widened copies, did the work.
size_t onednn_bfloat16_convolutions_run();

// How many convolution plans (JIT kernels per geometry, pass and batch size) are kept; bounded.
size_t onednn_conv_plans_kept();

bool onednn_conv_forward(KernelContext& ctx, const ConvGeometry& g, ConvElements elements, const void* x,
                         const void* w, const float* b, void* y);
bool onednn_conv_backward_data(KernelContext& ctx, const ConvGeometry& g, ConvElements elements, const void* dy,
                               const void* w, void* dx);
bool onednn_conv_backward_weights(KernelContext& ctx, const ConvGeometry& g, ConvElements elements, const void* x,
                                  const void* dy, float* dw);

}  // namespace onnxtrain
