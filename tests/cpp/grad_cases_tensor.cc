// Finite-difference cases for src/ops/tensor: shape-moving ops.
#include <gtest/gtest.h>

#include "session/training_session.h"
#include "tests/cpp/gradient_check.h"

namespace onnxtrain::testing {
namespace {

std::vector<GradCase> cases() {
  const DType F64 = DType::Float64;
  auto r = [&](const TensorShape& s, uint64_t seed) { return random_tensor(F64, s, seed); };
  return {
      {"Identity", "Identity", "", {}, {r({2, 3}, 1)}},
      {"SplitGuard_chunk", "SplitGuard", kOnnxTrainDomain,
       {{"kind", Attribute::of_string("chunk")}, {"axis", Attribute::of_int(0)}, {"parameter", Attribute::of_int(3)},
        {"pieces", Attribute::of_ints({2, 2, 1})}},
       {r({5, 2}, 9)}},
      {"Reshape_infer", "Reshape", "", {}, {r({2, 3, 4}, 2), int64_tensor({0, -1})}},
      {"Flatten_axis2", "Flatten", "", {{"axis", Attribute::of_int(2)}}, {r({2, 3, 2, 2}, 3)}},
      {"Squeeze", "Squeeze", "", {}, {r({2, 1, 3, 1}, 4), int64_tensor({1, -1})}},
      {"Unsqueeze", "Unsqueeze", "", {}, {r({2, 3}, 5), int64_tensor({0, 3})}},
      {"Transpose_perm", "Transpose", "", {{"perm", Attribute::of_ints({2, 0, 1})}}, {r({2, 3, 4}, 6)}},
      {"Transpose_default", "Transpose", "", {}, {r({2, 3, 4}, 7)}},
      {"Cast_to_float32", "Cast", "", {{"to", Attribute::of_int(1)}}, {r({3, 2}, 8)}, {}, 1, 17,
       // The forward rounds to float32, so differences see float32 steps: eps and tolerance sized for that.
       1e-3, 1e-4, 1e-5},
  };
}

OT_GRAD_CASES(cases());

}  // namespace
}  // namespace onnxtrain::testing

namespace onnxtrain::testing {
namespace {

std::vector<GradCase> broadcast_cases() {
  const DType F64 = DType::Float64;
  Tensor cond = Tensor::from_vector<bool>({true, false, false, true, true, false}, {2, 3});
  return {
      {"Expand_rows", "Expand", "", {}, {random_tensor(F64, {3, 1}, 11), int64_tensor({2, 3, 4})}},
      {"Expand_same", "Expand", "", {}, {random_tensor(F64, {2, 3}, 12), int64_tensor({2, 3})}},
      {"Where_broadcast", "Where", "", {}, {cond, random_tensor(F64, {2, 3}, 13), random_tensor(F64, {3}, 14)}},
  };
}

OT_GRAD_CASES(broadcast_cases());

}  // namespace
}  // namespace onnxtrain::testing

// Index ops: repeated and negative indices, int32 and int64, scalar indices, odd shapes.
namespace onnxtrain::testing {
namespace {

Tensor f64(const TensorShape& s, uint64_t seed) { return random_tensor(DType::Float64, s, seed); }
Tensor i32(const std::vector<int32_t>& v, const TensorShape& s) { return Tensor::from_vector(v, s); }
AttributeMap axis(int64_t a) { return {{"axis", Attribute::of_int(a)}}; }

std::vector<GradCase> index_cases() {
  return {
      {"Gather_axis0_repeated_negative", "Gather", "", axis(0),
       {f64({5, 3}, 101), int64_tensor({0, -1, 2, 0}, {2, 2})}},
      {"Gather_axis1_int32", "Gather", "", axis(1), {f64({2, 4, 3}, 102), i32({1, -1, 1}, {3})}},
      {"Gather_scalar_index_last_axis", "Gather", "", axis(-1), {f64({4, 3}, 103), int64_tensor({-1}, {})}},
      {"Gather_embedding_table", "Gather", "", axis(0),
       {f64({7, 5}, 104), int64_tensor({3, 3, 0, 6, 3, 1, 0, 3, 6, 6, 2, 3}, {3, 4})}},
      // The padding row is not looked up here: its zero gradient is torch's rule, not a derivative
      // (EmbeddingGradient.PaddingRowStaysZero checks it).
      {"Embedding_padding_idx", "Embedding", "ai.onnxtrain", {{"padding_idx", Attribute::of_int(2)}},
       {f64({6, 4}, 105), int64_tensor({5, 1, 5, 1, 3, 0, 1, 4, 1, 3}, {2, 5})}},
      {"Embedding_no_padding", "Embedding", "ai.onnxtrain", {{"padding_idx", Attribute::of_int(-1)}},
       {f64({4, 3}, 106), i32({3, 0, 3, 3, 1}, {5})}},
      {"GatherElements_axis0_repeated", "GatherElements", "", axis(0),
       {f64({3, 4}, 107), int64_tensor({0, 2, -1, 1, 0, 0, 1, -3}, {2, 4})}},
      {"GatherElements_last_axis_smaller_index", "GatherElements", "", axis(-1),
       {f64({3, 2, 4}, 108), int64_tensor({3, -4, 3, 1, 0, 0, 2, 2, -1, 1, 1, 1}, {2, 2, 3})}},
      {"GatherND_tuples", "GatherND", "", {}, {f64({3, 4, 2}, 109), int64_tensor({0, -1, 2, 1, 0, 3}, {3, 2})}},
      {"GatherND_batch_dims1", "GatherND", "", {{"batch_dims", Attribute::of_int(1)}},
       {f64({2, 3, 4}, 110), int64_tensor({2, 2, -1, 0}, {2, 2, 1})}},
      {"GatherND_full_tuples_int32", "GatherND", "", {}, {f64({2, 3}, 111), i32({1, 2, 0, -1, 1, 2}, {3, 2})}},
      // Each scattered place is hit once here: with reduction none, duplicates have no derivative.
      {"ScatterElements_axis0", "ScatterElements", "", axis(0),
       {f64({4, 3}, 112), int64_tensor({1, 0, 2, 3, 2, 0}, {2, 3}), f64({2, 3}, 113)}},
      {"ScatterElements_last_axis_negative", "ScatterElements", "", axis(-1),
       {f64({2, 5}, 114), int64_tensor({-1, 0, 2, 1, -2, -5}, {2, 3}), f64({2, 3}, 115)}},
      {"ScatterElements_add_repeated", "ScatterElements", "",
       {{"axis", Attribute::of_int(1)}, {"reduction", Attribute::of_string("add")}},
       {f64({3, 4}, 116), int64_tensor({1, 1, -1, 0, 0, 0}, {3, 2}), f64({3, 2}, 117)}},
      {"ScatterND_rows", "ScatterND", "", {}, {f64({4, 3}, 118), int64_tensor({1, -1}, {2, 1}), f64({2, 3}, 119)}},
      {"ScatterND_add_repeated", "ScatterND", "", {{"reduction", Attribute::of_string("add")}},
       {f64({3, 3}, 120), int64_tensor({0, 1, 0, 1, 2, -1}, {3, 2}), f64({3}, 121)}},
  };
}

OT_GRAD_CASES(index_cases());

}  // namespace
}  // namespace onnxtrain::testing

// Shape-moving ops: slices (negative steps, clamping), concat/split, tile, pads, triangles, blocks.
namespace onnxtrain::testing {
namespace {

AttributeMap mode(const char* m) { return {{"mode", Attribute::of_string(m)}}; }
AttributeMap block(int64_t b, const char* m) {
  return {{"blocksize", Attribute::of_int(b)}, {"mode", Attribute::of_string(m)}};
}
const std::vector<bool> kFirstOnly{true, false, false};

std::vector<GradCase> movement_cases() {
  const Tensor none;
  return {
      {"Slice_steps", "Slice", "", {},
       {f64({5, 6}, 201), int64_tensor({1, 0}), int64_tensor({4, -1}), int64_tensor({0, 1}), int64_tensor({1, 2})}},
      {"Slice_negative_steps", "Slice", "", {},
       {f64({6, 5}, 202), int64_tensor({-1, 4}), int64_tensor({-100, 0}), int64_tensor({0, -1}),
        int64_tensor({-2, -1})}},
      {"Slice_default_axes", "Slice", "", {}, {f64({4, 3, 2}, 203), int64_tensor({1}), int64_tensor({3})}},
      {"Slice_clamped_ends", "Slice", "", {},
       {f64({3, 4}, 204), int64_tensor({-10, 2}), int64_tensor({INT64_MAX, 1000}), int64_tensor({0, 1}), none}},
      {"Concat_axis1_three", "Concat", "", axis(1), {f64({2, 1, 3}, 205), f64({2, 4, 3}, 206), f64({2, 2, 3}, 207)}},
      {"Concat_negative_axis", "Concat", "", axis(-1), {f64({3, 2}, 208), f64({3, 1}, 209)}},
      {"Split_sizes", "Split", "", axis(0), {f64({5, 3}, 210), int64_tensor({2, 3})}, {}, 2},
      {"Split_equal_three", "Split", "", axis(-1), {f64({2, 6}, 211)}, {}, 3},
      {"Tile_2d", "Tile", "", {}, {f64({2, 3}, 212), int64_tensor({2, 3})}},
      {"Tile_3d_with_ones", "Tile", "", {}, {f64({2, 1, 3}, 213), int64_tensor({1, 4, 2})}},
      {"Pad_constant_value", "Pad", "", mode("constant"),
       {f64({2, 3}, 214), int64_tensor({1, 0, 2, 1}), Tensor::scalar<double>(0.5)}, kFirstOnly},
      {"Pad_constant_crop", "Pad", "", {}, {f64({3, 4}, 215), int64_tensor({0, -1, 1, 2})}},
      {"Pad_reflect", "Pad", "", mode("reflect"), {f64({3, 4}, 216), int64_tensor({2, 1, 1, 3})}},
      // Wider than dim - 1: numpy (ONNX's reference) keeps reflecting.
      {"Pad_reflect_wide", "Pad", "", mode("reflect"), {f64({2, 3}, 217), int64_tensor({0, 4, 0, 3})}},
      {"Pad_edge", "Pad", "", mode("edge"), {f64({2, 3, 3}, 218), int64_tensor({0, 1, 2, 0, 2, 1})}},
      {"Trilu_upper_k1", "Trilu", "", {}, {f64({3, 4}, 219), int64_tensor({1}, {})}},
      {"Trilu_lower_batched_negative_k", "Trilu", "", {{"upper", Attribute::of_int(0)}},
       {f64({2, 4, 3}, 220), int64_tensor({-1}, {})}},
      {"Trilu_default_k", "Trilu", "", {}, {f64({4, 4}, 221)}},
      {"DepthToSpace_DCR", "DepthToSpace", "", block(2, "DCR"), {f64({1, 8, 2, 3}, 222)}},
      {"DepthToSpace_CRD", "DepthToSpace", "", block(2, "CRD"), {f64({2, 8, 2, 2}, 223)}},
      {"SpaceToDepth_b2", "SpaceToDepth", "", {{"blocksize", Attribute::of_int(2)}}, {f64({1, 2, 4, 6}, 224)}},
  };
}

OT_GRAD_CASES(movement_cases());

AttributeMap eq(const char* e) { return {{"equation", Attribute::of_string(e)}}; }

std::vector<GradCase> einsum_cases() {
  return {
      {"Einsum_matmul", "Einsum", "", eq("ij,jk->ik"), {f64({3, 4}, 301), f64({4, 5}, 302)}},
      {"Einsum_batch_matmul_transposed", "Einsum", "", eq("bji,bkj->bik"), {f64({2, 4, 3}, 303), f64({2, 5, 4}, 304)}},
      {"Einsum_implicit", "Einsum", "", eq("ij,jk"), {f64({2, 3}, 305), f64({3, 4}, 306)}},
      {"Einsum_trace", "Einsum", "", eq("ii->"), {f64({4, 4}, 307)}},
      {"Einsum_diagonal", "Einsum", "", eq("ii->i"), {f64({3, 3}, 308)}},
      {"Einsum_repeated_with_free", "Einsum", "", eq("iij->ji"), {f64({3, 3, 2}, 309)}},
      {"Einsum_ellipsis_broadcast", "Einsum", "", eq("...ij,...jk->...ik"),
       {f64({2, 1, 3, 4}, 310), f64({5, 4, 2}, 311)}},
      {"Einsum_ellipsis_summed", "Einsum", "", eq("...i,i->i"), {f64({2, 3, 4}, 312), f64({4}, 313)}},
      {"Einsum_private_label", "Einsum", "", eq("ijk,jl->il"), {f64({2, 3, 4}, 314), f64({3, 2}, 315)}},
      {"Einsum_three_operands", "Einsum", "", eq("ij,jk,kl->il"),
       {f64({2, 3}, 316), f64({3, 4}, 317), f64({4, 2}, 318)}},
      {"Einsum_outer", "Einsum", "", eq("i,j->ij"), {f64({3}, 319), f64({4}, 320)}},
      {"Einsum_uppercase", "Einsum", "", eq("Ab, bC -> CA"), {f64({2, 3}, 321), f64({3, 4}, 322)}},
      {"Einsum_named_broadcast", "Einsum", "", eq("ij,ij->ij"), {f64({1, 3}, 323), f64({2, 3}, 324)}},
      {"Einsum_attention_scores", "Einsum", "", eq("bhqd,bhkd->bhqk"),
       {f64({2, 2, 3, 4}, 325), f64({2, 2, 5, 4}, 326)}},
  };
}

OT_GRAD_CASES(einsum_cases());

}  // namespace
}  // namespace onnxtrain::testing

// Gradients that finite differences cannot check: torch's padding row, and rules whose emitted
// nodes differ when shapes are only known at run time.
namespace onnxtrain::testing {
namespace {

// One-node graph; returns the gradients of `wrt` for output gradient `dy`.
std::vector<Tensor> backward_of(Graph g, const std::vector<std::string>& wrt, const std::vector<Tensor>& feeds,
                                const Tensor& dy) {
  TrainingSession session(std::move(g), {wrt, {}, false});
  std::vector<Tensor> outputs;
  auto call = session.forward(feeds, 7, outputs);
  return session.backward(*call, {dy});
}

Graph one_node(Node n, const std::vector<std::pair<std::string, ValueInfo>>& inputs) {
  Graph g;
  g.opsets = {{"", 17}, {kOnnxTrainDomain, 1}};
  for (const auto& [name, vi] : inputs) {
    g.inputs.push_back(name);
    g.value_info[name] = vi;
  }
  g.outputs = n.outputs;
  g.add_node(std::move(n));
  return g;
}

std::vector<Dim> dims(std::initializer_list<Dim> d) { return d; }

TEST(EmbeddingGradient, PaddingRowStaysZero) {
  Node n{"emb", "Embedding", kOnnxTrainDomain, {"w", "idx"}, {"y"}, {{"padding_idx", Attribute::of_int(1)}}};
  Graph g = one_node(n, {{"w", {DType::Float64, dims({{5, ""}, {3, ""}})}}, {"idx", {DType::Int64, dims({{4, ""}})}}});
  Tensor w = random_tensor(DType::Float64, {5, 3}, 1);
  Tensor idx = int64_tensor({1, 3, 1, -2});  // -2 is row 3 again
  Tensor dy = random_tensor(DType::Float64, {4, 3}, 2);
  std::vector<Tensor> grads = backward_of(g, {"w"}, {w, idx}, dy);
  ASSERT_EQ(grads.size(), 1u);
  const double* gw = grads[0].data<double>();
  const double* d = dy.data<double>();
  for (int c = 0; c < 3; ++c) {
    EXPECT_EQ(gw[1 * 3 + c], 0.0) << "padding row";
    EXPECT_DOUBLE_EQ(gw[3 * 3 + c], d[1 * 3 + c] + d[3 * 3 + c]) << "row 3 sums both lookups";
    for (int r : {0, 2, 4}) EXPECT_EQ(gw[r * 3 + c], 0.0) << "row " << r << " is never looked up";
  }
}

TEST(ConcatGradient, SymbolicShapesSplitAtRunTime) {
  Node n{"cat", "Concat", "", {"a", "b"}, {"y"}, {{"axis", Attribute::of_int(-1)}}};
  Graph g = one_node(n, {{"a", {DType::Float64, dims({{2, ""}, {-1, "n"}})}},
                         {"b", {DType::Float64, dims({{2, ""}, {-1, "m"}})}}});
  Tensor a = random_tensor(DType::Float64, {2, 3}, 3), b = random_tensor(DType::Float64, {2, 1}, 4);
  Tensor dy = random_tensor(DType::Float64, {2, 4}, 5);
  std::vector<Tensor> grads = backward_of(g, {"a", "b"}, {a, b}, dy);
  ASSERT_EQ(grads.size(), 2u);
  ASSERT_EQ(grads[0].shape(), a.shape());
  ASSERT_EQ(grads[1].shape(), b.shape());
  for (int r = 0; r < 2; ++r) {
    for (int c = 0; c < 3; ++c) EXPECT_EQ(grads[0].data<double>()[r * 3 + c], dy.data<double>()[r * 4 + c]);
    EXPECT_EQ(grads[1].data<double>()[r], dy.data<double>()[r * 4 + 3]);
  }
}

}  // namespace
}  // namespace onnxtrain::testing

// ReverseSequence: time-major and batch-major, lengths from 0 to the full time axis.
namespace onnxtrain::testing {
namespace {

std::vector<GradCase> reverse_sequence_cases() {
  const DType F64 = DType::Float64;
  return {
      {"ReverseSequence_time_major", "ReverseSequence", "", {},
       {random_tensor(F64, {4, 3, 2}, 301), int64_tensor({4, 2, 1})}},
      {"ReverseSequence_batch_major", "ReverseSequence", "",
       {{"batch_axis", Attribute::of_int(0)}, {"time_axis", Attribute::of_int(1)}},
       {random_tensor(F64, {3, 5}, 302), int64_tensor({1, 5, 0})}},
  };
}

OT_GRAD_CASES(reverse_sequence_cases());

}  // namespace
}  // namespace onnxtrain::testing
