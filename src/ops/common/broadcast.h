#pragma once
// Numpy-style broadcasting. BroadcastLoop walks an output shape with per-operand strides (0 on
// broadcast dims), merging adjacent dims where every operand allows it, and hands each
// innermost run to a callback that can vectorize over it.
#include <array>
#include <optional>
#include <vector>

#include "core/tensor.h"

namespace onnxtrain {

class ThreadPool;

// The broadcast of several shapes; throws naming `what` and the shapes when they do not broadcast.
TensorShape broadcast_shapes(const std::vector<TensorShape>& shapes, const char* what);
// The same, or nullopt where the shapes do not broadcast.
std::optional<TensorShape> try_broadcast_shapes(const std::vector<TensorShape>& shapes);

// Element strides of `in` read as `out` (right-aligned, 0 where `in` is broadcast).
std::array<int64_t, TensorShape::kMaxRank> broadcast_strides(const TensorShape& in, const TensorShape& out);

template <int N>  // number of operands, output included as operand 0
class BroadcastLoop {
 public:
  BroadcastLoop(const TensorShape& out, const std::array<TensorShape, N>& shapes);

  int64_t rows() const { return rows_; }    // number of innermost runs
  int64_t inner() const { return inner_; }  // length of each run
  int64_t inner_stride(int operand) const { return inner_stride_[operand]; }

  // Calls f(offsets) for rows [r0, r1), offsets[k] = element offset of operand k at the run's start.
  template <typename F>
  void for_rows(int64_t r0, int64_t r1, F&& f) const {
    if (r0 >= r1) return;
    std::array<int64_t, TensorShape::kMaxRank> idx{};
    int64_t rem = r0;
    for (int d = outer_rank_ - 1; d >= 0; --d) {
      idx[d] = rem % dims_[d];
      rem /= dims_[d];
    }
    std::array<int64_t, N> off{};
    for (int k = 0; k < N; ++k)
      for (int d = 0; d < outer_rank_; ++d) off[k] += idx[d] * strides_[k][d];
    for (int64_t r = r0; r < r1; ++r) {
      f(off);
      for (int d = outer_rank_ - 1; d >= 0; --d) {
        if (++idx[d] < dims_[d]) {
          for (int k = 0; k < N; ++k) off[k] += strides_[k][d];
          break;
        }
        idx[d] = 0;
        for (int k = 0; k < N; ++k) off[k] -= strides_[k][d] * (dims_[d] - 1);
      }
    }
  }

 private:
  int outer_rank_ = 0;
  std::array<int64_t, TensorShape::kMaxRank> dims_{};
  std::array<std::array<int64_t, TensorShape::kMaxRank>, N> strides_{};
  std::array<int64_t, N> inner_stride_{};
  int64_t rows_ = 1, inner_ = 1;
};

}  // namespace onnxtrain
