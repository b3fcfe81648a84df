#pragma once
// Fused multi-tensor optimizer steps: one pass over every parameter, its gradient and its state,
// split across the engine's thread pool. The arithmetic follows torch.optim (1.13) operation by
// operation, so trajectories match it to rounding.
#include <cstdint>
#include <vector>

namespace onnxtrain {

class ThreadPool;

// float32 buffers of `numel[i]` elements; state buffers may alias nothing else.
struct TensorList {
  std::vector<float*> params;
  std::vector<const float*> grads;
  std::vector<int64_t> numel;
};

// Hyperparameters are Python floats (double); each is rounded to float32 where torch rounds it.
struct SgdOptions {
  double lr = 0, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false, maximize = false;
};

// `momentum_buffers[i]` may be null when momentum is 0. `first_step[i]` marks buffers that torch
// would create now as a copy of the update direction.
void sgd_step(ThreadPool& pool, const TensorList& t, const std::vector<float*>& momentum_buffers,
              const std::vector<uint8_t>& first_step, const SgdOptions& o);

struct AdamOptions {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  bool amsgrad = false, maximize = false, decoupled_weight_decay = false;  // decoupled: AdamW
};

// `steps[i]` is the step count after this update (torch increments it first).
void adam_step(ThreadPool& pool, const TensorList& t, const std::vector<float*>& exp_avg,
               const std::vector<float*>& exp_avg_sq, const std::vector<float*>& max_exp_avg_sq,
               const std::vector<double>& steps, const AdamOptions& o);

}  // namespace onnxtrain
