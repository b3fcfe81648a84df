"""torchvision's stochastic depth (torch.bernoulli_ in training) runs in the engine, with masks
drawn from a generator seeded from torch's RNG, like Dropout's."""
import copy

import torch
import torch.nn as nn
import torchvision

import onnxtrain
from conftest import assert_close, assert_engine_ran


class Block(nn.Module):
    def __init__(self, p, mode):
        super().__init__()
        self.l = nn.Linear(6, 6)
        self.sd = torchvision.ops.StochasticDepth(p, mode)

    def forward(self, x):
        return x + self.sd(self.l(x))


def run(model, x):
    out = model(x)
    assert_engine_ran(out)
    branch = out.detach() - x
    linear = model.module.l(x).detach()
    return out, branch, linear


def test_row_mode_drops_whole_samples_and_scales_the_rest():
    torch.manual_seed(0)
    model = onnxtrain.ORTModule(Block(0.3, "row"))
    x = torch.randn(4000, 6)
    out, branch, linear = run(model, x)
    kept = branch.abs().sum(1) > 0
    assert abs(kept.float().mean().item() - 0.7) < 0.03
    assert_close(branch[kept], linear[kept] / 0.7, "kept rows are scaled by 1 / survival")
    # The gradient takes the same mask: d(sum out)/d bias = number of kept rows / survival.
    out.sum().backward()
    assert_close(model.module.l.bias.grad, torch.full((6,), kept.sum().item() / 0.7), "bias gradient")


def test_batch_mode_draws_one_value_per_call_and_seeds_follow_torch():
    x = torch.randn(8, 6)
    model = onnxtrain.ORTModule(Block(0.5, "batch"))
    torch.manual_seed(1)
    draws = []
    for _ in range(40):
        _, branch, _ = run(model, x)
        rows = (branch.abs().sum(1) > 0).tolist()
        assert all(rows) or not any(rows)
        draws.append(rows[0])
    assert 8 < sum(draws) < 32
    again = onnxtrain.ORTModule(copy.deepcopy(model.module))
    torch.manual_seed(1)
    replay = [bool((run(again, x)[1].abs().sum(1) > 0)[0]) for _ in range(40)]
    assert replay == draws


def test_eval_mode_is_the_identity():
    model = onnxtrain.ORTModule(Block(0.5, "row")).eval()
    x = torch.randn(5, 6)
    out, branch, linear = run(model, x)
    assert_close(branch, linear, "eval branch")


def test_efficientnet_with_its_stochastic_depth_trains_in_the_engine():
    torch.manual_seed(0)
    model = onnxtrain.ORTModule(torchvision.models.efficientnet_b0(num_classes=4))
    out = model(torch.randn(2, 3, 32, 32))
    assert_engine_ran(out)
    out.sum().backward()
    assert all(p.grad is not None for p in model.parameters())
