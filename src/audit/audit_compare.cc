#include "audit/audit_compare.h"

#include "audit/batch_norm_terms.h"
#include "opdef/op_registry.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace onnxtrain::audit {
namespace {

// Below this a scale is no scale: an output whose terms are all (nearly) zero is judged on the
// absolute difference instead, so 0 against 1e-300 is no failure and 0 against 1 is.
constexpr double kTinyScale = 1e-30;

// Products, convolutions and reductions: each op's record says so (Rounding::SumOfTerms).
bool is_sum_of_terms_op(const Node& node) {
  const OpRecord* record = OpRegistry::instance().find(node);
  return record && record->rounding == Rounding::SumOfTerms;
}

// The outputs the op's record calls per-channel sums or selected indices (AuditedOutput).
AuditedOutput audited_output(const Node& node, size_t index) {
  const OpRecord* record = OpRegistry::instance().find(node);
  return record ? record->audited(node, index) : AuditedOutput::Value;
}

bool same_value(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }

double difference(double a, double b) {
  if (same_value(a, b)) return 0.0;
  const double d = std::fabs(a - b);
  return std::isnan(d) ? std::numeric_limits<double>::infinity() : d;  // NaN against a number
}

double max_abs(const double* p, int64_t n) {
  double m = 0.0;
  for (int64_t i = 0; i < n; ++i)
    if (std::isfinite(p[i])) m = std::max(m, std::fabs(p[i]));
  return m;
}

double output_scale_error(const Tensor& engine, const Tensor& twin) {
  const double* a = engine.data<double>();
  const double* b = twin.data<double>();
  double worst = 0.0;
  for (int64_t i = 0; i < engine.numel(); ++i) worst = std::max(worst, difference(a[i], b[i]));
  return worst / std::max(max_abs(b, twin.numel()), kTinyScale);
}

double sum_of_terms_error(const Tensor& engine, const Tensor& twin, const Tensor& terms) {
  OT_CHECK(terms.defined() && terms.numel() == twin.numel(), "the absolute-terms run gave ",
           terms.defined() ? terms.str() : std::string("nothing"), " for an output ", twin.str());
  const double* a = engine.data<double>();
  const double* b = twin.data<double>();
  const double* s = terms.data<double>();
  double worst = 0.0;
  for (int64_t i = 0; i < engine.numel(); ++i)
    worst = std::max(worst, difference(a[i], b[i]) / std::max(std::fabs(s[i]), kTinyScale));
  return worst;
}

double exact_error(const Tensor& engine, const Tensor& twin) {
  if (engine.numel() == 0) return 0.0;
  int64_t differing = 0;
  for (int64_t i = 0; i < engine.numel(); ++i)
    differing += !same_value(engine.item_as_double(i), twin.item_as_double(i));
  return static_cast<double>(differing) / static_cast<double>(engine.numel());
}

// The input value an index selects: flat (axis < 0) or along `axis`, the index tensor laid out as
// [outer, m, inner] around that axis (keepdims or not, the element order is the same).
class IndexedValues {
 public:
  IndexedValues(const Tensor& x, const Tensor& indices, int axis) : x_(x) {
    if (axis < 0) return;
    OT_CHECK(axis < x.rank(), "axis ", axis, " is outside the indexed input ", x.str());
    outer_ = x.shape().size_between(0, axis);
    inner_ = x.shape().size_between(axis + 1, x.rank());
    extent_ = x.dim(axis);
    const int64_t rows = outer_ * inner_;
    per_row_ = rows > 0 ? indices.numel() / rows : 0;
    flat_ = false;
  }
  // NaN for an index outside the input: it then differs from any value.
  double at(int64_t element, int64_t index) const {
    if (flat_) return index >= 0 && index < x_.numel() ? x_.data<double>()[index] : std::nan("");
    if (index < 0 || index >= extent_) return std::nan("");
    const int64_t o = element / (per_row_ * inner_), i = element % inner_;
    return x_.data<double>()[(o * extent_ + index) * inner_ + i];
  }

 private:
  const Tensor& x_;
  bool flat_ = true;
  int64_t outer_ = 1, inner_ = 1, extent_ = 0, per_row_ = 1;
};

double selected_value_error(const Tensor& engine, const Tensor& twin, const Tensor& x, int axis) {
  OT_CHECK(x.defined() && x.dtype() == DType::Float64, "indices are judged by a float64 input, got ",
           x.defined() ? x.str() : std::string("none"));
  const IndexedValues values(x, engine, axis);
  double worst = 0.0;
  for (int64_t e = 0; e < engine.numel(); ++e) {
    const int64_t i32 = engine.item_as_int(e), i64 = twin.item_as_int(e);
    if (i32 != i64) worst = std::max(worst, difference(values.at(e, i32), values.at(e, i64)));
  }
  return worst / std::max(max_abs(x.data<double>(), x.numel()), kTinyScale);
}

}  // namespace

const char* error_scale_name(ErrorScale scale) {
  switch (scale) {
    case ErrorScale::SumOfTerms: return "sum_of_terms";
    case ErrorScale::OutputScale: return "output_scale";
    case ErrorScale::Exact: return "exact";
    case ErrorScale::SelectedValue: return "selected_value";
  }
  return "unknown";
}

ErrorScale error_scale_of(const Node& node, size_t index, DType output_dtype) {
  const AuditedOutput kind = audited_output(node, index);
  if (kind == AuditedOutput::SelectedIndex) return ErrorScale::SelectedValue;
  if (!is_floating(output_dtype)) return ErrorScale::Exact;
  return is_sum_of_terms_op(node) || kind == AuditedOutput::ChannelSums || has_batch_norm_terms(node, index)
             ? ErrorScale::SumOfTerms
             : ErrorScale::OutputScale;
}

double rounding_step(DType dtype) {
  switch (dtype) {
    case DType::Float64: return std::ldexp(1.0, -52);
    case DType::Float32: return std::ldexp(1.0, -23);
    case DType::Float16: return std::ldexp(1.0, -10);
    case DType::BFloat16: return std::ldexp(1.0, -7);
    default: return 0.0;
  }
}

Tensor widen_to_float64(const Tensor& t) {
  if (!t.defined() || t.is_list() || !is_floating(t.dtype()) || t.dtype() == DType::Float64) return t;
  Tensor out = Tensor::empty(DType::Float64, t.shape());
  double* p = out.data<double>();
  if (t.dtype() == DType::Float32) {
    const float* q = t.data<float>();
    std::copy(q, q + t.numel(), p);
  } else {
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = t.item_as_double(i);  // float16, bfloat16
  }
  return out;
}

Tensor absolute(const Tensor& t) {
  if (!t.defined() || t.dtype() != DType::Float64) return t;
  Tensor out = Tensor::empty(DType::Float64, t.shape());
  const double* q = t.data<double>();
  double* p = out.data<double>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = std::fabs(q[i]);
  return out;
}

double output_error(ErrorScale scale, const Tensor& engine, const Tensor& twin, const Tensor& terms,
                    const Tensor& selected_from, int axis) {
  OT_CHECK(engine.shape() == twin.shape(), "the float64 twin gave ", twin.str(), " where the engine gave ",
           engine.str());
  switch (scale) {
    case ErrorScale::Exact: return exact_error(engine, twin);
    case ErrorScale::SelectedValue: return selected_value_error(engine, twin, selected_from, axis);
    case ErrorScale::OutputScale: return output_scale_error(widen_to_float64(engine), widen_to_float64(twin));
    case ErrorScale::SumOfTerms:
      return sum_of_terms_error(widen_to_float64(engine), widen_to_float64(twin), widen_to_float64(terms));
  }
  return 0.0;
}

}  // namespace onnxtrain::audit
