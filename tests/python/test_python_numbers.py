"""Python int and float arguments: the module's code sees the numbers the user passed. They travel
as 0-d tensor inputs (so a new value needs no new export) only where that changes nothing the
code sees; otherwise they are baked into the export, and each value exports again."""
import copy

import pytest
import torch
import torch.nn as nn

import onnxtrain
from conftest import assert_close, assert_engine_ran


def x(*shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def check_call(model, ref, *args):
    ours, theirs = model(*args), ref(*args)
    assert_engine_ran(ours)
    assert_close(ours, theirs, "output")
    grads = torch.autograd.grad(ours.sum(), list(model.parameters()))
    ref_grads = torch.autograd.grad(theirs.sum(), list(ref.parameters()))
    for g, h in zip(grads, ref_grads):
        assert_close(g, h, "parameter gradient")
    return ours


class AssertsInt(nn.Module):
    """The issue's module: it checks the type, and counts with the number in Python."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x, n):
        assert isinstance(n, int)
        return self.fc(x) * float(len(list(range(n))))


def test_a_module_that_checks_for_an_int_gets_an_int():
    module = AssertsInt()
    model, ref = onnxtrain.ORTModule(module), copy.deepcopy(module)
    check_call(model, ref, x(2, 4), 3)
    check_call(model, ref, x(2, 4), 5)  # a new value: a new export with it baked in
    check_call(model, ref, x(5, 4, seed=1), 3)
    assert model._scalars_as_tensors is False


class PicksByType(nn.Module):
    """No error and no tracer warning: the type alone picks the result."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x, n):
        scale = 2.0 if isinstance(n, int) else 3.0
        return self.fc(x) * scale + n


def test_a_branch_on_the_type_of_a_number_follows_eager():
    module = PicksByType()
    model, ref = onnxtrain.ORTModule(module), copy.deepcopy(module)
    for n in (1, 4):
        check_call(model, ref, x(3, 4), n)


class TakesInt(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, k):
        assert isinstance(k, int), f"the Function got {type(k).__name__}"
        ctx.k = k
        return x * k

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.k, None


class WithFunction(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x, k):
        return TakesInt.apply(self.fc(x), k)


def test_a_custom_function_gets_the_int_itself():
    module = WithFunction()
    model, ref = onnxtrain.ORTModule(module), copy.deepcopy(module)
    check_call(model, ref, x(2, 4), 3)
    check_call(model, ref, x(2, 4), 7)


class Scales(nn.Module):
    def __init__(self, dtype=torch.float32):
        super().__init__()
        self.fc = nn.Linear(4, 3).to(dtype)

    def forward(self, x, scale, shift):
        return self.fc(x) * scale + shift


def test_numbers_that_change_nothing_stay_graph_inputs():
    module = Scales()
    model, ref = onnxtrain.ORTModule(module), copy.deepcopy(module)
    for scale, shift in ((2.0, 1), (-0.5, 3), (0.1, -7)):
        check_call(model, ref, x(2, 4), scale, shift)
    assert model._scalars_as_tensors is True
    assert len(model._graphs) == 1  # one export served every value


def test_a_float_keeps_its_double_value_in_a_float64_module():
    """A 0-d float32 tensor would round 0.1 before a float64 module multiplies by it."""
    module = Scales(torch.float64)
    model, ref = onnxtrain.ORTModule(module), copy.deepcopy(module)
    data = x(2, 4, dtype=torch.float64)
    ours, theirs = model(data, 0.1, 0), ref(data, 0.1, 0)
    assert_engine_ran(ours)
    torch.testing.assert_close(ours, theirs, rtol=1e-13, atol=0)


class FailsOnInts(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x, n):
        if isinstance(n, int):
            raise ValueError("this module takes no int")
        return self.fc(x)


def test_an_error_says_eager_fails_only_when_eager_failed_on_the_users_own_call():
    model = onnxtrain.ORTModule(FailsOnInts())
    with pytest.raises(Exception) as raised:
        model(x(2, 4), 3)
    message = str(raised.value)
    assert "this module takes no int" in message
    assert "expects float32 inputs" not in message  # the int is no dtype mistake of the user's


def test_the_dtype_error_still_names_a_real_mismatch():
    model = onnxtrain.ORTModule(nn.Linear(4, 3))
    with pytest.raises(TypeError, match="Eager PyTorch fails on this call too"):
        model(x(2, 4, dtype=torch.float64))
