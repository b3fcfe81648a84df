"""Side-by-side training of a module through onnxtrain and in PyTorch eager."""
import copy

import torch

import onnxtrain
from conftest import assert_close, assert_engine_ran


def train_and_compare(module, make_batch, loss_fn=None, steps=5, lr=0.05, momentum=0.9, input_grad=False,
                      optimizer="sgd"):
    """Trains `module` and an identical copy for `steps` optimizer steps, comparing outputs, the
    loss, every parameter gradient, input gradients, parameters after the update and buffers.

    make_batch(step) returns (inputs tuple, target or None); loss_fn(output, target) gives the
    loss, or the module's output is the loss when loss_fn is None."""
    ref = copy.deepcopy(module)
    model = onnxtrain.ORTModule(module)
    if optimizer == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
        ref_opt = torch.optim.SGD(ref.parameters(), lr=lr, momentum=momentum)
    else:
        opt = torch.optim.Adam(model.parameters(), lr=lr)
        ref_opt = torch.optim.Adam(ref.parameters(), lr=lr)
    for step in range(steps):
        inputs, target = make_batch(step)
        ours_in = [t.clone().requires_grad_(input_grad and t.is_floating_point()) for t in inputs]
        ref_in = [t.clone().requires_grad_(input_grad and t.is_floating_point()) for t in inputs]
        out = model(*ours_in)
        ref_out = ref(*ref_in)
        first = out[0] if isinstance(out, (tuple, list)) else out
        assert_engine_ran(first)
        if isinstance(out, (tuple, list)):
            for k, (a, b) in enumerate(zip(out, ref_out)):
                assert_close(a, b, f"step {step} output {k}")
        else:
            assert_close(out, ref_out, f"step {step} output")
        loss = out if loss_fn is None else loss_fn(out, target)
        ref_loss = ref_out if loss_fn is None else loss_fn(ref_out, target)
        assert_close(loss, ref_loss, f"step {step} loss")
        opt.zero_grad()
        ref_opt.zero_grad()
        loss.backward()
        ref_loss.backward()
        for (name, p), q in zip(module.named_parameters(), ref.parameters()):
            if q.grad is None:
                assert p.grad is None or not p.grad.any(), f"step {step}: {name} has a gradient, PyTorch has none"
            else:
                assert p.grad is not None, f"step {step}: {name} has no gradient"
                assert_close(p.grad, q.grad, f"step {step} grad of {name}")
        if input_grad:
            for k, (a, b) in enumerate(zip(ours_in, ref_in)):
                if b.grad is not None:
                    assert_close(a.grad, b.grad, f"step {step} grad of input {k}")
        opt.step()
        ref_opt.step()
        for (name, p), q in zip(module.named_parameters(), ref.parameters()):
            assert_close(p, q, f"step {step} {name} after the update")
        for (name, b), c in zip(module.named_buffers(), ref.buffers()):
            if b.is_floating_point():
                assert_close(b, c, f"step {step} buffer {name}")
            else:
                assert torch.equal(b, c), f"step {step} buffer {name}: {b} vs {c}"
    return model, ref
