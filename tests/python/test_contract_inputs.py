"""Everything a user may pass to a wrapped module goes through the engine and matches PyTorch."""
import copy

import torch
import torch.nn as nn

import onnxtrain
from conftest import assert_close, assert_engine_ran


def twin(module):
    return onnxtrain.ORTModule(module), copy.deepcopy(module)


def check_call(model, ref, *args, **kwargs):
    """Calls both with the same arguments; compares outputs and the gradients of a weighted sum."""
    ours = model(*args, **kwargs)
    theirs = ref(*args, **kwargs)
    assert_engine_ran(ours)
    assert_close(ours, theirs, "output")
    weights = torch.linspace(-1, 1, ours.numel()).reshape(ours.shape)
    grads = torch.autograd.grad((ours * weights).sum(), list(model.parameters()))
    ref_grads = torch.autograd.grad((theirs * weights).sum(), list(ref.parameters()))
    for g, h in zip(grads, ref_grads):
        assert_close(g, h, "parameter gradient")
    return ours


class Signature(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, a, b=None, *rest, scale=1.0, **extra):
        out = self.fc(a) * scale
        if b is not None:
            out = out + self.fc(b)
        for r in rest:
            out = out - r
        for name in sorted(extra):
            out = out + extra[name] * 0.5
        return out


def x(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def test_positional_keyword_varargs_kwargs_and_defaults():
    model, ref = twin(Signature())
    a, b, r1, r2, e = x(2, 4), x(2, 4, seed=1), x(2, 3, seed=2), x(2, 3, seed=3), x(2, 3, seed=4)
    check_call(model, ref, a)
    check_call(model, ref, a, b)
    check_call(model, ref, a, b=b)
    check_call(model, ref, a, b, r1, r2)
    check_call(model, ref, a, b, r1, scale=2.0, extra_one=e)
    exports = len(model._graphs)
    # The same keywords in another order: the same graph.
    check_call(model, ref, a=a, b=b)
    check_call(model, ref, b=b, a=a)
    assert len(model._graphs) == exports + 1


class Nested(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, batch):
        out = self.fc(batch["x"])
        for t in batch["list"]:
            out = out * t
        first, (second, maybe) = batch["pair"]
        out = out + first - second
        if maybe is not None:
            out = out + maybe
        return out


def test_none_and_nested_containers():
    model, ref = twin(Nested())
    batch = {"x": x(3, 4), "list": [x(3, 4, seed=1), x(1, 4, seed=2)], "pair": (x(3, 4, seed=3), (x(4, seed=4), None))}
    check_call(model, ref, batch)
    batch["pair"] = (x(3, 4, seed=3), (x(4, seed=4), x(3, 4, seed=5)))
    check_call(model, ref, batch)
    assert len(model._graphs) == 2  # None vs a tensor is a different structure


class Numbers(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x, scale, offset, double, mode):
        out = self.fc(x) * scale + offset
        if double:  # a bool selects a branch
            out = out * 2
        if mode == "neg":  # so does a string
            out = -out
        return out


def test_int_and_float_values_change_without_reexport_but_bools_and_strings_reexport():
    model, ref = twin(Numbers())
    data = x(2, 4)
    check_call(model, ref, data, 2.0, 3, False, "pos")
    check_call(model, ref, data, -1.5, 7, False, "pos")
    check_call(model, ref, data, 0.25, -2, False, "pos")
    assert len(model._graphs) == 1
    check_call(model, ref, data, 0.25, -2, True, "pos")
    check_call(model, ref, data, 0.25, -2, True, "neg")
    assert len(model._graphs) == 3


class Repeats(nn.Module):
    """Uses an int as a Python loop count: the trace bakes it in, so each value needs its export."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x, times):
        for _ in range(times):
            x = torch.tanh(self.fc(x))
        return x


def test_a_number_the_trace_bakes_in_still_gives_the_right_result():
    model, ref = twin(Repeats())
    data = x(2, 4)
    check_call(model, ref, data, 1)
    check_call(model, ref, data, 3)
    check_call(model, ref, data, 1)


class Kinds(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x, mask, pixels, counts):
        h = self.fc(x)
        h = torch.where(mask, h, -h)
        return h * pixels.to(h.dtype) / 255 + counts.to(h.dtype)


def test_non_contiguous_bool_uint8_and_int64_tensors():
    model, ref = twin(Kinds())
    data = x(4, 3).t()  # non-contiguous
    assert not data.is_contiguous()
    mask = x(3, 4, seed=1) > 0
    pixels = torch.randint(0, 256, (3, 4), dtype=torch.uint8, generator=torch.Generator().manual_seed(2))
    counts = torch.randint(-5, 5, (3, 4), generator=torch.Generator().manual_seed(3))
    check_call(model, ref, data, mask, pixels, counts)
    check_call(model, ref, data.contiguous(), ~mask, pixels, counts)
