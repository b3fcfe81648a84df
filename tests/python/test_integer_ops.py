"""Integer ops as torch users write them, against eager, with fallback off: bitwise and/or/xor/not
and shifts (torch 1.13 exports none or with other semantics; onnxtrain's symbolics write its own
BitwiseAnd/Or/Xor/Not, BitShift and FloorDiv), floor and truncating division, remainder and fmod,
abs/neg/min/max/clamp, comparisons, and sum/prod/cumsum/argmax over every integer type torch has.
Each model also returns a float output that requires grad, so the engine's autograd node proves
the whole graph ran in the engine."""
import pytest
import torch

import onnxtrain
from conftest import assert_engine_ran

INT_TYPES = [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8]
IDS = [str(t).replace("torch.", "") for t in INT_TYPES]


class IntModel(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn
        self.scale = torch.nn.Parameter(torch.ones(1))

    def forward(self, w, *ints):
        return w * self.scale, self.fn(*ints)


def run_both(fn, *ints):
    model = onnxtrain.ORTModule(IntModel(fn))
    marker, out = model(torch.ones(2), *ints)
    assert_engine_ran(marker)
    expected = fn(*ints)
    outs = out if isinstance(out, tuple) else (out,)
    exps = expected if isinstance(expected, tuple) else (expected,)
    for o, e in zip(outs, exps):
        assert o.dtype == e.dtype, (o.dtype, e.dtype)
        assert o.shape == e.shape
        assert torch.equal(o, e), f"engine {o} vs eager {e}"


def values(dtype, shape=(3, 4), seed=0):
    g = torch.Generator().manual_seed(seed)
    info = torch.iinfo(dtype)
    low, high = max(info.min, -1000), min(info.max, 1000)
    v = torch.randint(low, high + 1, shape, generator=g, dtype=torch.int64).to(dtype)
    flat = v.view(-1)
    flat[0], flat[1] = info.min, info.max  # the extremes, where wrapping and signs show
    return v


@pytest.mark.parametrize("dtype", INT_TYPES, ids=IDS)
def test_bitwise_operators_with_broadcasting(dtype):
    a, b = values(dtype), values(dtype, (4,), seed=1)
    run_both(lambda a, b: (a & b, a | b, a ^ b, ~a), a, b)
    run_both(lambda a, b: (torch.bitwise_and(a, b), torch.bitwise_or(a, b), torch.bitwise_xor(a, b),
                           torch.bitwise_not(b)), a, b)
    run_both(lambda a: (a & 5, a | 3, a ^ 6), a)  # Python numbers keep the tensor's type


def test_bitwise_on_bool_and_mixed_integer_types():
    a = torch.tensor([[True, False, True]])
    b = torch.tensor([[True], [False]])
    run_both(lambda a, b: (a & b, a | b, a ^ b, ~a), a, b)
    run_both(lambda a, b: a & b, values(torch.int8), values(torch.int32))  # promoted to int32


@pytest.mark.parametrize("dtype", [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8], ids=IDS)
def test_shifts_are_arithmetic_on_signed_types(dtype):
    bits = torch.iinfo(dtype).bits
    x = values(dtype)
    amounts = torch.arange(12).remainder(bits).view(3, 4).to(dtype)
    run_both(lambda x, s: (x << s, x >> s, x >> 1, x << 2), x, amounts)
    run_both(lambda x: (torch.bitwise_left_shift(x, 3), torch.bitwise_right_shift(x, 2)), x)


@pytest.mark.parametrize("dtype", INT_TYPES, ids=IDS)
def test_division_remainder_and_fmod(dtype):
    a = values(dtype)
    b = values(dtype, seed=2)
    b[b == 0] = 3
    if dtype.is_signed:
        b.view(-1)[0] = 7  # INT_MIN // -1 overflows differently per library
    run_both(lambda a, b: (a // b, torch.div(a, b, rounding_mode="floor"), torch.div(a, b, rounding_mode="trunc"),
                           a % b, torch.remainder(a, b), torch.fmod(a, b)), a, b)
    run_both(lambda a: (a // 3, a % 5, torch.fmod(a, 4)), a)
    if dtype.is_signed:
        run_both(lambda a: (a // -3, a % -5, torch.fmod(a, -4)), a)


def test_true_division_of_integers_is_float():
    a, b = values(torch.int64), values(torch.int64, seed=3)
    b[b == 0] = 1
    model = onnxtrain.ORTModule(IntModel(lambda a, b: a / b))
    marker, out = model(torch.ones(2), a, b)
    assert_engine_ran(marker)
    torch.testing.assert_close(out, a / b)


def test_integer_division_by_zero_raises():
    for fn in (lambda a, b: a // b, lambda a, b: torch.div(a, b, rounding_mode="trunc"), lambda a, b: a % b):
        model = onnxtrain.ORTModule(IntModel(fn))
        model(torch.ones(2), torch.tensor([4, 5]), torch.tensor([1, 2]))  # exported on a valid call
        with pytest.raises(Exception, match="division by zero"):
            model(torch.ones(2), torch.tensor([4, 5]), torch.tensor([1, 0]))


@pytest.mark.parametrize("dtype", INT_TYPES, ids=IDS)
def test_abs_neg_min_max_clamp_and_comparisons(dtype):
    a, b = values(dtype), values(dtype, seed=4)
    if dtype.is_signed:
        a.view(-1)[0] = -5  # abs/neg of INT_MIN wrap
        run_both(lambda a: (a.abs(), -a), a)
    run_both(lambda a, b: (torch.minimum(a, b), torch.maximum(a, b), a.clamp(-3 if dtype.is_signed else 2, 100),
                           a.clamp(min=7), a.clamp(max=50)), a, b)
    run_both(lambda a, b: (a < b, a <= b, a > b, a >= b, a == b, a != b, a > 3), a, b)
    run_both(lambda a, b: torch.where(a > b, a, b), a, b)


@pytest.mark.parametrize("dtype", INT_TYPES, ids=IDS)
def test_reductions_and_cumsum_widen_as_eager(dtype):
    a = values(dtype, (3, 5))
    small = (a.to(torch.int64).remainder(5) - (2 if dtype.is_signed else 0)).to(dtype)
    run_both(lambda a: (a.sum(), a.sum(1), a.sum(0, keepdim=True), a.cumsum(1), a.cumsum(0)), a)
    run_both(lambda s: (s.prod(1), s.prod()), small)
    run_both(lambda a: (a.argmax(1), a.argmin(0), a.argmax(), a.max(1)[0], a.amin(0), a.max()), a)
    run_both(lambda b: (b.sum(), b.cumsum(0)), a > 0)
