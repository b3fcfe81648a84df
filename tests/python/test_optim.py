"""onnxtrain.optim's fused SGD, Adam and AdamW follow torch.optim step for step."""
import copy

import pytest
import torch
import torch.nn as nn

import onnxtrain
from conftest import assert_close


def net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(20, 300), nn.Tanh(), nn.Linear(300, 7))


def run(optimizer_cls, kwargs, steps=8, groups=False):
    model = net()
    ref = copy.deepcopy(model)

    def params(m):
        if not groups:
            return m.parameters()
        return [{"params": m[0].parameters(), "lr": kwargs.get("lr", 0.01) * 0.5},
                {"params": m[2].parameters(), "weight_decay": 0.0}]

    fused_cls = getattr(onnxtrain.optim, optimizer_cls.__name__)
    ours, theirs = fused_cls(params(model), **kwargs), optimizer_cls(params(ref), **kwargs)
    gen = torch.Generator().manual_seed(1)
    for step in range(steps):
        x = torch.randn(16, 20, generator=gen)
        for m, opt in ((model, ours), (ref, theirs)):
            opt.zero_grad()
            m(x).pow(2).mean().backward()
            opt.step()
        for p, q in zip(model.parameters(), ref.parameters()):
            assert_close(p, q, f"step {step}")
    # Same state: one optimizer's state_dict loads into the other.
    theirs.load_state_dict(ours.state_dict())
    for s_ours, s_theirs in zip(ours.state.values(), theirs.state.values()):
        for k in s_ours:
            assert_close(s_ours[k], s_theirs[k], k)
    return ours


@pytest.mark.parametrize("kwargs", [
    dict(lr=0.1), dict(lr=0.05, momentum=0.9), dict(lr=0.05, momentum=0.9, nesterov=True),
    dict(lr=0.05, momentum=0.8, dampening=0.3, weight_decay=0.01), dict(lr=0.05, momentum=0.9, maximize=True)],
    ids=lambda k: ",".join(f"{a}={b}" for a, b in k.items()))
def test_sgd(kwargs):
    run(torch.optim.SGD, kwargs)


@pytest.mark.parametrize("kwargs", [
    dict(lr=1e-2), dict(lr=1e-2, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.01), dict(lr=1e-2, amsgrad=True),
    dict(lr=1e-2, maximize=True)], ids=lambda k: ",".join(f"{a}={b}" for a, b in k.items()))
def test_adam(kwargs):
    run(torch.optim.Adam, kwargs)


@pytest.mark.parametrize("kwargs", [dict(lr=1e-2), dict(lr=1e-2, weight_decay=0.1, amsgrad=True)],
                         ids=lambda k: ",".join(f"{a}={b}" for a, b in k.items()))
def test_adamw(kwargs):
    opt = run(torch.optim.AdamW, kwargs)
    # torch 2.x derives AdamW from Adam: onnxtrain's AdamW must still not be its Adam (decoupled decay).
    assert isinstance(opt, torch.optim.AdamW) and not isinstance(opt, onnxtrain.optim.Adam)


def test_param_groups_with_their_own_hyperparameters():
    run(torch.optim.SGD, dict(lr=0.05, momentum=0.9, weight_decay=0.01), groups=True)
    run(torch.optim.Adam, dict(lr=1e-2, weight_decay=0.01), groups=True)


def test_a_float64_parameter_is_updated_by_torch_and_still_right():
    model = net().double()
    ref = copy.deepcopy(model)
    ours, theirs = onnxtrain.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), torch.optim.SGD(
        ref.parameters(), lr=0.1, momentum=0.9)
    for _ in range(3):
        for m, opt in ((model, ours), (ref, theirs)):
            opt.zero_grad()
            m(torch.ones(2, 20, dtype=torch.float64)).sum().backward()
            opt.step()
    for p, q in zip(model.parameters(), ref.parameters()):
        assert torch.equal(p, q)


def test_with_ortmodule_and_a_learning_rate_scheduler():
    model = onnxtrain.ORTModule(net())
    ref = copy.deepcopy(model.module)
    opt = onnxtrain.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    scheds = [torch.optim.lr_scheduler.StepLR(o, step_size=2, gamma=0.5) for o in (opt, ref_opt)]
    for step in range(5):
        x = torch.randn(8, 20, generator=torch.Generator().manual_seed(step))
        for m, o, s in ((model, opt, scheds[0]), (ref, ref_opt, scheds[1])):
            o.zero_grad()
            m(x).pow(2).mean().backward()
            o.step()
            s.step()
    for p, q in zip(model.parameters(), ref.parameters()):
        assert_close(p, q, "after the schedule")
