"""Call patterns: live forwards, chained and mixed modules, accumulation, in-place checks."""
import copy

import pytest
import torch
import torch.nn as nn

import onnxtrain
from conftest import assert_close, assert_engine_ran


def x(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def mlp():
    return nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 3))


@pytest.mark.parametrize("order", ["first_then_second", "second_then_first"])
def test_two_forwards_before_either_backward(order):
    net = mlp()
    ref = copy.deepcopy(net)
    model = onnxtrain.ORTModule(net)
    a, b = model(x(2, 4)), model(x(5, 4, seed=1))
    ra, rb = ref(x(2, 4)), ref(x(5, 4, seed=1))
    pairs = [(a, ra, 1.0), (b, rb, -3.0)]
    if order == "second_then_first":
        pairs.reverse()
    for out, expected, w in pairs:
        (w * out.pow(2).sum()).backward()
        (w * expected.pow(2).sum()).backward()
        for p, q in zip(net.parameters(), ref.parameters()):
            assert_close(p.grad, q.grad, "accumulated grad")


def test_chained_mixed_and_shared_backbone():
    backbone, head_a, head_b, plain = mlp(), nn.Linear(3, 2), nn.Linear(3, 4), nn.Linear(2, 2)
    refs = copy.deepcopy((backbone, head_a, head_b, plain))
    wrapped = [onnxtrain.ORTModule(m) for m in (backbone, head_a, head_b)]
    data = x(3, 4)
    feat = wrapped[0](data)
    out_a, out_b = plain(wrapped[1](feat)), wrapped[2](feat)  # chained, mixed, and two heads on one backbone
    assert_engine_ran(feat)
    (out_a.pow(2).sum() + out_b.sum()).backward()
    rfeat = refs[0](data)
    (refs[3](refs[1](rfeat)).pow(2).sum() + refs[2](rfeat).sum()).backward()
    for m, r in zip((backbone, head_a, head_b, plain), refs):
        for p, q in zip(m.parameters(), r.parameters()):
            assert_close(p.grad, q.grad, type(m).__name__)


def test_gradient_accumulation_over_micro_batches():
    net = mlp()
    ref = copy.deepcopy(net)
    model = onnxtrain.ORTModule(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for step in range(2):
        opt.zero_grad()
        ref_opt.zero_grad()
        for micro in range(4):
            data = x(2, 4, seed=10 * step + micro)
            (model(data).pow(2).mean() / 4).backward()
            (ref(data).pow(2).mean() / 4).backward()
        opt.step()
        ref_opt.step()
        for p, q in zip(net.parameters(), ref.parameters()):
            assert_close(p, q, "parameters")


def test_modifying_a_saved_output_in_place_before_backward_raises():
    model = onnxtrain.ORTModule(nn.Sequential(nn.Linear(4, 4), nn.Sigmoid()))
    out = model(x(2, 4))  # Sigmoid's gradient reads its output, so the output is saved
    out.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()
