// SoftmaxCrossEntropyLoss (opset 12/13), also as ai.onnxtrain::SoftmaxCrossEntropyLoss with a
// `label_smoothing` attribute ε, which the front end emits for F.cross_entropy(label_smoothing=ε)
// since torch cannot export it. With lp = log_softmax(scores) along dim 1, w the class weights
// (1 without them), W = sum of w, and t the label at a position:
//   loss = (1 - ε) w[t] (-lp[t]) + ε / C * sum_c w[c] (-lp[c]),   0 where t is ignore_index,
// reduced by none, sum, or mean = sum / (sum of w[t] over the positions not ignored). This is
// PyTorch 1.13's cross_entropy with weight, ignore_index and label_smoothing (checked against
// torch); ε = 0 is the ONNX op. The fused backward kernel recomputes the softmax from the scores
// (or reads it from log_prob when the node outputs it): per row one pass for the statistics and
// one writing dScores. The ai.onnxtrain forms may also output each position's log-sum-exp
// (output 2; passes/softmax_statistics.cc asks for it), which the backward then reads instead of
// taking the statistics pass again.
#include "autodiff/grad_builder.h"
#include "onnx/custom_schema.h"
#include "opdef/op_registry.h"
#include "ops/loss/loss_common.h"
#include "ops/softmax/softmax_math.h"

namespace onnxtrain {
namespace {

using softmax_math::for_each_slice;
using softmax_math::kCols;
using softmax_math::max_lanes;
using softmax_math::sum_lanes;
using softmax_math::vexp;

// The losses' attributes, and PyTorch's label smoothing (the engine's own op has it).
struct SceAttrs : LossAttrs {
  float smoothing;

  explicit SceAttrs(const Node& node)
      : LossAttrs(node),
        smoothing(node.domain == kOnnxTrainDomain ? node.attr_float("label_smoothing", 0.0f) : 0.0f) {
    OT_CHECK(smoothing >= 0.0f && smoothing <= 1.0f, node.describe(), ": label_smoothing is ", smoothing,
             ", it must lie in [0, 1]");
  }

  AttributeMap attrs() const {
    AttributeMap a = LossAttrs::attrs();
    a["label_smoothing"] = Attribute::of_float(smoothing);
    return a;
  }
};

// Per-position constants of the loss: a = (1 - ε) w[t], b = ε / C (times w[c] per class).
template <typename T>
struct Smoothing {
  T keep, spread, total_weight;  // 1 - ε, ε / C, W
  Smoothing(float eps, int64_t classes, const T* w) : keep(T(1) - T(eps)), spread(T(eps) / T(classes)) {
    total_weight = T(classes);
    if (w) total_weight = sum_lanes<T>(classes, [&](int64_t c) { return w[c]; });
  }
};

class SceKernel final : public Kernel {
 public:
  explicit SceKernel(const KernelInfo& info) : attrs_(info.node) {}

  void compute(KernelContext& ctx) const override {
    const char* what = "SoftmaxCrossEntropyLoss";
    const LossForward f = begin_loss_forward(ctx, attrs_, what);
    const Tensor& x = f.input;
    const Tensor& labels_t = f.label_tensor;
    const AxisSplit& s = f.split;
    const Tensor* weights = f.weights;
    const LossLabels& labels = f.labels;
    Tensor& loss = f.loss;
    Tensor* log_prob = ctx.output_needed(1) ? &ctx.allocate_output(1, x.dtype(), x.shape()) : nullptr;
    Tensor* log_sum_exp = ctx.output_needed(2) ? &ctx.allocate_output(2, x.dtype(), labels_t.shape()) : nullptr;
    const int64_t positions = s.outer * s.inner;
    dispatch_float(x.dtype(), what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* px = x.data<T>();
      const T* pw = weights ? weights->data<T>() : nullptr;
      T* lp = log_prob ? log_prob->data<T>() : nullptr;
      T* lse_out = log_sum_exp ? log_sum_exp->data<T>() : nullptr;
      const Smoothing<T> sm(attrs_.smoothing, s.n, pw);
      const bool smooth = attrs_.smoothing > 0.0f;
      // Per-position losses: straight into the output for "none", else into scratch.
      T* per = attrs_.reduction == LossReduction::None
                   ? loss.data<T>()
                   : static_cast<T*>(ctx.scratch(static_cast<size_t>(positions) * sizeof(T)));
      // loss from lse = logsumexp, x[t] and sum_c w[c] x[c] (only needed when smoothing).
      auto position_loss = [&](int64_t pos, T lse, T xt, T wx) {
        const int64_t t = labels.at(pos);
        if (t < 0) return T(0);
        T l = sm.keep * (pw ? pw[t] : T(1)) * (lse - xt);
        if (smooth) l += sm.spread * (sm.total_weight * lse - wx);
        return l;
      };
      auto row = [&](int64_t o) {
        const T* xr = px + o * s.n;
        const T m = max_lanes(xr, s.n);
        const T lse = m + std::log(sum_lanes<T>(s.n, [&](int64_t k) { return vexp(xr[k] - m); }));
        if (lse_out) lse_out[o] = lse;
        T wx = 0;
        if (smooth) wx = pw ? sum_lanes<T>(s.n, [&](int64_t k) { return pw[k] * xr[k]; })
                            : sum_lanes<T>(s.n, [&](int64_t k) { return xr[k]; });
        if (lp) {
          T* out = lp + o * s.n;
          for (int64_t k = 0; k < s.n; ++k) out[k] = xr[k] - lse;
        }
        const int64_t t = labels.at(o);
        per[o] = position_loss(o, lse, t < 0 ? T(0) : xr[t], wx);
      };
      auto block = [&](int64_t o, int64_t c0, int64_t w) {
        const int64_t base = o * s.n * s.inner + c0;
        T m[kCols], acc[kCols], wx[kCols];
        for (int64_t c = 0; c < w; ++c) m[c] = px[base + c];
        for (int64_t k = 1; k < s.n; ++k) {
          const T* xr = px + base + k * s.inner;
          for (int64_t c = 0; c < w; ++c) m[c] = xr[c] > m[c] ? xr[c] : m[c];
        }
        for (int64_t c = 0; c < w; ++c) acc[c] = wx[c] = 0;
        for (int64_t k = 0; k < s.n; ++k) {
          const T* xr = px + base + k * s.inner;
          const T wk = pw ? pw[k] : T(1);
          for (int64_t c = 0; c < w; ++c) {
            acc[c] += vexp(xr[c] - m[c]);
            wx[c] += wk * xr[c];
          }
        }
        for (int64_t c = 0; c < w; ++c) acc[c] = m[c] + std::log(acc[c]);  // lse
        if (lse_out)
          for (int64_t c = 0; c < w; ++c) lse_out[o * s.inner + c0 + c] = acc[c];
        if (lp)
          for (int64_t k = 0; k < s.n; ++k)
            for (int64_t c = 0; c < w; ++c) lp[base + k * s.inner + c] = px[base + k * s.inner + c] - acc[c];
        for (int64_t c = 0; c < w; ++c) {
          const int64_t pos = o * s.inner + c0 + c, t = labels.at(pos);
          per[pos] = position_loss(pos, acc[c], t < 0 ? T(0) : px[base + t * s.inner + c], wx[c]);
        }
      };
      for_each_slice(ctx.threads(), s, row, block);
      if (attrs_.reduction == LossReduction::None) return;
      double total = 0;
      for (int64_t i = 0; i < positions; ++i) total += static_cast<double>(per[i]);
      // All positions ignored under "mean": 0 / 0 = NaN, as PyTorch 1.13 gives.
      if (attrs_.reduction == LossReduction::Mean) total /= loss_mean_denominator(labels, positions, pw);
      loss.data<T>()[0] = static_cast<T>(total);
    });
  }

 private:
  SceAttrs attrs_;
};

// Inputs: dLoss (optional), scores or log_prob (attribute from_log_prob), labels, weights
// (optional), dLogProb (optional), the forward's log-sum-exp per position (optional, with scores). Per position with g = dL/dloss, p = softmax and t its label:
//   dScores[c] = g (p[c] ((1 - ε) w[t] + ε W / C) - (1 - ε) w[t] [c = t] - ε / C w[c])
//              + dLogProb[c] - p[c] sum(dLogProb),
// the loss term dropped where t is ignore_index.
class SceGradKernel final : public Kernel {
 public:
  explicit SceGradKernel(const KernelInfo& info)
      : attrs_(info.node), from_log_prob_(info.node.attr_int("from_log_prob", 0) != 0) {}

  void compute(KernelContext& ctx) const override {
    const char* what = "SoftmaxCrossEntropyLossGrad";
    const Tensor& src = ctx.input(1);
    const Tensor& labels_t = ctx.input(2);
    const AxisSplit s = loss_layout(src.shape(), labels_t.shape(), what);
    const Tensor* dloss = ctx.has_input(0) ? &ctx.input(0) : nullptr;
    const Tensor* weights = ctx.has_input(3) ? &ctx.input(3) : nullptr;
    const Tensor* dlp = ctx.has_input(4) ? &ctx.input(4) : nullptr;
    const Tensor* lse = ctx.has_input(5) ? &ctx.input(5) : nullptr;
    if (weights) check_loss_weights(*weights, src.dtype(), s.n, what);
    if (lse)
      OT_CHECK(!from_log_prob_ && lse->dtype() == src.dtype() && lse->shape() == labels_t.shape(), what,
               ": log-sum-exp ", lse->str(), " does not match the scores ", src.str(), " and labels ", labels_t.str());
    if (dloss)
      OT_CHECK(dloss->dtype() == src.dtype() && dloss->shape() == loss_shape(attrs_.reduction, labels_t.shape()), what,
               ": dLoss ", dloss->str(), " does not match the loss");
    if (dlp) OT_CHECK(dlp->dtype() == src.dtype() && dlp->shape() == src.shape(), what, ": dLogProb ", dlp->str(),
                      " does not match log_prob ", src.str());
    const LossLabels labels(labels_t, attrs_.has_ignore, attrs_.ignore_index, s.n, what);
    Tensor& dx = ctx.allocate_output(0, src.dtype(), src.shape());
    const int64_t positions = s.outer * s.inner;
    dispatch_float(src.dtype(), what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* px = src.data<T>();
      const T* pw = weights ? weights->data<T>() : nullptr;
      const T* pd = dlp ? dlp->data<T>() : nullptr;
      const T* pg = dloss ? dloss->data<T>() : nullptr;
      const T* plse = lse ? lse->data<T>() : nullptr;
      T* out = dx.data<T>();
      const Smoothing<T> sm(attrs_.smoothing, s.n, pw);
      T scale = pg && attrs_.reduction != LossReduction::None ? pg[0] : T(0);
      if (pg && attrs_.reduction == LossReduction::Mean)
        scale = static_cast<T>(static_cast<double>(scale) / loss_mean_denominator(labels, positions, pw));
      // g per position, and the coefficient of p in the loss term.
      auto grad_at = [&](int64_t pos, int64_t t) {
        if (!pg || t < 0) return T(0);
        return attrs_.reduction == LossReduction::None ? pg[pos] : scale;
      };
      const bool from_lp = from_log_prob_;
      auto row = [&](int64_t o) {
        const T* xr = px + o * s.n;
        T* dr = out + o * s.n;
        T shift = plse ? plse[o] : T(0);  // log-sum-exp of the scores; log_prob is already shifted
        if (!from_lp && !plse) {
          const T m = max_lanes(xr, s.n);
          shift = m + std::log(sum_lanes<T>(s.n, [&](int64_t k) { return vexp(xr[k] - m); }));
        }
        const int64_t t = labels.at(o);
        const T g = grad_at(o, t);
        const T wt = t < 0 ? T(0) : (pw ? pw[t] : T(1));
        const T spread = g * sm.spread;
        T coef = g * (sm.keep * wt + sm.spread * sm.total_weight);
        if (pd) coef -= sum_lanes<T>(s.n, [&](int64_t k) { return pd[o * s.n + k]; });
        if (pw) {
          for (int64_t k = 0; k < s.n; ++k) dr[k] = vexp(xr[k] - shift) * coef - spread * pw[k];
        } else {
          for (int64_t k = 0; k < s.n; ++k) dr[k] = vexp(xr[k] - shift) * coef - spread;
        }
        if (pd)
          for (int64_t k = 0; k < s.n; ++k) dr[k] += pd[o * s.n + k];
        if (t >= 0) dr[t] -= g * sm.keep * wt;
      };
      auto block = [&](int64_t o, int64_t c0, int64_t w) {
        const int64_t base = o * s.n * s.inner + c0;
        T shift[kCols], coef[kCols], spread[kCols];
        for (int64_t c = 0; c < w; ++c) shift[c] = plse ? plse[o * s.inner + c0 + c] : T(0);
        if (!from_lp && !plse) {
          T m[kCols], acc[kCols];
          for (int64_t c = 0; c < w; ++c) m[c] = px[base + c];
          for (int64_t k = 1; k < s.n; ++k)
            for (int64_t c = 0; c < w; ++c) {
              const T v = px[base + k * s.inner + c];
              m[c] = v > m[c] ? v : m[c];
            }
          for (int64_t c = 0; c < w; ++c) acc[c] = 0;
          for (int64_t k = 0; k < s.n; ++k)
            for (int64_t c = 0; c < w; ++c) acc[c] += vexp(px[base + k * s.inner + c] - m[c]);
          for (int64_t c = 0; c < w; ++c) shift[c] = m[c] + std::log(acc[c]);
        }
        for (int64_t c = 0; c < w; ++c) {
          const int64_t pos = o * s.inner + c0 + c, t = labels.at(pos);
          const T g = grad_at(pos, t);
          const T wt = t < 0 ? T(0) : (pw ? pw[t] : T(1));
          coef[c] = g * (sm.keep * wt + sm.spread * sm.total_weight);
          spread[c] = g * sm.spread;
        }
        if (pd)
          for (int64_t k = 0; k < s.n; ++k)
            for (int64_t c = 0; c < w; ++c) coef[c] -= pd[base + k * s.inner + c];
        for (int64_t k = 0; k < s.n; ++k) {
          const int64_t at = base + k * s.inner;
          const T wk = pw ? pw[k] : T(1);
          for (int64_t c = 0; c < w; ++c) {
            T v = vexp(px[at + c] - shift[c]) * coef[c] - spread[c] * wk;
            if (pd) v += pd[at + c];
            out[at + c] = v;
          }
        }
        for (int64_t c = 0; c < w; ++c) {
          const int64_t pos = o * s.inner + c0 + c, t = labels.at(pos);
          if (t >= 0) out[base + t * s.inner + c] -= grad_at(pos, t) * sm.keep * (pw ? pw[t] : T(1));
        }
      };
      for_each_slice(ctx.threads(), s, row, block);
    });
  }

 private:
  SceAttrs attrs_;
  bool from_log_prob_;
};

void sce_gradient(GradBuilder& g) {
  if (g.needs_input_grad(2))
    throw UnsupportedError(str_cat(g.node().describe(), ": the gradient with respect to the class weights is not "
                                                        "supported (PyTorch's cross_entropy does not implement it either)"));
  const SceAttrs attrs(g.node());
  const Node& n = g.node();
  // log_prob, when the node outputs it, is stashed instead of the scores: same size, one pass less.
  const bool has_log_prob = n.outputs.size() > 1 && !n.outputs[1].empty();
  AttributeMap a = attrs.attrs();
  a["from_log_prob"] = Attribute::of_int(has_log_prob ? 1 : 0);
  std::vector<std::string> inputs{g.has_output_grad(0) ? g.output_grad(0) : "", has_log_prob ? g.output(1) : g.input(0),
                                  g.input(1), g.has_input(2) ? g.input(2) : "",
                                  g.has_output_grad(1) ? g.output_grad(1) : ""};
  while (inputs.back().empty()) inputs.pop_back();
  std::string dx = g.op("SoftmaxCrossEntropyLossGrad", inputs, a, kOnnxTrainDomain);
  // The custom-domain op's outputs have no inferred type, so the emitter cannot guess dX's.
  if (const ValueInfo* vi = g.info(g.input(0)); vi && vi->dtype != DType::Undefined) g.set_dtype(dx, vi->dtype);
  g.set_input_grad(0, dx);
}

}  // namespace

// The front end emits ai.onnxtrain::SoftmaxCrossEntropyLoss for label smoothing: ONNX's schema
// (inputs, outputs, shape rule) plus the label_smoothing attribute.
onnx::OpSchema smoothed_sce_schema() {
  // A finalized schema cannot be copied and registered again, so this one is declared in full;
  // only the shape rule is ONNX's own.
  const onnx::OpSchema* standard = onnx::OpSchemaRegistry::Schema("SoftmaxCrossEntropyLoss", 13);
  onnx::OpSchema schema;
  schema.SetName("SoftmaxCrossEntropyLoss")
      .SetDomain(kOnnxTrainDomain)
      .SinceVersion(1)
      .SetDoc("ONNX's SoftmaxCrossEntropyLoss with PyTorch's label smoothing.")
      .Attr("reduction", "none, sum or mean", onnx::AttributeProto::STRING, std::string("mean"))
      .Attr("ignore_index", "label to ignore", onnx::AttributeProto::INT, false)
      .Attr("label_smoothing", "PyTorch's label smoothing epsilon", onnx::AttributeProto::FLOAT, 0.0f)
      .Input(0, "scores", "N x C x ...", "T")
      .Input(1, "labels", "N x ...", "Tind", onnx::OpSchema::Single, true, 1, onnx::OpSchema::NonDifferentiable)
      .Input(2, "weights", "C", "T", onnx::OpSchema::Optional, true, 1, onnx::OpSchema::NonDifferentiable)
      .Output(0, "output", "the loss", "T")
      .Output(1, "log_prob", "log-softmax of the scores", "T", onnx::OpSchema::Optional)
      .Output(2, "log_sum_exp", "per position: the log-sum-exp of its scores, for the backward", "T",
              onnx::OpSchema::Optional)
      .TypeConstraint("T", {"tensor(float)", "tensor(double)"}, "float types")
      .TypeConstraint("Tind", {"tensor(int32)", "tensor(int64)"}, "label types")
      .TypeAndShapeInferenceFunction(standard->GetTypeAndShapeInferenceFunction());
  return schema;
}

ONNXTRAIN_SCHEMA(smoothed_sce_schema());
ONNXTRAIN_KERNEL("", "SoftmaxCrossEntropyLoss", kernel_factory<SceKernel>(), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "SoftmaxCrossEntropyLoss", kernel_factory<SceKernel>(),
                 Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "SoftmaxCrossEntropyLossGrad", kernel_factory<SceGradKernel>(),
                 Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_GRADIENT("", "SoftmaxCrossEntropyLoss", sce_gradient);
ONNXTRAIN_GRADIENT(kOnnxTrainDomain, "SoftmaxCrossEntropyLoss", sce_gradient);

}  // namespace onnxtrain
