#include "optim/fused_step.h"

#include <cmath>

#include "core/error.h"
#include "runtime/thread_pool.h"

namespace onnxtrain {
namespace {

// Splits all tensors into chunks of about kChunk elements so that threads share the work evenly
// whatever the mix of large and small parameters.
constexpr int64_t kChunk = 1 << 16;

struct Chunk {
  size_t tensor;
  int64_t begin, end;
};

std::vector<Chunk> chunks_of(const TensorList& t) {
  OT_CHECK(t.params.size() == t.grads.size() && t.params.size() == t.numel.size(),
           "optimizer step: parameter, gradient and size lists differ in length");
  std::vector<Chunk> out;
  for (size_t i = 0; i < t.params.size(); ++i)
    for (int64_t b = 0; b < t.numel[i]; b += kChunk) out.push_back({i, b, std::min(t.numel[i], b + kChunk)});
  return out;
}

template <typename F>
void for_chunks(ThreadPool& pool, const std::vector<Chunk>& chunks, F&& f) {
  pool.parallel_for(static_cast<int64_t>(chunks.size()), 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) f(chunks[static_cast<size_t>(c)]);
  });
}

}  // namespace

void sgd_step(ThreadPool& pool, const TensorList& t, const std::vector<float*>& bufs,
              const std::vector<uint8_t>& first_step, const SgdOptions& o) {
  const bool use_momentum = o.momentum != 0.0f;
  if (use_momentum)
    OT_CHECK(bufs.size() == t.params.size() && first_step.size() == t.params.size(),
             "SGD step: momentum buffers missing");
  const float neg_lr = static_cast<float>(-o.lr), wd = static_cast<float>(o.weight_decay),
              m = static_cast<float>(o.momentum), damp = static_cast<float>(1.0 - o.dampening);
  for_chunks(pool, chunks_of(t), [&](const Chunk& c) {
    float* p = t.params[c.tensor];
    const float* g = t.grads[c.tensor];
    float* b = use_momentum ? bufs[c.tensor] : nullptr;
    const bool first = use_momentum && first_step[c.tensor];
    for (int64_t i = c.begin; i < c.end; ++i) {
      float d = o.maximize ? -g[i] : g[i];
      if (wd != 0.0f) d = d + wd * p[i];
      if (use_momentum) {
        b[i] = first ? d : b[i] * m + damp * d;
        d = o.nesterov ? d + m * b[i] : b[i];
      }
      p[i] = p[i] + neg_lr * d;
    }
  });
}

void adam_step(ThreadPool& pool, const TensorList& t, const std::vector<float*>& exp_avg,
               const std::vector<float*>& exp_avg_sq, const std::vector<float*>& max_exp_avg_sq,
               const std::vector<double>& steps, const AdamOptions& o) {
  OT_CHECK(exp_avg.size() == t.params.size() && exp_avg_sq.size() == t.params.size() &&
               steps.size() == t.params.size() && (!o.amsgrad || max_exp_avg_sq.size() == t.params.size()),
           "Adam step: state lists differ in length from the parameters");
  const float b1 = static_cast<float>(o.beta1), b2 = static_cast<float>(o.beta2);
  const float one_minus_b1 = static_cast<float>(1.0 - o.beta1), one_minus_b2 = static_cast<float>(1.0 - o.beta2);
  const float wd = static_cast<float>(o.weight_decay), eps = static_cast<float>(o.eps);
  const float decay = static_cast<float>(1.0 - o.lr * o.weight_decay);
  for_chunks(pool, chunks_of(t), [&](const Chunk& c) {
    // Per-tensor scalars exactly as torch computes them, in double then rounded where it rounds.
    const double step = steps[c.tensor];
    const double bias_correction1 = 1.0 - std::pow(o.beta1, step);
    const double bias_correction2 = 1.0 - std::pow(o.beta2, step);
    const float step_size = static_cast<float>(o.lr / bias_correction1);
    const float bc2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
    float* p = t.params[c.tensor];
    const float* g = t.grads[c.tensor];
    float* m = exp_avg[c.tensor];
    float* v = exp_avg_sq[c.tensor];
    float* vmax = o.amsgrad ? max_exp_avg_sq[c.tensor] : nullptr;
    for (int64_t i = c.begin; i < c.end; ++i) {
      float grad = o.maximize ? -g[i] : g[i];
      if (o.decoupled_weight_decay) p[i] = p[i] * decay;
      else if (wd != 0.0f) grad = grad + wd * p[i];
      m[i] = m[i] * b1 + one_minus_b1 * grad;
      v[i] = v[i] * b2 + one_minus_b2 * (grad * grad);
      float second = v[i];
      if (vmax) {
        vmax[i] = std::max(vmax[i], v[i]);
        second = vmax[i];
      }
      const float denom = std::sqrt(second) / bc2_sqrt + eps;
      p[i] = p[i] + (-step_size) * (m[i] / denom);
    }
  });
}

}  // namespace onnxtrain
