"""Custom torch.autograd.Functions: the engine cannot run the user's backward yet, so a module that
applies one is refused by name (and falls back loudly, or raises with ONNXTRAIN_FALLBACK=0),
except Functions whose backward is the derivative of their forward, such as checkpoint's."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.utils.checkpoint

import onnxtrain
from conftest import assert_close, assert_engine_ran


class ScaledGradient(torch.autograd.Function):
    """Forward doubles, backward multiplies by 100: not the derivative of the forward."""

    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return grad * 100


class StraightThroughRound(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return torch.round(x)

    @staticmethod
    def backward(ctx, grad):
        return grad


class WithFunction(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn
        self.l = nn.Linear(3, 3)

    def forward(self, x):
        return self.fn.apply(self.l(x))


@pytest.mark.parametrize("fn", [ScaledGradient, StraightThroughRound])
def test_a_custom_function_is_refused_by_name_without_fallback(fn):
    model = onnxtrain.ORTModule(WithFunction(fn))
    with pytest.raises(RuntimeError, match=fn.__qualname__) as info:
        model(torch.randn(2, 3))
    assert "torch.autograd.Function" in str(info.value)


@pytest.mark.parametrize("fn", [ScaledGradient, StraightThroughRound])
def test_a_custom_function_falls_back_loudly_and_trains_correctly(fn, monkeypatch):
    monkeypatch.setenv("ONNXTRAIN_FALLBACK", "1")
    torch.manual_seed(0)
    ref = WithFunction(fn)
    model = onnxtrain.ORTModule(copy.deepcopy(ref))
    x = torch.randn(2, 3)
    with pytest.warns(RuntimeWarning, match=fn.__qualname__):
        out = model(x)
    assert fn.__qualname__ in model.fallback_reason
    out.sum().backward()
    ref(x).sum().backward()
    assert_close(model.module.l.weight.grad, ref.l.weight.grad, "weight grad")
    assert_close(model.module.l.bias.grad, ref.l.bias.grad, "bias grad")


class Checkpointed(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 4))
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        return self.head(torch.utils.checkpoint.checkpoint(self.block, x))


def test_checkpoint_keeps_running_through_the_engine():
    torch.manual_seed(0)
    ref = Checkpointed()
    model = onnxtrain.ORTModule(copy.deepcopy(ref))
    x = torch.randn(3, 4)
    out = model(x)
    assert_engine_ran(out)
    out.sum().backward()
    ref(x.clone().requires_grad_()).sum().backward()
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        assert_close(p.grad, q.grad, name)


def test_the_export_restores_function_apply():
    assert "apply" not in torch.autograd.Function.__dict__
    onnxtrain.ORTModule(nn.Linear(2, 2))(torch.randn(1, 2))
    assert "apply" not in torch.autograd.Function.__dict__
    assert ScaledGradient.apply(torch.ones(1)).item() == 2
