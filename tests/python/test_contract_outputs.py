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
