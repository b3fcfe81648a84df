#include "optim/fused_step.h"

#include <algorithm>
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

// Runs f on every chunk, tasks of kChunk elements at least: a small model's few small tensors
// (a 10-element bias is a chunk) run on the calling thread, since waking another thread for
// microseconds of work costs more than it saves, and much more when that core is busy elsewhere.
template <typename F>
void for_chunks(ThreadPool& pool, const std::vector<Chunk>& chunks, F&& f) {
  int64_t elements = 0;
  for (const Chunk& c : chunks) elements += c.end - c.begin;
  const int64_t count = static_cast<int64_t>(chunks.size());
  const int64_t grain = std::max<int64_t>(1, count * kChunk / std::max<int64_t>(elements, 1));
  pool.parallel_for(count, grain, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) f(chunks[static_cast<size_t>(c)]);
  });
}


// The update of one chunk, with the options as template flags so that the inner loop has no
// branches and vectorizes.
template <bool kMomentum, bool kFirst, bool kNesterov, bool kDecay, bool kMaximize>
void sgd_chunk(float* __restrict p, const float* __restrict g, float* __restrict b, int64_t n, float neg_lr,
               float wd, float m, float damp) {
  for (int64_t i = 0; i < n; ++i) {
    float d = kMaximize ? -g[i] : g[i];
    if (kDecay) d = d + wd * p[i];
    if (kMomentum) {
      const float buf = kFirst ? d : b[i] * m + damp * d;
      b[i] = buf;
      d = kNesterov ? d + m * buf : buf;
    }
    p[i] = p[i] + neg_lr * d;
  }
}

using SgdChunkFn = void (*)(float*, const float*, float*, int64_t, float, float, float, float);

template <bool kMomentum, bool kFirst, bool kNesterov, bool kDecay>
SgdChunkFn pick_maximize(bool maximize) {
  return maximize ? &sgd_chunk<kMomentum, kFirst, kNesterov, kDecay, true>
                  : &sgd_chunk<kMomentum, kFirst, kNesterov, kDecay, false>;
}

template <bool kMomentum, bool kFirst, bool kNesterov>
SgdChunkFn pick_decay(bool decay, bool maximize) {
  return decay ? pick_maximize<kMomentum, kFirst, kNesterov, true>(maximize)
               : pick_maximize<kMomentum, kFirst, kNesterov, false>(maximize);
}

SgdChunkFn pick_sgd(bool momentum, bool first, bool nesterov, bool decay, bool maximize) {
  if (!momentum) return pick_decay<false, false, false>(decay, maximize);
  if (first) return nesterov ? pick_decay<true, true, true>(decay, maximize) : pick_decay<true, true, false>(decay, maximize);
  return nesterov ? pick_decay<true, false, true>(decay, maximize) : pick_decay<true, false, false>(decay, maximize);
}

}  // namespace

void sgd_step(ThreadPool& pool, const TensorList& t, const std::vector<float*>& bufs,
              const std::vector<uint8_t>& first_step, const SgdOptions& o) {
  const bool use_momentum = o.momentum != 0.0;
  if (use_momentum)
    OT_CHECK(bufs.size() == t.params.size() && first_step.size() == t.params.size(),
             "SGD step: momentum buffers missing");
  const float neg_lr = static_cast<float>(-o.lr), wd = static_cast<float>(o.weight_decay),
              m = static_cast<float>(o.momentum), damp = static_cast<float>(1.0 - o.dampening);
  const bool decay = o.weight_decay != 0.0;
  const SgdChunkFn steady = pick_sgd(use_momentum, false, o.nesterov, decay, o.maximize);
  const SgdChunkFn first = pick_sgd(use_momentum, true, o.nesterov, decay, o.maximize);
  for_chunks(pool, chunks_of(t), [&](const Chunk& c) {
    const SgdChunkFn fn = use_momentum && first_step[c.tensor] ? first : steady;
    float* b = use_momentum ? bufs[c.tensor] + c.begin : nullptr;
    fn(t.params[c.tensor] + c.begin, t.grads[c.tensor] + c.begin, b, c.end - c.begin, neg_lr, wd, m, damp);
  });
}

namespace {

struct AdamScalars {
  float b1, b2, one_minus_b1, one_minus_b2, wd, eps, decay, step_size, bc2_sqrt;
};

template <bool kDecoupled, bool kDecay, bool kAmsgrad, bool kMaximize>
void adam_chunk(float* __restrict p, const float* __restrict g, float* __restrict m, float* __restrict v,
                float* __restrict vmax, int64_t n, const AdamScalars& s) {
  for (int64_t i = 0; i < n; ++i) {
    float grad = kMaximize ? -g[i] : g[i];
    if (kDecoupled) p[i] = p[i] * s.decay;
    else if (kDecay) grad = grad + s.wd * p[i];
    m[i] = m[i] * s.b1 + s.one_minus_b1 * grad;
    v[i] = v[i] * s.b2 + s.one_minus_b2 * (grad * grad);
    float second = v[i];
    if (kAmsgrad) {
      vmax[i] = std::max(vmax[i], v[i]);
      second = vmax[i];
    }
    const float denom = std::sqrt(second) / s.bc2_sqrt + s.eps;
    p[i] = p[i] + (-s.step_size) * (m[i] / denom);
  }
}

using AdamChunkFn = void (*)(float*, const float*, float*, float*, float*, int64_t, const AdamScalars&);

template <bool kDecoupled, bool kDecay>
AdamChunkFn pick_adam_flags(bool amsgrad, bool maximize) {
  if (amsgrad) return maximize ? &adam_chunk<kDecoupled, kDecay, true, true> : &adam_chunk<kDecoupled, kDecay, true, false>;
  return maximize ? &adam_chunk<kDecoupled, kDecay, false, true> : &adam_chunk<kDecoupled, kDecay, false, false>;
}

AdamChunkFn pick_adam(bool decoupled, bool decay, bool amsgrad, bool maximize) {
  if (decoupled) return pick_adam_flags<true, false>(amsgrad, maximize);
  return decay ? pick_adam_flags<false, true>(amsgrad, maximize) : pick_adam_flags<false, false>(amsgrad, maximize);
}

}  // namespace

void adam_step(ThreadPool& pool, const TensorList& t, const std::vector<float*>& exp_avg,
               const std::vector<float*>& exp_avg_sq, const std::vector<float*>& max_exp_avg_sq,
               const std::vector<double>& steps, const AdamOptions& o) {
  OT_CHECK(exp_avg.size() == t.params.size() && exp_avg_sq.size() == t.params.size() &&
               steps.size() == t.params.size() && (!o.amsgrad || max_exp_avg_sq.size() == t.params.size()),
           "Adam step: state lists differ in length from the parameters");
  AdamScalars base{static_cast<float>(o.beta1),
                   static_cast<float>(o.beta2),
                   static_cast<float>(1.0 - o.beta1),
                   static_cast<float>(1.0 - o.beta2),
                   static_cast<float>(o.weight_decay),
                   static_cast<float>(o.eps),
                   static_cast<float>(1.0 - o.lr * o.weight_decay),
                   0.0f,
                   0.0f};
  const AdamChunkFn fn = pick_adam(o.decoupled_weight_decay, o.weight_decay != 0.0, o.amsgrad, o.maximize);
  for_chunks(pool, chunks_of(t), [&](const Chunk& c) {
    // Per-tensor scalars exactly as torch computes them: in double, rounded where it rounds.
    AdamScalars s = base;
    const double step = steps[c.tensor];
    s.step_size = static_cast<float>(o.lr / (1.0 - std::pow(o.beta1, step)));
    s.bc2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(o.beta2, step)));
    float* vmax = o.amsgrad ? max_exp_avg_sq[c.tensor] + c.begin : nullptr;
    fn(t.params[c.tensor] + c.begin, t.grads[c.tensor] + c.begin, exp_avg[c.tensor] + c.begin,
       exp_avg_sq[c.tensor] + c.begin, vmax, c.end - c.begin, s);
  });
}

}  // namespace onnxtrain
