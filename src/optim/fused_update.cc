#include "optim/fused_update.h"

#include "core/error.h"

namespace onnxtrain {
namespace {

void check_update(const FusedUpdate& u, const std::vector<Tensor>& grads, const std::vector<std::string>& wrt) {
  OT_CHECK(u.params.size() == u.grad_index.size() && u.params.size() == u.numel.size(),
           "fused update: parameter, gradient index and size lists differ in length");
  for (size_t i = 0; i < u.params.size(); ++i) {
    const int at = u.grad_index[i];
    OT_CHECK(at >= 0 && static_cast<size_t>(at) < grads.size(), "fused update: gradient index ", at,
             " is outside the step's ", grads.size(), " gradients");
    const Tensor& g = grads[static_cast<size_t>(at)];
    const std::string& name = static_cast<size_t>(at) < wrt.size() ? wrt[static_cast<size_t>(at)] : "?";
    OT_CHECK(g.defined(), "fused update: no gradient reached parameter '", name, "', which the optimizer step expects");
    OT_CHECK(g.dtype() == DType::Float32, "fused update: the gradient of '", name, "' is ", dtype_name(g.dtype()),
             "; the fused optimizer updates float32 parameters");
    OT_CHECK(g.numel() == u.numel[i], "fused update: the gradient of '", name, "' has ", g.numel(),
             " elements, its parameter ", u.numel[i]);
  }
  if (u.kind == FusedUpdate::Kind::Sgd && u.sgd.momentum != 0)
    OT_CHECK(u.momentum_buffers.size() == u.params.size() && u.first_step.size() == u.params.size(),
             "fused update: SGD with momentum needs a buffer and a first-step flag per parameter");
  if (u.kind == FusedUpdate::Kind::Adam) {
    OT_CHECK(u.exp_avg.size() == u.params.size() && u.exp_avg_sq.size() == u.params.size() &&
                 u.steps.size() == u.params.size(),
             "fused update: Adam needs both moments and a step count per parameter");
    OT_CHECK(!u.adam.amsgrad || u.max_exp_avg_sq.size() == u.params.size(),
             "fused update: amsgrad needs a running maximum per parameter");
  }
}

struct Span {
  const char *begin, *end;
};

void add_spans(std::vector<Span>& out, const std::vector<float*>& buffers, const std::vector<int64_t>& numel) {
  for (size_t i = 0; i < buffers.size(); ++i)
    if (buffers[i]) {
      const char* b = reinterpret_cast<const char*>(buffers[i]);
      out.push_back({b, b + numel[i] * static_cast<int64_t>(sizeof(float))});
    }
}

// Everything the updates write: parameters and optimizer state.
std::vector<Span> written_spans(const std::vector<FusedUpdate>& updates) {
  std::vector<Span> out;
  for (const FusedUpdate& u : updates) {
    add_spans(out, u.params, u.numel);
    add_spans(out, u.momentum_buffers, u.numel);
    add_spans(out, u.exp_avg, u.numel);
    add_spans(out, u.exp_avg_sq, u.numel);
    add_spans(out, u.max_exp_avg_sq, u.numel);
  }
  return out;
}

bool overlaps(const Tensor& g, const std::vector<Span>& spans) {
  const char* b = static_cast<const char*>(g.raw_data());
  const char* e = b + g.nbytes();
  for (const Span& s : spans)
    if (b < s.end && s.begin < e) return true;
  return false;
}

}  // namespace

void apply_fused_updates(ThreadPool& pool, const std::vector<FusedUpdate>& updates, std::vector<Tensor>& grads,
                         const std::vector<std::string>& wrt) {
  for (const FusedUpdate& u : updates) check_update(u, grads, wrt);
  const std::vector<Span> written = written_spans(updates);
  for (const FusedUpdate& u : updates)
    for (int at : u.grad_index) {
      Tensor& g = grads[static_cast<size_t>(at)];
      if (overlaps(g, written)) g = g.clone();
    }
  for (const FusedUpdate& u : updates) {
    TensorList t{u.params, {}, u.numel};
    t.grads.reserve(u.grad_index.size());
    for (int at : u.grad_index) t.grads.push_back(grads[static_cast<size_t>(at)].data<float>());
    if (u.kind == FusedUpdate::Kind::Sgd)
      sgd_step(pool, t, u.momentum_buffers, u.first_step, u.sgd);
    else
      adam_step(pool, t, u.exp_avg, u.exp_avg_sq, u.max_exp_avg_sq, u.steps, u.adam);
  }
}

}  // namespace onnxtrain
