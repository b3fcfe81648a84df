// The gradient of ops that ONNX calls non-differentiable and PyTorch differentiates as constant
// zero (ONNXTRAIN_ZERO_GRADIENT): zeros for every input that needs a gradient.
#include "autodiff/grad_builder.h"
#include "opdef/op_registry.h"

namespace onnxtrain {

void zero_gradient_rule(GradBuilder& g) {
  for (int i = 0; i < g.num_inputs(); ++i)
    if (g.needs_input_grad(i)) g.set_input_grad(i, g.zeros_like(g.input(i)));
}

}  // namespace onnxtrain
