// Transpose against a naive reference over every permutation of ranks 2 to 4, with sizes that
// exercise the tiling (not multiples of the tile, size-1 dims that coalescing drops) and 1 and 2
// threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "runtime/thread_pool.h"
#include "session/training_session.h"

namespace onnxtrain {
namespace {

Tensor run_transpose(const Tensor& x, const std::vector<int64_t>& perm) {
  Graph g;
  g.inputs = {"x"};
  g.outputs = {"y"};
  std::vector<Dim> dims;
  for (int64_t d : x.shape()) dims.push_back({d, ""});
  g.value_info["x"] = {x.dtype(), dims};
  g.add_node(Node{"t", "Transpose", "", {"x"}, {"y"}, {{"perm", Attribute::of_ints(perm)}}});
  InferenceSession session(g);
  return session.run({x}, 0)[0];
}

TEST(Transpose, EveryPermutationMatchesTheNaiveCopy) {
  const std::vector<TensorShape> shapes = {{37, 45}, {3, 1, 70}, {2, 33, 5, 40}, {5, 64, 1, 33}, {1, 96, 4, 4}};
  for (int threads : {1, 2}) {
    ThreadPool::set_num_threads(threads);
    for (const TensorShape& shape : shapes) {
      Tensor x = Tensor::empty(DType::Int32, shape);
      for (int64_t i = 0; i < x.numel(); ++i) x.data<int32_t>()[i] = static_cast<int32_t>(i);
      std::vector<int64_t> perm(static_cast<size_t>(shape.rank()));
      std::iota(perm.begin(), perm.end(), 0);
      do {
        Tensor y = run_transpose(x, perm);
        std::vector<int64_t> in_stride(perm.size(), 1);
        for (int d = shape.rank() - 2; d >= 0; --d) in_stride[d] = in_stride[d + 1] * shape[d + 1];
        std::vector<int64_t> idx(perm.size(), 0);
        for (int64_t o = 0; o < y.numel(); ++o) {
          int64_t src = 0;
          for (size_t d = 0; d < perm.size(); ++d) src += idx[d] * in_stride[static_cast<size_t>(perm[d])];
          ASSERT_EQ(y.data<int32_t>()[o], src) << shape.str() << " perm element " << o;
          for (int d = static_cast<int>(perm.size()) - 1; d >= 0; --d) {
            if (++idx[d] < y.dim(d)) break;
            idx[d] = 0;
          }
        }
      } while (std::next_permutation(perm.begin(), perm.end()));
    }
  }
}

// Transpose moves elements as bits of their width: float16 and bfloat16 (which autocast's
// attention transposes) and every other width give the same permutation as int32 does.
TEST(Transpose, EveryElementWidthMovesTheSameWay) {
  const TensorShape shape{3, 5, 7};
  const std::vector<int64_t> perm{2, 0, 1};
  Tensor reference = Tensor::empty(DType::Int32, shape);
  for (int64_t i = 0; i < reference.numel(); ++i) reference.data<int32_t>()[i] = static_cast<int32_t>(i);
  const Tensor expected = run_transpose(reference, perm);
  for (DType t : {DType::BFloat16, DType::Float16, DType::UInt8, DType::Bool, DType::Float64, DType::Int16}) {
    Tensor x = Tensor::empty(t, shape);
    const size_t width = dtype_size(t);
    auto* bytes = static_cast<uint8_t*>(x.raw_data());
    // Each element's bytes carry its index (low byte first), so any misplaced byte shows.
    for (int64_t i = 0; i < x.numel(); ++i)
      for (size_t b = 0; b < width; ++b) bytes[static_cast<size_t>(i) * width + b] = static_cast<uint8_t>((i >> (8 * b)) & 0xff);
    if (t == DType::Bool)
      for (int64_t i = 0; i < x.numel(); ++i) bytes[i] = static_cast<uint8_t>(i & 1);
    const Tensor y = run_transpose(x, perm);
    ASSERT_EQ(y.dtype(), t);
    const auto* out = static_cast<const uint8_t*>(y.raw_data());
    for (int64_t o = 0; o < y.numel(); ++o) {
      const int64_t src = expected.data<int32_t>()[o];
      if (t == DType::Bool) {
        ASSERT_EQ(out[o], src & 1) << dtype_name(t) << " element " << o;
        continue;
      }
      for (size_t b = 0; b < width; ++b)
        ASSERT_EQ(out[static_cast<size_t>(o) * width + b], static_cast<uint8_t>((src >> (8 * b)) & 0xff))
            << dtype_name(t) << " element " << o << " byte " << b;
    }
  }
}

}  // namespace
}  // namespace onnxtrain
