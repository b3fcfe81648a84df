// bfloat16 convolutions (ops/nn/conv.cc): Conv, ConvGradX and ConvGradW take bfloat16 operands,
// sum in float32 and round once, on oneDNN's bfloat16 kernels where the CPU has them and on
// float32 copies elsewhere. Each is checked against sums in double over the same bfloat16 values.
// Suite HalfCompute, so that ctest runs it again capped below bfloat16 (half_compute_avx2,
// half_compute_avx512_core): the widened path gives the same numbers.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "core/half.h"
#include "ops/nn/conv_onednn.h"
#include "session/training_session.h"

namespace onnxtrain {
namespace {

struct ConvCase {
  const char* name;
  TensorShape x, w;
  int64_t group, stride, pad;
  // How many of Conv, ConvGradX and ConvGradW run on oneDNN's bfloat16 kernels with AVX512_BF16,
  // and with AMX: oneDNN 2.6 has JIT kernels for different geometries on the two.
  size_t native_calls_avx512_bf16, native_calls_amx;
};

size_t expected_native_calls(const ConvCase& c) {
  switch (onednn_bfloat16_instructions()) {
    case Bfloat16Instructions::Amx: return c.native_calls_amx;
    case Bfloat16Instructions::Avx512Bf16: return c.native_calls_avx512_bf16;
    case Bfloat16Instructions::None: return 0;
  }
  return 0;
}

Tensor random_bfloat16(const TensorShape& shape, std::mt19937& gen) {
  std::normal_distribution<float> normal;
  Tensor t = Tensor::empty(DType::BFloat16, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<BHalf>()[i] = float_to_bfloat16(normal(gen));
  return t;
}

double value(const Tensor& t, int64_t i) { return bfloat16_to_float(t.data<BHalf>()[i]); }

// Sums in double of one convolution and its two adjoints, with the sum of |terms| of each entry
// (float32 accumulation may be that much times 2^-24 per term away from the exact sum).
struct Reference {
  std::vector<double> y, dx, dw, y_abs, dx_abs, dw_abs;
};

Reference reference(const ConvCase& c, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& dy,
                    const TensorShape& y_shape) {
  const int64_t n_images = c.x[0], channels = c.x[1], h = c.x[2], wd = c.x[3];
  const int64_t outs = c.w[0], per_group_in = c.w[1], kh = c.w[2], kw = c.w[3];
  const int64_t oh = y_shape[2], ow = y_shape[3], outs_per_group = outs / c.group;
  Reference r;
  r.y.assign(static_cast<size_t>(y_shape.numel()), 0.0);
  r.y_abs = r.y;
  r.dx.assign(static_cast<size_t>(x.numel()), 0.0);
  r.dx_abs = r.dx;
  r.dw.assign(static_cast<size_t>(w.numel()), 0.0);
  r.dw_abs = r.dw;
  for (int64_t n = 0; n < n_images; ++n)
    for (int64_t o = 0; o < outs; ++o)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          const size_t yi = static_cast<size_t>(((n * outs + o) * oh + i) * ow + j);
          r.y[yi] += value(b, o);
          r.y_abs[yi] += std::fabs(value(b, o));
          for (int64_t ci = 0; ci < per_group_in; ++ci)
            for (int64_t p = 0; p < kh; ++p)
              for (int64_t q = 0; q < kw; ++q) {
                const int64_t row = i * c.stride - c.pad + p, col = j * c.stride - c.pad + q;
                if (row < 0 || row >= h || col < 0 || col >= wd) continue;
                const int64_t channel = o / outs_per_group * per_group_in + ci;
                const int64_t xi = ((n * channels + channel) * h + row) * wd + col;
                const int64_t wi = ((o * per_group_in + ci) * kh + p) * kw + q;
                const double xw = value(x, xi) * value(w, wi), gw = value(dy, static_cast<int64_t>(yi)) * value(w, wi);
                const double gx = value(dy, static_cast<int64_t>(yi)) * value(x, xi);
                r.y[yi] += xw;
                r.y_abs[yi] += std::fabs(xw);
                r.dx[static_cast<size_t>(xi)] += gw;
                r.dx_abs[static_cast<size_t>(xi)] += std::fabs(gw);
                r.dw[static_cast<size_t>(wi)] += gx;
                r.dw_abs[static_cast<size_t>(wi)] += std::fabs(gx);
              }
        }
  return r;
}

// Within one bfloat16 rounding step of the exact sum, plus what summing in float32 may add.
void expect_rounded_sum(const Tensor& got, DType want, const std::vector<double>& exact,
                        const std::vector<double>& abs_sum, const std::string& what) {
  ASSERT_EQ(got.dtype(), want) << what;
  ASSERT_EQ(static_cast<size_t>(got.numel()), exact.size()) << what;
  for (size_t i = 0; i < exact.size(); ++i) {
    const double actual = want == DType::BFloat16 ? value(got, static_cast<int64_t>(i))
                                                  : double(got.data<float>()[i]);
    const double step = std::ldexp(1.0, std::ilogb(exact[i] == 0 ? 1e-30 : exact[i]) - 7);
    const double tolerance = step + 64 * std::ldexp(abs_sum[i], -24);
    EXPECT_LE(std::fabs(actual - exact[i]), tolerance) << what << " element " << i << ": " << actual << " against "
                                                       << exact[i];
  }
}

std::vector<Dim> dims(const TensorShape& s) {
  std::vector<Dim> d;
  for (int64_t i = 0; i < s.rank(); ++i) d.push_back({s[i], ""});
  return d;
}

Tensor shape_tensor(const TensorShape& s) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < s.rank(); ++i) v.push_back(s[i]);
  return Tensor::from_vector<int64_t>(v, {s.rank()});
}

AttributeMap conv_attrs(const ConvCase& c) {
  return {{"group", Attribute::of_int(c.group)},
          {"strides", Attribute::of_ints({c.stride, c.stride})},
          {"pads", Attribute::of_ints({c.pad, c.pad, c.pad, c.pad})}};
}

Tensor run_one(const std::string& op, const std::string& domain, const AttributeMap& attrs,
               const std::vector<std::pair<std::string, Tensor>>& inputs) {
  Graph g;
  std::vector<std::string> names;
  std::vector<Tensor> values;
  for (const auto& [name, t] : inputs) {
    g.inputs.push_back(name);
    g.value_info[name] = {t.dtype(), dims(t.shape())};
    names.push_back(name);
    values.push_back(t);
  }
  g.outputs = {"out"};
  g.add_node(Node{"node", op, domain, names, {"out"}, attrs});
  return InferenceSession(g).run(values, 0)[0];
}

TEST(HalfCompute, BfloatConvolutionsAndTheirGradientsRoundTheFloat32SumsOnce) {
  if (const char* cap = std::getenv("ONEDNN_MAX_CPU_ISA"); cap && std::string(cap) != "") {
    // The caps the suite runs under (CMakeLists.txt): each one's instructions and none above.
    const std::string isa = cap;
    if (isa == "AVX2" || isa == "AVX512_CORE") {
      EXPECT_EQ(onednn_bfloat16_instructions(), Bfloat16Instructions::None) << "capped to " << cap;
    } else if (isa == "AVX512_CORE_BF16") {
      EXPECT_NE(onednn_bfloat16_instructions(), Bfloat16Instructions::Amx) << "capped to " << cap;
    }
  }
  const std::vector<ConvCase> cases = {
      // AMX: the forward runs on a brgemm kernel (conv_onednn.cc takes those in bfloat16).
      {"dense_3x3", {3, 8, 9, 9}, {16, 8, 3, 3}, 1, 1, 1, 3, 3},
      // AVX512_BF16: no JIT weight gradient for 4 channels per group, nor for 3 -> 5.
      {"grouped_stride2", {2, 8, 8, 8}, {8, 4, 3, 3}, 2, 2, 1, 2, 3},
      // One channel per group: conv.cc widens the data gradient.
      {"depthwise", {2, 16, 7, 7}, {16, 1, 3, 3}, 16, 1, 1, 2, 2},
      // dW larger than X: ConvGradW splits the output channels among threads.
      {"pointwise_wide", {1, 64, 2, 2}, {64, 64, 1, 1}, 1, 1, 0, 3, 3},
      {"odd_channels", {2, 3, 6, 5}, {5, 3, 2, 2}, 1, 1, 0, 2, 3},
  };
  std::mt19937 gen(11);
  for (const ConvCase& c : cases) {
    const Tensor x = random_bfloat16(c.x, gen), w = random_bfloat16(c.w, gen), b = random_bfloat16({c.w[0]}, gen);
    const AttributeMap attrs = conv_attrs(c);
    const size_t case_runs_before = onednn_bfloat16_convolutions_run();
    const Tensor y = run_one("Conv", "", attrs, {{"x", x}, {"w", w}, {"b", b}});
    const Tensor dy = random_bfloat16(y.shape(), gen);
    const Reference r = reference(c, x, w, b, dy, y.shape());
    expect_rounded_sum(y, DType::BFloat16, r.y, r.y_abs, std::string(c.name) + " Conv");
    const Tensor dx =
        run_one("ConvGradX", kOnnxTrainDomain, attrs, {{"dy", dy}, {"w", w}, {"x_shape", shape_tensor(c.x)}});
    expect_rounded_sum(dx, DType::BFloat16, r.dx, r.dx_abs, std::string(c.name) + " ConvGradX");
    const Tensor dw =
        run_one("ConvGradW", kOnnxTrainDomain, attrs, {{"dy", dy}, {"x", x}, {"w_shape", shape_tensor(c.w)}});
    expect_rounded_sum(dw, DType::BFloat16, r.dw, r.dw_abs, std::string(c.name) + " ConvGradW");
    // Which of the three ran on oneDNN's bfloat16 kernels: with bfloat16 instructions, those
    // oneDNN has a JIT kernel for; without them (or capped below), none, and the numbers above
    // came from the widened float32 path.
    const size_t native = onednn_bfloat16_convolutions_run() - case_runs_before;
    EXPECT_EQ(native, expected_native_calls(c)) << c.name;
  }
}

}  // namespace
}  // namespace onnxtrain

namespace onnxtrain {
namespace {

// The plans of oneDNN convolutions (JIT kernels per geometry and batch size) are bounded: a run
// over a thousand batch sizes keeps at most the cache's 512.
TEST(OnednnConvPlans, ManyBatchSizesKeepABoundedNumberOfPlans) {
  Graph g;
  g.inputs = {"x", "w"};
  g.outputs = {"y"};
  g.value_info["x"] = {DType::Float32, std::vector<Dim>{{-1, "N"}, {4, ""}, {5, ""}, {5, ""}}};
  g.value_info["w"] = {DType::Float32, std::vector<Dim>{{8, ""}, {4, ""}, {3, ""}, {3, ""}}};
  g.add_node(Node{"conv", "Conv", "", {"x", "w"}, {"y"}, {}});
  InferenceSession session(g);
  const Tensor w = Tensor::from_vector<float>(std::vector<float>(8 * 4 * 9, 0.5f), {8, 4, 3, 3});
  size_t most = 0;
  for (int64_t n = 1; n <= 1100; ++n) {
    const Tensor x = Tensor::from_vector<float>(std::vector<float>(static_cast<size_t>(n * 100), 1.0f), {n, 4, 5, 5});
    const Tensor y = session.run({x, w}, 0)[0];
    ASSERT_EQ(y.data<float>()[0], 0.5f * 4 * 9) << "batch " << n;  // the centre sees the whole kernel
    most = std::max(most, onednn_conv_plans_kept());
  }
  EXPECT_LE(most, 512u);
  EXPECT_GE(most, 300u);  // the plans were made, and kept up to the bound
}

}  // namespace
}  // namespace onnxtrain
