"""Custom torch.autograd.Functions run inside the engine's graph as PythonOp nodes: the engine
calls the user's forward with a real ctx, and the user's backward is the gradient rule. Every
test compares with eager PyTorch and proves that the engine ran (the module's output comes from
ORTModuleFunction, and the user's backward ran from inside the engine's backward)."""
import copy
import threading
import time

import pytest
import torch
import torch.nn as nn
import torch.utils.checkpoint

import onnxtrain
from conftest import assert_close, assert_engine_ran
from parity import train_and_compare


class Calls:
    """Counts forward and backward runs of the Functions below, in this process (the export runs
    in a child process, so its probe never counts)."""
    forward = 0
    backward = 0

    @classmethod
    def reset(cls):
        cls.forward = cls.backward = 0


class ScaledGradient(torch.autograd.Function):
    """Forward doubles, backward multiplies by 100: deliberately not the derivative."""

    @staticmethod
    def forward(ctx, x):
        Calls.forward += 1
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        Calls.backward += 1
        return grad * 100


class StraightThroughRound(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        Calls.forward += 1
        return torch.round(x)

    @staticmethod
    def backward(ctx, grad):
        Calls.backward += 1
        return grad


class GradientReversal(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, strength):
        ctx.strength = strength
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        Calls.backward += 1
        return -ctx.strength * grad, None


class Stats(torch.autograd.Function):
    """Two outputs: a scaled copy (differentiable) and the per-row argmax (int64) plus a float
    statistic marked non-differentiable."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        peak = x.abs().amax(dim=1, keepdim=True)
        ctx.mark_non_differentiable(peak)
        return x * 3, x.argmax(dim=1), peak

    @staticmethod
    def backward(ctx, grad, grad_index, grad_peak):
        Calls.backward += 1
        assert grad_index is None or not grad_index.any()
        (x,) = ctx.saved_tensors
        return grad * 3 + 0 * x


class WithArguments(torch.autograd.Function):
    """Non-tensor arguments of every kind, used by forward and backward."""

    @staticmethod
    def forward(ctx, x, power, scale, flip, dims, nothing, weight):
        assert nothing is None and isinstance(flip, bool) and isinstance(dims, tuple)
        ctx.save_for_backward(x, weight)
        ctx.power, ctx.scale, ctx.flip = power, scale, flip
        y = x.pow(power) * scale * weight
        return y.flip(dims) if flip else y

    @staticmethod
    def backward(ctx, grad):
        Calls.backward += 1
        x, weight = ctx.saved_tensors
        if ctx.flip:
            grad = grad.flip(1)
        base = ctx.power * x.pow(ctx.power - 1) * ctx.scale
        return grad * base * weight, None, None, None, None, None, (grad * x.pow(ctx.power) * ctx.scale).sum(0)


class DoubleInPlace(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x.mul_(2)
        ctx.mark_dirty(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        Calls.backward += 1
        return grad * 2


class Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        Calls.backward += 1
        (x,) = ctx.saved_tensors
        return 2 * x * grad


class SquareThenScale(torch.autograd.Function):
    """Applies another Function inside its own forward, as eager allows."""

    @staticmethod
    def forward(ctx, x):
        return Square.apply(x) * 0.5

    @staticmethod
    def backward(ctx, grad):
        Calls.backward += 1
        return grad * 7


class TanhGelu(torch.autograd.Function):
    """A hand-written fused activation with its own backward, saving its input."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.nn.functional.gelu(x, approximate="tanh")

    @staticmethod
    def backward(ctx, grad):
        Calls.backward += 1
        (x,) = ctx.saved_tensors
        with torch.enable_grad():
            xd = x.detach().requires_grad_()
            (g,) = torch.autograd.grad(torch.nn.functional.gelu(xd, approximate="tanh"), xd, grad)
        return g


class Apply(nn.Module):
    """Linear, then the Function with the given extra arguments, then a head."""

    def __init__(self, fn, *extra, width=4):
        super().__init__()
        self.fn, self.extra = fn, extra
        self.l = nn.Linear(3, width)
        self.head = nn.Linear(width, 2)

    def forward(self, x):
        return self.head(self.fn.apply(self.l(x), *self.extra))


def batches(shape=(5, 3)):
    gen = torch.Generator().manual_seed(1)
    data = [torch.randn(*shape, generator=gen) for _ in range(4)]
    return lambda step: ((data[step % len(data)],), None)


def mse_to_zero(out, target):
    return (out ** 2).mean()


@pytest.mark.parametrize("fn", [ScaledGradient, StraightThroughRound])
def test_the_users_backward_is_the_gradient(fn):
    torch.manual_seed(0)
    Calls.reset()
    train_and_compare(Apply(fn), batches(), mse_to_zero, steps=3, input_grad=True)
    assert Calls.backward == 2 * 3, "the user's backward did not run once per step in each contender"
    assert Calls.forward == 2 * 3


def test_a_non_derivative_backward_changes_the_gradient_as_in_eager():
    """The test can fail: differentiating the traced forward (x * 2) would give 2, not 100."""
    torch.manual_seed(0)
    model = onnxtrain.ORTModule(Apply(ScaledGradient))
    x = torch.randn(2, 3, requires_grad=True)
    out = model(x)
    assert_engine_ran(out)
    out.sum().backward()
    w = model.module.head.weight
    expected = (100 * w.sum(0)) @ model.module.l.weight
    assert_close(x.grad, expected.expand(2, 3), "input grad through the Function")


def test_gradient_reversal_with_a_python_number_argument():
    torch.manual_seed(0)
    Calls.reset()
    train_and_compare(Apply(GradientReversal, 0.7), batches(), mse_to_zero, steps=3, input_grad=True)
    assert Calls.backward == 6


def test_two_outputs_one_not_differentiable():
    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.l = nn.Linear(3, 4)

        def forward(self, x):
            scaled, index, peak = Stats.apply(self.l(x))
            return scaled * peak + index.unsqueeze(1).float(), index, peak

    torch.manual_seed(0)
    Calls.reset()
    ref = Model()
    model = onnxtrain.ORTModule(copy.deepcopy(ref))
    x = torch.randn(5, 3)
    out, index, peak = model(x)
    ref_out, ref_index, ref_peak = ref(x)
    assert_engine_ran(out)
    assert torch.equal(index, ref_index)
    assert_close(peak, ref_peak, "non-differentiable output")
    assert not peak.requires_grad and not index.requires_grad
    assert_close(out, ref_out, "output")
    out.sum().backward()
    ref_out.sum().backward()
    assert Calls.backward == 2
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        assert_close(p.grad, q.grad, name)


def test_non_tensor_arguments_of_every_kind():
    torch.manual_seed(0)
    Calls.reset()
    weight = nn.Parameter(torch.randn(4))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.l = nn.Linear(3, 4)
            self.weight = weight

        def forward(self, x):
            return WithArguments.apply(self.l(x), 2, 0.5, True, (1,), None, self.weight).sum(1)

    train_and_compare(Model(), batches(), mse_to_zero, steps=3, input_grad=True)
    assert Calls.backward == 6


def test_needs_input_grad_is_eagers():
    seen = []

    class Record(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w):
            seen.append(ctx.needs_input_grad)
            return x * w

        @staticmethod
        def backward(ctx, grad):
            return None, grad.sum(0)

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(3))

        def forward(self, x):
            return Record.apply(x, self.w)

    model = onnxtrain.ORTModule(Model())
    out = model(torch.randn(2, 3))
    assert_engine_ran(out)
    out.sum().backward()
    assert seen[-1] == (False, True)
    assert_close(model.module.w.grad, torch.full((3,), 2.0), "w grad")


class IgnoresScaleGradient(torch.autograd.Function):
    """Backward returns None for the scale: eager leaves its .grad None, and Adam skips it."""

    @staticmethod
    def forward(ctx, x, scale):
        return x * scale

    @staticmethod
    def backward(ctx, grad):
        Calls.backward += 1
        return grad * 5, None


def test_a_none_gradient_leaves_the_parameter_grad_none():
    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.l = nn.Linear(3, 4)
            self.scale = nn.Parameter(torch.full((4,), 1.5))
            self.head = nn.Linear(4, 2)

        def forward(self, x):
            return self.head(IgnoresScaleGradient.apply(self.l(x), self.scale))

    torch.manual_seed(0)
    Calls.reset()
    model, ref = train_and_compare(Model(), batches(), mse_to_zero, steps=3, input_grad=True, optimizer="adam",
                                   lr=1e-2)
    assert ref.scale.grad is None and model.module.scale.grad is None
    assert_close(model.module.scale, ref.scale, "scale, which Adam never updated")
    assert Calls.backward == 6


@pytest.mark.parametrize("materialize", [True, False])
def test_set_materialize_grads(materialize):
    received = []

    class TwoOut(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.set_materialize_grads(materialize)
            return x * 2, x * 3

        @staticmethod
        def backward(ctx, g1, g2):
            received.append(g2)
            return g1 * 2 + (0 if g2 is None else g2 * 3)

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.l = nn.Linear(3, 3)

        def forward(self, x):
            a, _ = TwoOut.apply(self.l(x))
            return a

    torch.manual_seed(0)
    ref = Model()
    model = onnxtrain.ORTModule(copy.deepcopy(ref))
    x = torch.randn(2, 3)
    out = model(x)
    assert_engine_ran(out)
    out.sum().backward()
    ours = received[-1]
    ref(x).sum().backward()
    eager = received[-1]
    if materialize:
        assert ours is not None and not ours.any() and eager is not None
    else:
        assert ours is None and eager is None
    assert_close(model.module.l.weight.grad, ref.l.weight.grad, "weight grad")


def test_in_place_function_with_mark_dirty():
    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.l = nn.Linear(3, 4)
            self.head = nn.Linear(4, 2)

        def forward(self, x):
            h = self.l(x) + 0
            y = DoubleInPlace.apply(h)
            return self.head(y) + h.sum(1, keepdim=True)  # h was modified in place: eager reads 2h

    torch.manual_seed(0)
    Calls.reset()
    train_and_compare(Model(), batches(), mse_to_zero, steps=3, input_grad=True)
    assert Calls.backward == 6


def test_nested_functions():
    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.l = nn.Linear(3, 4)
            self.head = nn.Linear(4, 2)

        def forward(self, x):
            # A Function feeding another, and one applying another inside its own forward.
            return self.head(SquareThenScale.apply(Square.apply(self.l(x))))

    torch.manual_seed(0)
    Calls.reset()
    train_and_compare(Model(), batches(), mse_to_zero, steps=3, input_grad=True)
    assert Calls.backward == 2 * 2 * 3  # two Functions' backwards, two contenders, three steps


class Block(nn.Module):
    """A pre-norm Transformer encoder block whose feed-forward uses a custom activation."""

    def __init__(self, d=16, heads=2):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.ff1, self.ff2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.ff2(TanhGelu.apply(self.ff1(self.norm2(x))))


def test_a_function_inside_a_transformer_block():
    torch.manual_seed(0)
    Calls.reset()
    gen = torch.Generator().manual_seed(3)
    data = [torch.randn(2, 5, 16, generator=gen) for _ in range(3)]
    # SGD: the key bias's true gradient is zero, and Adam would turn its rounding noise into steps.
    train_and_compare(Block(), lambda s: ((data[s],), None), mse_to_zero, steps=3, input_grad=True)
    assert Calls.backward == 6


def test_eval_and_no_grad_calls_run_the_forward_only():
    torch.manual_seed(0)
    Calls.reset()
    ref = Apply(StraightThroughRound)
    model = onnxtrain.ORTModule(copy.deepcopy(ref))
    x = torch.randn(4, 3)
    with torch.no_grad():
        assert_close(model(x), ref(x), "no_grad output")
    model.eval()
    ref.eval()
    assert_close(model(x), ref(x), "eval output")
    assert Calls.backward == 0 and Calls.forward == 4


def test_two_threads_call_a_module_with_a_python_function():
    class Slow(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            time.sleep(0.01)  # lets the other thread run while this one is inside Python
            ctx.save_for_backward(x)
            return x.tanh()

        @staticmethod
        def backward(ctx, grad):
            time.sleep(0.01)
            (x,) = ctx.saved_tensors
            return grad * (1 - x.tanh() ** 2)

    torch.manual_seed(0)
    ref = Apply(Slow)
    model = onnxtrain.ORTModule(copy.deepcopy(ref))
    inputs = [torch.randn(3, 3) for _ in range(2)]
    warm = inputs[0].clone().requires_grad_()
    model(warm).sum().backward()  # export and build once, before the threads
    results, errors = {}, []

    def work(k):
        try:
            for _ in range(5):
                x = inputs[k].clone().requires_grad_()
                out = model(x)
                assert_engine_ran(out)
                (g,) = torch.autograd.grad(out.sum(), x)
                results[k] = (out.detach(), g)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    for k in range(2):
        x = inputs[k].clone().requires_grad_()
        out = ref(x)
        (g,) = torch.autograd.grad(out.sum(), x)
        assert_close(results[k][0], out, f"thread {k} output")
        assert_close(results[k][1], g, f"thread {k} input grad")


def test_a_function_returning_a_non_tensor_is_refused_by_name():
    class ReturnsNumber(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2, 3

        @staticmethod
        def backward(ctx, grad, _):
            return grad

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.l = nn.Linear(3, 3)

        def forward(self, x):
            return ReturnsNumber.apply(self.l(x))[0]

    with pytest.raises(RuntimeError, match="ReturnsNumber returns a int as output 1"):
        onnxtrain.ORTModule(Model())(torch.randn(2, 3))


def test_a_module_argument_is_refused_by_name():
    class TakesModule(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, module):
            return module(x)

        @staticmethod
        def backward(ctx, grad):
            return grad, None

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.l = nn.Linear(3, 3)

        def forward(self, x):
            return TakesModule.apply(x, self.l)

    with pytest.raises(RuntimeError, match="TakesModule receives a Linear as argument 1"):
        onnxtrain.ORTModule(Model())(torch.randn(2, 3))


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
    before = torch.autograd.Function.__dict__.get("apply")  # torch 2.x defines its own, 1.13 inherits it
    onnxtrain.ORTModule(nn.Linear(2, 2))(torch.randn(1, 2))
    assert torch.autograd.Function.__dict__.get("apply") is before
    assert ScaledGradient.apply(torch.ones(1)).item() == 2


def test_an_export_with_python_functions_is_never_written_to_the_disk_cache(tmp_path, monkeypatch):
    """A cache entry is data; a PythonOp names Python code."""
    monkeypatch.setenv("ONNXTRAIN_CACHE_DIR", str(tmp_path))
    model = onnxtrain.ORTModule(Apply(ScaledGradient))
    out = model(torch.randn(2, 3))
    assert_engine_ran(out)
    assert list(tmp_path.iterdir()) == []
    plain = onnxtrain.ORTModule(nn.Linear(3, 2))
    plain(torch.randn(2, 3))
    assert list(tmp_path.iterdir()), "the cache itself works"


def test_an_in_place_function_on_the_modules_own_input_is_refused():
    """Eager would modify the caller's tensor, which the engine's copy cannot: refused, not wrong."""
    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.l = nn.Linear(3, 3)

        def forward(self, x):
            return self.l(DoubleInPlace.apply(x))

    with pytest.raises(RuntimeError, match="DoubleInPlace modifies its input 0 in place, which is the module's own"):
        onnxtrain.ORTModule(Model())(torch.randn(2, 3))


class Doubles(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


class Triples(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 3

    @staticmethod
    def backward(ctx, grad):
        return grad * 3


class Applies(nn.Module):
    def __init__(self, function):
        super().__init__()
        self.function = function
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return self.function.apply(self.fc(x))


def test_each_graph_runs_its_own_function_when_the_kernel_reuses_a_pid(monkeypatch, no_fallback):
    """Exports run in forked children whose counters start alike, and a long session reuses their
    pids. Two graphs whose exports saw the same pid must still run their own Functions: a key made
    of the pid and a counter named both graphs' Functions alike, and the first graph then ran the
    second's Function (a gradient of zeros where eager had None, in the full suite)."""
    import os

    monkeypatch.setattr(os, "getpid", lambda: 4242)  # every export child, too, sees one pid
    torch.manual_seed(0)
    doubles, triples = Applies(Doubles), Applies(Triples)
    eager = copy.deepcopy(doubles)
    ours_doubles, ours_triples = onnxtrain.ORTModule(doubles), onnxtrain.ORTModule(triples)
    x = torch.randn(2, 4)
    ours_doubles(x), ours_triples(x)  # both exported: the second's key must not replace the first's
    out = ours_doubles(x)
    assert_engine_ran(out)
    assert_close(out, eager(x), "the first graph's output, which Doubles makes")
