// Finite-difference cases for the conv and pooling ops of src/ops/nn: groups, strides, pads,
// dilations, auto_pad, ceil_mode, count_include_pad, 1-D to 3-D. Batches of 2 to 5 images make
// the kernels split the batch across threads and sum per-thread weight gradients.
#include <algorithm>
#include <numeric>
#include <random>

#include "tests/cpp/gradient_check.h"

namespace onnxtrain::testing {
namespace {

constexpr DType F64 = DType::Float64;

Tensor r(const TensorShape& s, uint64_t seed) { return random_tensor(F64, s, seed); }

// Max pooling has kinks where two window elements tie: shuffled multiples of 0.05 (plus a
// little noise) keep every pair of values at least 0.04 apart, far beyond the FD step.
Tensor distinct(const TensorShape& s, uint64_t seed) {
  Tensor t = Tensor::empty(F64, s);
  std::vector<int64_t> order(static_cast<size_t>(t.numel()));
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(seed);
  std::shuffle(order.begin(), order.end(), rng);
  std::uniform_real_distribution<double> noise(0, 0.01);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.data<double>()[i] = 0.05 * static_cast<double>(order[static_cast<size_t>(i)] - t.numel() / 2) + noise(rng);
  return t;
}

Attribute ints(std::vector<int64_t> v) { return Attribute::of_ints(std::move(v)); }
Attribute one(int64_t v) { return Attribute::of_int(v); }
Attribute str(const char* s) { return Attribute::of_string(s); }

std::vector<GradCase> conv_cases() {
  std::vector<GradCase> c;
  c.push_back({"Conv_2d_pads_bias", "Conv", "", {{"pads", ints({1, 1, 1, 1})}},
               {r({2, 3, 5, 5}, 1), r({4, 3, 3, 3}, 2), r({4}, 3)}});
  c.push_back({"Conv_2d_strides_asymmetric_pads_dilations", "Conv", "",
               {{"strides", ints({2, 1})}, {"pads", ints({1, 0, 0, 1})}, {"dilations", ints({1, 2})}},
               {r({1, 2, 7, 6}, 4), r({3, 2, 3, 2}, 5)}});
  c.push_back({"Conv_groups", "Conv", "", {{"group", one(2)}, {"pads", ints({0, 1, 1, 0})}},
               {r({2, 4, 5, 4}, 6), r({6, 2, 3, 3}, 7), r({6}, 8)}});
  c.push_back({"Conv_depthwise_stride2", "Conv", "",
               {{"group", one(3)}, {"strides", ints({2, 2})}, {"pads", ints({1, 1, 1, 1})}},
               {r({1, 3, 6, 5}, 9), r({3, 1, 3, 3}, 10), r({3}, 11)}});
  // Stride-1 depthwise (the padded-tile path of conv_depthwise.cc): ConvNeXt's 7x7, a plane
  // narrower than a vector, asymmetric pads, and pads beyond the kernel (general data gradient).
  c.push_back({"Conv_depthwise_7x7_stride1", "Conv", "", {{"group", one(3)}, {"pads", ints({3, 3, 3, 3})}},
               {r({2, 3, 9, 11}, 200), r({3, 1, 7, 7}, 201), r({3}, 202)}});
  c.push_back({"Conv_depthwise_narrow_plane", "Conv", "", {{"group", one(4)}, {"pads", ints({1, 1, 1, 1})}},
               {r({1, 4, 4, 3}, 203), r({4, 1, 3, 3}, 204)}});
  c.push_back({"Conv_depthwise_asymmetric_pads", "Conv", "", {{"group", one(2)}, {"pads", ints({0, 2, 1, 0})}},
               {r({2, 2, 5, 6}, 205), r({2, 1, 3, 3}, 206), r({2}, 207)}});
  c.push_back({"Conv_depthwise_pads_beyond_kernel", "Conv", "", {{"group", one(2)}, {"pads", ints({3, 3, 3, 3})}},
               {r({1, 2, 4, 4}, 208), r({2, 1, 2, 2}, 209)}});
  c.push_back({"Conv_depthwise_dilated", "Conv", "",
               {{"group", one(3)}, {"dilations", ints({2, 2})}, {"pads", ints({2, 2, 2, 2})}},
               {r({1, 3, 6, 6}, 210), r({3, 1, 3, 3}, 211)}});
  // The channel-blocked kernels of conv_depthwise.cc: a last block of 4 channels (20 = 16 + 4), a
  // channel multiplier whose input channel's outputs straddle two blocks (6 x 3 = 18), 1-D and
  // 3-D, and EfficientNet's 5x5 at stride 2 with padding 2.
  c.push_back({"Conv_depthwise_partial_block", "Conv", "", {{"group", one(20)}, {"pads", ints({1, 1, 1, 1})}},
               {r({2, 20, 5, 4}, 212), r({20, 1, 3, 3}, 213), r({20}, 214)}});
  c.push_back({"Conv_depthwise_multiplier_across_blocks", "Conv", "",
               {{"group", one(6)}, {"strides", ints({2, 1})}, {"pads", ints({1, 0, 1, 2})}},
               {r({2, 6, 5, 4}, 215), r({18, 1, 3, 2}, 216), r({18}, 217)}});
  c.push_back({"Conv_depthwise_1d", "Conv", "", {{"group", one(3)}, {"strides", ints({2})}, {"pads", ints({2, 1})}},
               {r({2, 3, 9}, 218), r({3, 1, 4}, 219), r({3}, 220)}});
  c.push_back({"Conv_depthwise_3d", "Conv", "",
               {{"group", one(2)}, {"strides", ints({1, 2, 1})}, {"pads", ints({1, 0, 1, 0, 1, 1})}},
               {r({1, 2, 3, 5, 4}, 221), r({2, 1, 2, 3, 3}, 222), r({2}, 223)}});
  c.push_back({"Conv_depthwise_5x5_stride2", "Conv", "",
               {{"group", one(3)}, {"strides", ints({2, 2})}, {"pads", ints({2, 2, 2, 2})}},
               {r({2, 3, 9, 8}, 224), r({3, 1, 5, 5}, 225), r({3}, 226)}});
  c.push_back({"Conv_1d", "Conv", "",
               {{"strides", ints({2})}, {"pads", ints({1, 2})}, {"dilations", ints({2})}, {"kernel_shape", ints({3})}},
               {r({2, 2, 9}, 12), r({3, 2, 3}, 13), r({3}, 14)}});
  c.push_back({"Conv_3d", "Conv", "", {{"pads", ints({1, 0, 1, 1, 0, 0})}},
               {r({1, 2, 4, 3, 3}, 15), r({2, 2, 2, 2, 2}, 16), r({2}, 17)}});
  c.push_back({"Conv_auto_pad_same_upper", "Conv", "", {{"auto_pad", str("SAME_UPPER")}, {"strides", ints({2, 2})}},
               {r({1, 2, 6, 5}, 18), r({2, 2, 3, 3}, 19)}});
  c.push_back({"Conv_auto_pad_same_lower_odd_total", "Conv", "", {{"auto_pad", str("SAME_LOWER")}},
               {r({1, 2, 4, 5}, 20), r({2, 2, 2, 2}, 21)}});
  c.push_back({"Conv_auto_pad_valid", "Conv", "", {{"auto_pad", str("VALID")}, {"strides", ints({2, 3})}},
               {r({2, 1, 6, 7}, 22), r({2, 1, 3, 2}, 23)}});
  c.push_back({"Conv_pointwise", "Conv", "", {}, {r({2, 4, 3, 3}, 24), r({5, 4, 1, 1}, 25), r({5}, 26)}});
  c.push_back({"Conv_batch5_uneven_split", "Conv", "", {{"pads", ints({1, 0, 1, 0})}},
               {r({5, 2, 4, 3}, 27), r({3, 2, 2, 2}, 28), r({3}, 29)}});

  // At least 1024 output positions per image: one image per GEMM, written straight into the
  // output (and a 1x1 kernel uses the image itself as the column matrix).
  c.push_back({"Conv_large_image_one_per_gemm", "Conv", "", {{"pads", ints({1, 0, 0, 1})}},
               {r({2, 1, 32, 34}, 46), r({2, 1, 3, 3}, 47), r({2}, 48)}});
  c.push_back({"Conv_large_image_pointwise_direct", "Conv", "", {},
               {r({1, 2, 32, 33}, 49), r({3, 2, 1, 1}, 50), r({3}, 51)}});

  c.push_back({"ConvTranspose_2d_strides_pads_output_padding", "ConvTranspose", "",
               {{"strides", ints({2, 2})}, {"pads", ints({1, 0, 0, 1})}, {"output_padding", ints({1, 0})}},
               {r({2, 3, 3, 3}, 30), r({3, 2, 3, 3}, 31), r({2}, 32)}});
  c.push_back({"ConvTranspose_groups_dilations", "ConvTranspose", "", {{"group", one(2)}, {"dilations", ints({2, 1})}},
               {r({1, 4, 3, 4}, 33), r({4, 1, 2, 2}, 34), r({2}, 35)}});
  c.push_back({"ConvTranspose_1d", "ConvTranspose", "", {{"strides", ints({3})}},
               {r({2, 2, 4}, 36), r({2, 3, 3}, 37), r({3}, 38)}});
  c.push_back({"ConvTranspose_3d", "ConvTranspose", "", {{"strides", ints({1, 2, 1})}},
               {r({1, 2, 2, 3, 2}, 39), r({2, 1, 2, 2, 2}, 40)}});
  c.push_back({"ConvTranspose_output_shape", "ConvTranspose", "",
               {{"strides", ints({2, 2})}, {"output_shape", ints({6, 8})}},
               {r({1, 2, 3, 3}, 41), r({2, 2, 3, 3}, 42), r({2}, 43)}});
  c.push_back({"ConvTranspose_large_input_one_per_gemm", "ConvTranspose", "", {{"strides", ints({2, 2})}},
               {r({1, 2, 32, 32}, 52), r({2, 1, 2, 2}, 53), r({1}, 54)}});
  c.push_back({"ConvTranspose_auto_pad_same_upper", "ConvTranspose", "",
               {{"auto_pad", str("SAME_UPPER")}, {"strides", ints({2, 2})}},
               {r({2, 1, 3, 2}, 44), r({1, 2, 3, 3}, 45)}});
  return c;
}

std::vector<GradCase> pool_cases() {
  std::vector<GradCase> c;
  c.push_back({"MaxPool_2x2_stride2", "MaxPool", "", {{"kernel_shape", ints({2, 2})}, {"strides", ints({2, 2})}},
               {distinct({2, 3, 6, 5}, 50)}});
  c.push_back({"MaxPool_3x3_stride2_pads", "MaxPool", "",
               {{"kernel_shape", ints({3, 3})}, {"strides", ints({2, 2})}, {"pads", ints({1, 1, 1, 1})}},
               {distinct({1, 2, 7, 6}, 51)}});
  c.push_back({"MaxPool_overlapping_windows", "MaxPool", "", {{"kernel_shape", ints({3, 2})}},
               {distinct({1, 1, 5, 5}, 52)}});
  c.push_back({"MaxPool_ceil_mode", "MaxPool", "",
               {{"kernel_shape", ints({3, 3})}, {"strides", ints({2, 2})}, {"ceil_mode", one(1)}},
               {distinct({1, 2, 6, 7}, 53)}});
  c.push_back({"MaxPool_dilations_pads", "MaxPool", "",
               {{"kernel_shape", ints({2, 2})}, {"dilations", ints({2, 2})}, {"pads", ints({1, 0, 1, 1})}},
               {distinct({1, 1, 6, 6}, 54)}});
  c.push_back({"MaxPool_auto_pad_same_upper", "MaxPool", "",
               {{"kernel_shape", ints({3, 3})}, {"strides", ints({2, 2})}, {"auto_pad", str("SAME_UPPER")}},
               {distinct({1, 2, 5, 6}, 55)}});
  c.push_back({"MaxPool_1d", "MaxPool", "",
               {{"kernel_shape", ints({3})}, {"strides", ints({2})}, {"pads", ints({1, 1})}},
               {distinct({2, 2, 9}, 56)}});
  c.push_back({"MaxPool_3d", "MaxPool", "", {{"kernel_shape", ints({2, 2, 2})}, {"strides", ints({2, 2, 2})}},
               {distinct({1, 2, 4, 4, 3}, 57)}});
  c.push_back({"MaxPool_with_indices", "MaxPool", "", {{"kernel_shape", ints({2, 2})}, {"storage_order", one(1)}},
               {distinct({1, 2, 3, 4}, 58)}, {}, 2});

  c.push_back({"AveragePool_2x2_stride2", "AveragePool", "",
               {{"kernel_shape", ints({2, 2})}, {"strides", ints({2, 2})}},
               {r({2, 2, 5, 5}, 60)}});
  c.push_back({"AveragePool_pads_exclude_pad", "AveragePool", "",
               {{"kernel_shape", ints({3, 3})}, {"strides", ints({2, 2})}, {"pads", ints({1, 1, 1, 1})}},
               {r({1, 2, 6, 5}, 61)}});
  c.push_back({"AveragePool_pads_count_include_pad", "AveragePool", "",
               {{"kernel_shape", ints({3, 3})}, {"strides", ints({2, 2})}, {"pads", ints({1, 0, 1, 1})},
                {"count_include_pad", one(1)}},
               {r({1, 2, 6, 5}, 62)}});
  c.push_back({"AveragePool_ceil_mode_count_include_pad", "AveragePool", "",
               {{"kernel_shape", ints({3, 3})}, {"strides", ints({2, 2})}, {"pads", ints({1, 1, 1, 1})},
                {"ceil_mode", one(1)}, {"count_include_pad", one(1)}},
               {r({1, 1, 6, 6}, 63)}});
  c.push_back({"AveragePool_ceil_mode", "AveragePool", "",
               {{"kernel_shape", ints({2, 3})}, {"strides", ints({2, 2})}, {"ceil_mode", one(1)}},
               {r({2, 1, 5, 6}, 64)}});
  c.push_back({"AveragePool_auto_pad_same_lower", "AveragePool", "",
               {{"kernel_shape", ints({2, 2})}, {"auto_pad", str("SAME_LOWER")}}, {r({1, 2, 4, 5}, 65)}});
  c.push_back({"AveragePool_1d", "AveragePool", "", {{"kernel_shape", ints({3})}, {"strides", ints({2})}},
               {r({2, 2, 8}, 66)}});
  c.push_back({"AveragePool_3d", "AveragePool", "",
               {{"kernel_shape", ints({2, 2, 2})}, {"pads", ints({0, 1, 0, 1, 0, 0})}},
               {r({1, 2, 3, 3, 3}, 67)}});

  c.push_back({"GlobalAveragePool_2d", "GlobalAveragePool", "", {}, {r({2, 3, 4, 3}, 70)}});
  // Overlapping windows (7 -> 3) and a dim kept at its input size (-1, torch's None).
  c.push_back({"AdaptiveAveragePool_2d", "AdaptiveAveragePool", "ai.onnxtrain",
               {{"output_size", Attribute::of_ints({3, -1})}}, {r({2, 2, 7, 4}, 72)}});
  c.push_back({"AdaptiveAveragePool_1d_grow", "AdaptiveAveragePool", "ai.onnxtrain",
               {{"output_size", Attribute::of_ints({7})}}, {r({1, 3, 5}, 73)}});
  c.push_back({"GlobalAveragePool_1d", "GlobalAveragePool", "", {}, {r({2, 2, 5}, 71)}});
  c.push_back({"GlobalMaxPool_2d", "GlobalMaxPool", "", {}, {distinct({2, 3, 4, 3}, 72)}});
  c.push_back({"GlobalMaxPool_3d", "GlobalMaxPool", "", {}, {distinct({1, 2, 2, 3, 2}, 73)}});
  return c;
}

// Real-model geometries with real-model data, for the float32 production paths (oneDNN's JIT
// convolutions, the SIMD and blocked pooling loops): post-ReLU inputs with half their values
// exactly zero, and sparse output gradients as a max pooling or ReLU downstream sends back.
Tensor relu_data(const TensorShape& s, uint64_t seed) { return post_relu_tensor(F64, s, seed); }

std::vector<GradCase> production_conv_and_pool_cases() {
  std::vector<GradCase> c;
  auto sparse = [](GradCase g) {
    g.output_weight_zeros = 0.8;
    return g;
  };
  // squeezenet1_1 Fire modules: 1x1 squeeze and 3x3 expand convolutions before a max pooling.
  c.push_back(sparse({"Production_squeezenet_expand3x3", "Conv", "", {{"pads", ints({1, 1, 1, 1})}},
                      {relu_data({2, 32, 7, 7}, 100), r({128, 32, 3, 3}, 101), r({128}, 102)}}));
  c.push_back(sparse({"Production_squeezenet_squeeze1x1", "Conv", "", {},
                      {relu_data({2, 256, 7, 7}, 103), r({32, 256, 1, 1}, 104), r({32}, 105)}}));
  c.push_back({"Production_squeezenet_expand3x3_15", "Conv", "", {{"pads", ints({1, 1, 1, 1})}},
               {relu_data({2, 16, 15, 15}, 106), r({64, 16, 3, 3}, 107), r({64}, 108)}});
  // shufflenet_v2 and mobilenet: depthwise 3x3 at stride 2 and 1, channel counts off 16.
  c.push_back({"Production_depthwise_stride2", "Conv", "",
               {{"group", one(24)}, {"strides", ints({2, 2})}, {"pads", ints({1, 1, 1, 1})}},
               {relu_data({2, 24, 16, 16}, 110), r({24, 1, 3, 3}, 111)}});
  c.push_back(sparse({"Production_depthwise_stride1", "Conv", "", {{"group", one(48)}, {"pads", ints({1, 1, 1, 1})}},
                      {r({2, 48, 8, 8}, 112), r({48, 1, 3, 3}, 113)}}));
  // MobileNetV3 and EfficientNet: 5x5 depthwise at stride 2 and at stride 1 on a 4x4 plane.
  c.push_back({"Production_depthwise_5x5_stride2", "Conv", "",
               {{"group", one(40)}, {"strides", ints({2, 2})}, {"pads", ints({2, 2, 2, 2})}},
               {relu_data({2, 40, 14, 14}, 136), r({40, 1, 5, 5}, 137), r({40}, 138)}});
  c.push_back({"Production_depthwise_5x5_plane4", "Conv", "", {{"group", one(72)}, {"pads", ints({2, 2, 2, 2})}},
               {relu_data({3, 72, 4, 4}, 139), r({72, 1, 5, 5}, 140)}});
  // ConvNeXt's 7x7 depthwise at its stage sizes (16x16 and a 4x4 plane narrower than a vector).
  c.push_back({"Production_convnext_depthwise_16", "Conv", "", {{"group", one(96)}, {"pads", ints({3, 3, 3, 3})}},
               {r({2, 96, 16, 16}, 130), r({96, 1, 7, 7}, 131), r({96}, 132)}});
  c.push_back({"Production_convnext_depthwise_4", "Conv", "", {{"group", one(384)}, {"pads", ints({3, 3, 3, 3})}},
               {r({2, 384, 4, 4}, 133), r({384, 1, 7, 7}, 134), r({384}, 135)}});
  // regnet_y: grouped 3x3 with 8 channels per group, and the 1x1 convolutions of its SE block.
  c.push_back({"Production_regnet_grouped", "Conv", "", {{"group", one(13)}, {"pads", ints({1, 1, 1, 1})}},
               {relu_data({2, 104, 8, 8}, 114), r({104, 8, 3, 3}, 115)}});
  c.push_back({"Production_regnet_se_1x1", "Conv", "", {}, {relu_data({2, 104, 1, 1}, 116), r({26, 104, 1, 1}, 117),
                                                             r({26}, 118)}});
  // ResNet's last stage: weights larger than the activations, so that on two threads ConvGradW
  // splits its output channels (48 = 16 + 32: parts of unequal size); strided, with padding.
  c.push_back({"Production_resnet_layer4_channel_split", "Conv", "", {{"strides", ints({2, 2})}, {"pads", ints({1, 1, 1, 1})}},
               {relu_data({2, 40, 6, 6}, 141), r({48, 40, 3, 3}, 142), r({48}, 143)}});
  // resnet stem: 7x7 stride 2 on three channels.
  c.push_back({"Production_resnet_stem", "Conv", "", {{"strides", ints({2, 2})}, {"pads", ints({3, 3, 3, 3})}},
               {r({2, 3, 32, 32}, 119), r({16, 3, 7, 7}, 120)}});
  // Pooling over post-ReLU data: ties among zeros in many windows.
  c.push_back(sparse({"Production_maxpool_3x3_s2_ceil", "MaxPool", "",
                      {{"kernel_shape", ints({3, 3})}, {"strides", ints({2, 2})}, {"ceil_mode", one(1)}},
                      {relu_data({2, 64, 15, 15}, 121)}}));
  c.push_back({"Production_maxpool_3x3_s2_ceil_7", "MaxPool", "",
               {{"kernel_shape", ints({3, 3})}, {"strides", ints({2, 2})}, {"ceil_mode", one(1)}},
               {relu_data({2, 256, 7, 7}, 122)}});
  c.push_back({"Production_maxpool_3x3_s2_p1", "MaxPool", "",
               {{"kernel_shape", ints({3, 3})}, {"strides", ints({2, 2})}, {"pads", ints({1, 1, 1, 1})}},
               {relu_data({2, 24, 32, 32}, 123)}});
  c.push_back(sparse({"Production_maxpool_2x2_simd", "MaxPool", "", {{"kernel_shape", ints({2, 2})}, {"strides", ints({2, 2})}},
                      {relu_data({2, 16, 28, 40}, 124)}}));
  c.push_back({"Production_maxpool_2x2_odd_edges", "MaxPool", "", {{"kernel_shape", ints({2, 2})}, {"strides", ints({2, 2})}},
               {relu_data({2, 6, 13, 35}, 125)}});
  c.push_back({"Production_averagepool_3x3_s2_p1", "AveragePool", "",
               {{"kernel_shape", ints({3, 3})}, {"strides", ints({2, 2})}, {"pads", ints({1, 1, 1, 1})}},
               {relu_data({2, 24, 16, 16}, 126)}});
  c.push_back({"Production_global_average", "GlobalAveragePool", "", {}, {relu_data({2, 104, 7, 7}, 127)}});
  return c;
}

OT_GRAD_CASES(conv_cases());
OT_GRAD_CASES(pool_cases());
OT_PRODUCTION_CASES(production_conv_and_pool_cases());

}  // namespace
}  // namespace onnxtrain::testing

// MaxUnpool: offsets into the whole tensor as MaxPool's Indices give them, without output_shape
// and with a larger one (the unpooled frame then sits at its origin). Each offset appears once
// (a repeated one has no derivative in the forward).
namespace onnxtrain::testing {
namespace {

std::vector<GradCase> max_unpool_cases() {
  const DType F64 = DType::Float64;
  auto ints = [](std::vector<int64_t> v) { return Attribute::of_ints(std::move(v)); };
  return {
      {"MaxUnpool_2d_2x2", "MaxUnpool", "", {{"kernel_shape", ints({2, 2})}, {"strides", ints({2, 2})}},
       {random_tensor(F64, {1, 2, 2, 2}, 311), int64_tensor({0, 3, 9, 14, 21, 18, 28, 31}, {1, 2, 2, 2})}},
      {"MaxUnpool_1d_output_shape", "MaxUnpool", "", {{"kernel_shape", ints({2})}, {"strides", ints({2})}},
       {random_tensor(F64, {2, 1, 3}, 312), int64_tensor({0, 3, 5, 7, 8, 11}, {2, 1, 3}), int64_tensor({2, 1, 7})}},
  };
}

OT_GRAD_CASES(max_unpool_cases());

}  // namespace
}  // namespace onnxtrain::testing
