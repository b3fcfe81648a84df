"""Control flow and sequences in exported graphs: the If that torch emits for shape-dependent
code over dynamic dims, data-dependent If from scripted functions, x.chunk's sequences, and
Loop (forward only), each against PyTorch eager with fallback off."""
import copy

import pytest
import torch
import torch.nn as nn

import onnxtrain
from conftest import assert_close, assert_engine_ran, torch_export_capture
from parity import train_and_compare


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def fixed(*batches):
    return lambda step: (batches[step % len(batches)], None)


class SqueezeDiagonal(nn.Module):
    """x.squeeze(1) and torch.diagonal export an If when every dim is dynamic."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        h = self.fc(x)                      # [n, 1, 4] or [n, k, 4]
        d = torch.diagonal(h, 0, 1, 2)      # [n, min(k, 4)]
        return (h.squeeze(1) ** 2).sum() + (d * 3).sum()


def test_shape_dependent_ifs_train_at_parity_on_both_branches():
    torch.manual_seed(0)
    # squeeze(1) squeezes for dim 1 == 1 and is the identity otherwise: both branches in one run.
    train_and_compare(SqueezeDiagonal(), fixed((randn(3, 1, 4, seed=1),), (randn(2, 3, 4, seed=2),)), steps=4,
                      input_grad=True)


@torch.jit.script
def signed_mix(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    if bool(x.sum() > 0):
        return x * w
    else:
        return torch.sin(x) - w


class DataDependentIf(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)
        self.w = nn.Parameter(torch.linspace(-1, 1, 3))

    def forward(self, x):
        return (signed_mix(self.fc(x), self.w) * torch.arange(1.0, 4.0)).sum()


def test_data_dependent_if_takes_the_branch_eager_takes_with_its_gradient():
    torch.manual_seed(0)
    model = DataDependentIf()
    with torch.no_grad():
        model.fc.bias.fill_(0)
    positive, negative = randn(2, 3, seed=1).abs() + 1, -randn(2, 3, seed=2).abs() - 1
    with torch.no_grad():
        assert bool(model.fc(positive).sum() > 0) != bool(model.fc(negative).sum() > 0), "inputs must pick both branches"
    train_and_compare(model, fixed((positive,), (negative,)), steps=4, input_grad=True)


class Chunks(nn.Module):
    """x.chunk over a dynamic dim exports SplitToSequence / SequenceAt."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(5, 7)

    def forward(self, x):
        a, b, c = self.fc(x).chunk(3, dim=1)
        return (a * 2).sum() + (b ** 2).sum() - c.sum()


def test_chunk_sequences_train_at_parity():
    torch.manual_seed(0)
    train_and_compare(Chunks(), fixed((randn(4, 5, seed=3),), (randn(2, 5, seed=4),)), steps=3, input_grad=True)


@torch.jit.script
def repeat_add(x: torch.Tensor, n: int) -> torch.Tensor:
    for _ in range(n):
        x = x * 0.5 + 1.0
    return x


class ScriptedLoop(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x):
        return repeat_add(self.fc(x), 3)


def test_loop_runs_forward_and_training_through_it_is_refused_naming_the_loop():
    torch.manual_seed(0)
    module = ScriptedLoop()
    x = randn(2, 3, seed=5)
    model = onnxtrain.ORTModule(module)
    with torch.no_grad():
        assert_close(model(x), module(x), "loop output")
    model.train()
    if torch_export_capture():  # torch.export unrolls the scripted loop: training runs, as eager's
        ref = copy.deepcopy(module)
        model(x.clone().requires_grad_()).sum().backward()
        ref(x.clone()).sum().backward()
        for (name, p), q in zip(module.named_parameters(), ref.parameters()):
            assert_close(p.grad, q.grad, f"{name}.grad through the unrolled loop")
        return
    with pytest.raises(Exception, match="Loop"):
        model(x.clone().requires_grad_()).sum().backward()
