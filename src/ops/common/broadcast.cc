#include "ops/common/broadcast.h"

namespace onnxtrain {

std::optional<TensorShape> try_broadcast_shapes(const std::vector<TensorShape>& shapes) {
  int rank = 0;
  for (const auto& s : shapes) rank = std::max(rank, s.rank());
  TensorShape out;
  out.resize(rank, 1);
  for (const auto& s : shapes) {
    int offset = rank - s.rank();
    for (int d = 0; d < s.rank(); ++d) {
      int64_t& o = out[offset + d];
      int64_t v = s[d];
      if (v == o || v == 1) continue;
      if (o != 1) return std::nullopt;
      o = v;
    }
  }
  return out;
}

TensorShape broadcast_shapes(const std::vector<TensorShape>& shapes, const char* what) {
  std::optional<TensorShape> out = try_broadcast_shapes(shapes);
  if (!out) {
    std::string all;
    for (const auto& t : shapes) all += (all.empty() ? "" : ", ") + t.str();
    OT_THROW(what, ": shapes ", all, " do not broadcast");
  }
  return *out;
}

std::array<int64_t, TensorShape::kMaxRank> broadcast_strides(const TensorShape& in, const TensorShape& out) {
  std::array<int64_t, TensorShape::kMaxRank> strides{};
  int offset = out.rank() - in.rank();
  int64_t stride = 1;
  for (int d = in.rank() - 1; d >= 0; --d) {
    strides[offset + d] = in[d] == 1 ? 0 : stride;
    stride *= in[d];
  }
  return strides;
}

template <int N>
BroadcastLoop<N>::BroadcastLoop(const TensorShape& out, const std::array<TensorShape, N>& shapes) {
  std::array<std::array<int64_t, TensorShape::kMaxRank>, N> full;
  for (int k = 0; k < N; ++k) full[k] = broadcast_strides(shapes[k], out);
  // Merge dim d into the dim after it when every operand is contiguous across the pair.
  std::array<int64_t, TensorShape::kMaxRank> dims{};
  std::array<std::array<int64_t, TensorShape::kMaxRank>, N> strides{};
  int rank = 0;
  for (int d = 0; d < out.rank(); ++d) {
    if (out[d] == 1) continue;  // size-1 dims contribute nothing
    if (rank > 0) {
      bool mergeable = true;
      for (int k = 0; k < N && mergeable; ++k) mergeable = strides[k][rank - 1] == full[k][d] * out[d];
      if (mergeable) {
        dims[rank - 1] *= out[d];
        for (int k = 0; k < N; ++k) strides[k][rank - 1] = full[k][d];
        continue;
      }
    }
    dims[rank] = out[d];
    for (int k = 0; k < N; ++k) strides[k][rank] = full[k][d];
    ++rank;
  }
  if (rank == 0) {
    inner_ = out.numel();  // 0 for empty outputs, 1 for scalars
    rows_ = inner_ == 0 ? 0 : 1;
    for (int k = 0; k < N; ++k) inner_stride_[k] = 0;
    return;
  }
  inner_ = dims[rank - 1];
  for (int k = 0; k < N; ++k) inner_stride_[k] = strides[k][rank - 1];
  outer_rank_ = rank - 1;
  rows_ = 1;
  for (int d = 0; d < outer_rank_; ++d) {
    dims_[d] = dims[d];
    rows_ *= dims[d];
    for (int k = 0; k < N; ++k) strides_[k][d] = strides[k][d];
  }
  if (out.numel() == 0) rows_ = 0;
}

template class BroadcastLoop<2>;
template class BroadcastLoop<3>;
template class BroadcastLoop<4>;

}  // namespace onnxtrain
