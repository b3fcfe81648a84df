// NonMaxSuppression: per batch and class, greedily keeps the highest-scoring boxes, dropping
// every box whose IoU with a kept one exceeds iou_threshold. Output rows are
// [batch, class, box], in batch, class, then selection order. Integer output: no gradient.
//
// Boxes are [y1, x1, y2, x2] corners in either order (center_point_box 0) or
// [x_center, y_center, width, height] (center_point_box 1). Scores must exceed score_threshold
// (strictly) to be candidates; equal scores are taken in box order.
#include <algorithm>
#include <numeric>

#include "opdef/op_registry.h"
#include "ops/tensor/indexing.h"

namespace onnxtrain {
namespace {

struct Corners {
  double y_min, x_min, y_max, x_max;
  double area() const { return (y_max - y_min) * (x_max - x_min); }
};

Corners corners_of(const double* b, bool center_point_box) {
  if (center_point_box) {
    const double xc = b[0], yc = b[1], w = b[2], h = b[3];
    return {yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2};
  }
  return {std::min(b[0], b[2]), std::min(b[1], b[3]), std::max(b[0], b[2]), std::max(b[1], b[3])};
}

// True when b overlaps a by more than the threshold; degenerate boxes never suppress.
bool overlaps_too_much(const Corners& a, const Corners& b, double iou_threshold) {
  const double ix = std::min(a.x_max, b.x_max) - std::max(a.x_min, b.x_min);
  const double iy = std::min(a.y_max, b.y_max) - std::max(a.y_min, b.y_min);
  if (ix <= 0 || iy <= 0) return false;
  const double area_a = a.area(), area_b = b.area();
  if (area_a <= 0 || area_b <= 0) return false;
  const double intersection = ix * iy, union_area = area_a + area_b - intersection;
  if (union_area <= 0) return false;
  return intersection / union_area > iou_threshold;
}

double scalar_input(KernelContext& ctx, int i, double fallback, const char* what) {
  if (!ctx.has_input(i)) return fallback;
  const Tensor& t = ctx.input(i);
  OT_CHECK(t.numel() == 1, "NonMaxSuppression: ", what, " must hold one value, got ", t.str());
  return t.item_as_double(0);
}

class NonMaxSuppressionKernel final : public Kernel {
 public:
  explicit NonMaxSuppressionKernel(const KernelInfo& info)
      : center_point_box_(info.node.attr_int("center_point_box", 0)) {
    OT_CHECK(center_point_box_ == 0 || center_point_box_ == 1,
             "NonMaxSuppression: center_point_box must be 0 or 1, got ", center_point_box_);
  }

  void compute(KernelContext& ctx) const override {
    const Tensor& boxes = ctx.input(0);
    const Tensor& scores = ctx.input(1);
    OT_CHECK(boxes.rank() == 3 && boxes.dim(2) == 4, "NonMaxSuppression: boxes must be [batches, boxes, 4], got ",
             boxes.str());
    OT_CHECK(scores.rank() == 3 && scores.dim(0) == boxes.dim(0) && scores.dim(2) == boxes.dim(1),
             "NonMaxSuppression: scores ", scores.str(), " must be [batches, classes, boxes] for boxes ",
             boxes.str());
    int64_t max_per_class = 0;
    if (ctx.has_input(2)) {
      const std::vector<int64_t> m = int_values(ctx.input(2), "NonMaxSuppression max_output_boxes_per_class");
      OT_CHECK(m.size() == 1, "NonMaxSuppression: max_output_boxes_per_class must hold one value, got ",
               ctx.input(2).str());
      max_per_class = std::max<int64_t>(m[0], 0);
    }
    const double iou_threshold = scalar_input(ctx, 3, 0.0, "iou_threshold");
    OT_CHECK(iou_threshold >= 0 && iou_threshold <= 1, "NonMaxSuppression: iou_threshold must be in [0, 1], got ",
             iou_threshold);
    const bool has_score_threshold = ctx.has_input(4);
    const double score_threshold = scalar_input(ctx, 4, 0.0, "score_threshold");

    const int64_t batches = boxes.dim(0), count = boxes.dim(1), classes = scores.dim(1);
    std::vector<double> box_values(static_cast<size_t>(boxes.numel())), score_values(static_cast<size_t>(scores.numel()));
    for (int64_t i = 0; i < boxes.numel(); ++i) box_values[i] = boxes.item_as_double(i);
    for (int64_t i = 0; i < scores.numel(); ++i) score_values[i] = scores.item_as_double(i);

    std::vector<int64_t> selected;  // triples
    std::vector<Corners> corners(static_cast<size_t>(count));
    std::vector<int64_t> candidates, kept;
    for (int64_t b = 0; b < batches; ++b) {
      for (int64_t i = 0; i < count; ++i)
        corners[i] = corners_of(&box_values[(b * count + i) * 4], center_point_box_ == 1);
      for (int64_t c = 0; c < classes && max_per_class > 0; ++c) {
        const double* s = &score_values[(b * classes + c) * count];
        candidates.clear();
        for (int64_t i = 0; i < count; ++i)
          if (!has_score_threshold || s[i] > score_threshold) candidates.push_back(i);
        std::stable_sort(candidates.begin(), candidates.end(), [&](int64_t x, int64_t y) { return s[x] > s[y]; });
        kept.clear();
        for (int64_t i : candidates) {
          if (static_cast<int64_t>(kept.size()) >= max_per_class) break;
          bool suppressed = false;
          for (int64_t k : kept) suppressed = suppressed || overlaps_too_much(corners[k], corners[i], iou_threshold);
          if (suppressed) continue;
          kept.push_back(i);
          selected.insert(selected.end(), {b, c, i});
        }
      }
    }
    Tensor& out = ctx.allocate_output(0, DType::Int64, TensorShape{static_cast<int64_t>(selected.size() / 3), 3});
    std::copy(selected.begin(), selected.end(), out.data<int64_t>());
  }

 private:
  int64_t center_point_box_;
};

}  // namespace

ONNXTRAIN_KERNEL("", "NonMaxSuppression", kernel_factory<NonMaxSuppressionKernel>(),
                 Recompute::Costly, Rounding::PerValue);

}  // namespace onnxtrain
