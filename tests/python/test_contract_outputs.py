"""Every output structure a module may return comes back with its container types and keys."""
import collections
import copy

import pytest
import torch
import torch.nn as nn

import onnxtrain
from conftest import assert_close, assert_engine_ran

Pair = collections.namedtuple("Pair", ["left", "right"])


def x(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


class Structured(nn.Module):
    def __init__(self, kind):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.kind = kind

    def forward(self, x):
        a = self.fc(x)
        b = torch.sigmoid(a)
        if self.kind == "tensor":
            return a
        if self.kind == "tuple":
            return a, b
        if self.kind == "nested":
            return (a, (b, (a * 2,)))
        if self.kind == "dict":
            return {"logits": a, "probs": b, "none": None}
        if self.kind == "ordered":
            return collections.OrderedDict([("z", a), ("a", b)])
        if self.kind == "namedtuple":
            return Pair(left=a, right=[b, None])
        raise AssertionError(self.kind)


def leaves(out):
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):
        return [t for v in out.values() for t in leaves(v)]
    if isinstance(out, (tuple, list)):
        return [t for v in out for t in leaves(v)]
    return []


def same_structure(a, b):
    assert type(a) is type(b), (type(a), type(b))
    if isinstance(a, dict):
        assert list(a.keys()) == list(b.keys())
        for k in a:
            same_structure(a[k], b[k])
    elif isinstance(a, (tuple, list)):
        assert len(a) == len(b)
        for u, v in zip(a, b):
            same_structure(u, v)
    elif a is None:
        assert b is None


@pytest.mark.parametrize("kind", ["tensor", "tuple", "nested", "dict", "ordered", "namedtuple"])
def test_output_structures_are_preserved(kind):
    net = Structured(kind)
    ref = copy.deepcopy(net)
    model = onnxtrain.ORTModule(net)
    data = x(3, 4)
    out, expected = model(data), ref(data)
    same_structure(out, expected)
    ours, theirs = leaves(out), leaves(expected)
    assert_engine_ran(ours[0])
    sum(t.sum() * (i + 1) for i, t in enumerate(ours)).backward()
    sum(t.sum() * (i + 1) for i, t in enumerate(theirs)).backward()
    for a, b in zip(ours, theirs):
        assert_close(a, b, "output")
    for p, q in zip(net.parameters(), ref.parameters()):
        assert_close(p.grad, q.grad, "grad")


class Mixed(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        a = self.fc(x)
        return a, (a > 0), a.to(torch.int64), a * 3


def test_integer_and_bool_outputs_in_the_middle_are_not_differentiable():
    net = Mixed()
    ref = copy.deepcopy(net)
    model = onnxtrain.ORTModule(net)
    data = x(3, 4) * 3
    out, expected = model(data), ref(data)
    assert out[1].dtype == torch.bool and out[2].dtype == torch.int64
    assert not out[1].requires_grad and not out[2].requires_grad
    assert torch.equal(out[1], expected[1]) and torch.equal(out[2], expected[2])
    (out[0].sum() + out[3].pow(2).sum()).backward()
    (expected[0].sum() + expected[3].pow(2).sum()).backward()
    for p, q in zip(net.parameters(), ref.parameters()):
        assert_close(p.grad, q.grad, "grad")


class Repeated(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x, skip):
        y = self.fc(x)
        z = torch.tanh(y)
        return y, y, skip, z, y + z  # a tensor twice, an input, and outputs that feed each other


def test_repeated_outputs_input_passthrough_and_outputs_feeding_outputs():
    net = Repeated()
    ref = copy.deepcopy(net)
    model = onnxtrain.ORTModule(net)
    data = x(2, 4)
    skip, skip_ref = x(2, 4, seed=1).requires_grad_(), x(2, 4, seed=1).requires_grad_()
    out, expected = model(data, skip), ref(data, skip_ref)
    for a, b in zip(out, expected):
        assert_close(a, b, "output")
    weights = [1.0, -2.0, 0.5, 3.0, -1.0]
    sum(w * (o * o).sum() for w, o in zip(weights, out)).backward()
    sum(w * (o * o).sum() for w, o in zip(weights, expected)).backward()
    for p, q in zip(net.parameters(), ref.parameters()):
        assert_close(p.grad, q.grad, "grad")
    assert_close(skip.grad, skip_ref.grad, "grad of the passed-through input")


class ReturnsObject(nn.Module):
    class Result:
        pass

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2, 2)

    def forward(self, x):
        r = self.Result()
        r.value = self.fc(x)
        return r


def test_custom_class_output_is_a_clear_error():
    model = onnxtrain.ORTModule(ReturnsObject())
    with pytest.raises(RuntimeError, match=r"cannot pass output of type ReturnsObject.Result"):
        model(x(1, 2))


class Span:
    """A user's own container of tensors, registered with torch.utils._pytree (as libraries
    register theirs for torch.export): its context is a label that must survive the trip."""

    def __init__(self, start, end, label):
        self.start, self.end, self.label = start, end, label


def _register_span():
    from torch.utils import _pytree
    register = getattr(_pytree, "register_pytree_node", None) or _pytree._register_pytree_node  # torch 1.13
    if Span not in _pytree.SUPPORTED_NODES:
        register(Span, lambda s: ([s.start, s.end], s.label), lambda children, label: Span(*children, label))


class SpanModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, span):
        start = self.fc(span.start)
        return Span(start, torch.tanh(start) * span.end, span.label + "!"), start.sum()


def test_a_pytree_registered_type_passes_in_and_out_as_in_eager(no_fallback):
    """In and out through the type's own flatten and unflatten functions: the same class and
    label, the same tensors, and gradients for the parameters and for the tensors it carried in."""
    _register_span()
    torch.manual_seed(0)
    net = SpanModel()
    reference = copy.deepcopy(net)
    model = onnxtrain.ORTModule(net)
    for step in range(2):
        results = []
        for m in (model, reference):
            start, end = x(3, 4, seed=step).requires_grad_(), x(3, 4, seed=10 + step).requires_grad_()
            span, total = m(Span(start, end, "tokens"))
            (span.start.sum() + (span.end * 2).sum() + total).backward()
            results.append((span, total, start.grad, end.grad))
        (ours, our_total, our_dstart, our_dend), (eager, eager_total, eager_dstart, eager_dend) = results
        assert_engine_ran(our_total)
        assert type(ours) is Span and ours.label == eager.label == "tokens!"
        assert_close(ours.start, eager.start, f"step {step} span.start")
        assert_close(ours.end, eager.end, f"step {step} span.end")
        assert_close(our_dstart, eager_dstart, f"step {step} d start")
        assert_close(our_dend, eager_dend, f"step {step} d end")
    for (name, p), q in zip(net.named_parameters(), reference.parameters()):
        assert_close(p.grad, q.grad, f"{name}.grad")
    assert model.engine_runs == 2 and model.fallback_reason is None


class UpdatesItsInput(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, span):
        out = self.fc(span.start)
        span.start = out  # eager's caller sees its Span changed
        return out.sum()


def test_a_pytree_input_the_module_changes_in_place_is_refused_by_name(no_fallback):
    """A Span is rebuilt from its children for the graph, so the caller's Span could not be left
    as eager leaves it: refused, naming the argument and why, instead of a silently stale object."""
    _register_span()
    model = onnxtrain.ORTModule(UpdatesItsInput())
    span = Span(x(3, 4), x(3, 4, seed=1), "tokens")
    with pytest.raises(Exception, match=r"argument 0: the module changes this Span in place"):
        model(span)
