"""ORTModuleFunction: the one autograd node through which a wrapped module's forward and
backward run in the engine."""
import torch


class ORTModuleFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, run, *tensors):
        outputs, call = run.forward(tensors)
        ctx.run = run
        ctx.call = call  # opaque handle: the stash stays in C++
        ctx.num_inputs = len(tensors)
        ctx.set_materialize_grads(False)  # a missing output gradient reaches C++ as None, filled there
        if run.non_differentiable_positions:
            ctx.mark_non_differentiable(*(outputs[i] for i in run.non_differentiable_positions))
        # Inputs, parameters and outputs that backward reads: saving them lets autograd detect
        # in-place changes and raise eager's error when backward unpacks them.
        ctx.save_for_backward(*(tensors[i] for i in run.stashed_input_positions),
                              *(outputs[i] for i in run.stashed_output_positions))
        return tuple(outputs)

    @staticmethod
    def backward(ctx, *output_grads):
        ctx.saved_tensors  # noqa: B018 - raises if a saved output was modified in place
        grads = ctx.run.backward(ctx.call, output_grads)
        result = [None] * (1 + ctx.num_inputs)
        for grad, pos in zip(grads, ctx.run.wrt_positions):
            result[1 + pos] = grad
        ctx.call = None  # free the stash handle now, not when the graph is collected
        return tuple(result)
