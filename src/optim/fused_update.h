#pragma once
// An optimizer update whose gradients are not in memory yet: they are the wrt gradients of the
// training step that runs just before it. The whole-step path (onnxtrain.TrainStep) hands the
// engine its forward inputs and these updates, and gets back the loss: forward, backward and the
// fused update in one call, with no trip through PyTorch's autograd in between.
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "optim/fused_step.h"

namespace onnxtrain {

struct FusedUpdate {
  enum class Kind { Sgd, Adam };
  Kind kind = Kind::Sgd;
  std::vector<float*> params;
  std::vector<int> grad_index;  // per parameter: its position among the step's wrt gradients
  std::vector<int64_t> numel;

  SgdOptions sgd;
  std::vector<float*> momentum_buffers;
  std::vector<uint8_t> first_step;

  AdamOptions adam;
  std::vector<float*> exp_avg, exp_avg_sq, max_exp_avg_sq;
  std::vector<double> steps;
};

// Checks every update against the gradients it reads (present, float32, the parameter's element
// count) before it changes anything, so a mismatch leaves every parameter as it was; `wrt` names
// the gradients' values for the error. A gradient that shares memory with anything an update
// writes (a graph may pass a parameter through as another's gradient) is first replaced in
// `grads` by a copy, so that no update reads what another has already changed. Then applies the
// updates in order.
void apply_fused_updates(ThreadPool& pool, const std::vector<FusedUpdate>& updates, std::vector<Tensor>& grads,
                         const std::vector<std::string>& wrt);

}  // namespace onnxtrain
