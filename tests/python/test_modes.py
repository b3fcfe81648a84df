"""Eval mode and torch.no_grad run the forward only, through the engine."""
import copy

import torch
import torch.nn as nn

import onnxtrain
from conftest import assert_close, assert_engine_ran


def make():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(10, 20), nn.ReLU(), nn.Linear(20, 3))
    return onnxtrain.ORTModule(net), copy.deepcopy(net)


def test_eval_mode_runs_forward_only_through_the_engine():
    model, ref = make()
    model.eval()
    ref.eval()
    x = torch.randn(5, 10)
    runs = model.engine_runs
    out = model(x)
    assert model.engine_runs == runs + 1
    assert_close(out, ref(x), "eval output")
    assert not model.training and not model.module.training


def test_no_grad_gives_outputs_without_grad_fn():
    model, ref = make()
    x = torch.randn(5, 10)
    with torch.no_grad():
        runs = model.engine_runs
        out = model(x)
        assert model.engine_runs == runs + 1
        expected = ref(x)
    assert out.grad_fn is None and not out.requires_grad
    assert_close(out, expected, "no_grad output")


def test_switching_between_train_and_eval():
    model, ref = make()
    x = torch.randn(4, 10)
    for training in [True, False, True, False]:
        model.train(training)
        ref.train(training)
        out = model(x)
        assert_close(out, ref(x), f"training={training}")
        assert_engine_ran(out)  # eval mode with gradients enabled is still differentiable, as in PyTorch
    assert len(model._graphs) == 2  # one export per mode, reused


def test_exchange_with_torch_copies_nothing():
    from torch.utils.dlpack import from_dlpack, to_dlpack

    t = torch.randn(3, 4)
    back = from_dlpack(onnxtrain._C._echo(to_dlpack(t)))
    assert back.data_ptr() == t.data_ptr()
    back[0, 0] = 42.0
    assert t[0, 0].item() == 42.0
