"""Cases where the engine once gave a number that differed from eager's without a word: each test
compares with eager and fails on the old behaviour."""
import copy
import threading

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import onnxtrain
from conftest import assert_close, assert_engine_ran


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


# ---- parameters no gradient reaches keep .grad None ----

class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.trunk = nn.Linear(4, 6)
        self.a = nn.Linear(6, 3)
        self.b = nn.Linear(6, 2)

    def forward(self, x):
        h = torch.tanh(self.trunk(x))
        return self.a(h), self.b(h)


def test_backward_from_one_branch_leaves_the_other_branch_grad_none():
    ref = TwoHeads()
    model = onnxtrain.ORTModule(copy.deepcopy(ref))
    out_a, _ = model(randn(5, 4))
    ref_a, _ = ref(randn(5, 4))
    assert_engine_ran(out_a)
    out_a.sum().backward()
    ref_a.sum().backward()
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        if q.grad is None:
            assert p.grad is None, f"{name} got a gradient ({p.grad}) where eager leaves None"
        else:
            assert_close(p.grad, q.grad, name)
    assert model.module.b.weight.grad is None and model.module.trunk.weight.grad is not None


def test_none_gradients_keep_adam_and_weight_decay_where_eager_does():
    ref = TwoHeads()
    model = onnxtrain.ORTModule(copy.deepcopy(ref))
    opt = torch.optim.AdamW(model.parameters(), lr=0.1, weight_decay=0.1)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=0.1, weight_decay=0.1)
    for step in range(3):
        for net, o in ((model, opt), (ref, ref_opt)):
            o.zero_grad()
            out_a, out_b = net(randn(5, 4, seed=step))
            (out_a.sum() if step != 1 else out_b.sum()).backward()
            o.step()
        for (name, p), q in zip(model.named_parameters(), ref.parameters()):
            assert_close(p, q, f"step {step} {name}")
        assert len(opt.state) == len(ref_opt.state)


# ---- in-place changes of values the backward reads ----

def test_input_modified_in_place_before_backward_raises_as_eager():
    model = onnxtrain.ORTModule(nn.Linear(3, 3))
    x = randn(2, 3)
    y = model(x)
    assert_engine_ran(y)
    x.mul_(100)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_parameter_modified_in_place_before_backward_raises_as_eager():
    net = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    model = onnxtrain.ORTModule(net)
    y = model(randn(2, 3))
    with torch.no_grad():
        net[2].weight.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_unmodified_inputs_still_train():
    model = onnxtrain.ORTModule(nn.Linear(3, 3))
    x = randn(2, 3).requires_grad_()
    model(x).sum().backward()
    assert x.grad is not None


# ---- torch.max / torch.min along a dim send the gradient to the returned index ----

def exact_gradient_routing(module, x, differentiated=lambda out: out):
    """Runs `module` on x in the engine and in eager, backpropagates the same distinct upstream
    gradient through both, and asserts that x's gradients are identical: ties must route where
    eager routes them. Returns (ours, eager) outputs."""
    ours, ref = x.clone().requires_grad_(), x.clone().requires_grad_()
    out = onnxtrain.ORTModule(module)(ours)
    expected = module(ref)
    assert_engine_ran(differentiated(out))
    grad = torch.arange(1.0, differentiated(expected).numel() + 1).reshape(differentiated(expected).shape)
    differentiated(out).backward(grad)
    differentiated(expected).backward(grad)
    assert torch.equal(ours.grad, ref.grad), f"{ours.grad} vs eager {ref.grad}"
    return out, expected


class Extremum(nn.Module):
    def __init__(self, fn, dim, keepdim=False):
        super().__init__()
        self.fn, self.dim, self.keepdim = fn, dim, keepdim

    def forward(self, x):
        values, indices = self.fn(x, self.dim, keepdim=self.keepdim)
        return values * 2, indices


@pytest.mark.parametrize("fn", [torch.max, torch.min], ids=["max", "min"])
@pytest.mark.parametrize("dim,keepdim", [(0, False), (1, True), (-1, False)])
def test_max_and_min_along_a_dim_with_ties_match_eager(fn, dim, keepdim):
    x = torch.tensor([[0.5, 1.0, 1.0], [0.5, 2.0, -1.0], [0.5, 2.0, -1.0]])
    (values, indices), (ref_values, ref_indices) = exact_gradient_routing(Extremum(fn, dim, keepdim), x,
                                                                          lambda out: out[0])
    assert torch.equal(indices, ref_indices)


def test_amax_keeps_splitting_ties_evenly():
    class Amax(nn.Module):
        def forward(self, x):
            return x.amax(0)

    x = torch.tensor([[0.5, 1.0], [0.5, 2.0]])
    ours, ref = x.clone().requires_grad_(), x.clone().requires_grad_()
    onnxtrain.ORTModule(Amax())(ours).sum().backward()
    Amax()(ref).sum().backward()
    assert torch.equal(ours.grad, ref.grad) and ours.grad[0, 0] == 0.5


# ---- sign and the roundings: zero gradients, outputs that still require grad ----

@pytest.mark.parametrize("fn", [torch.sign, torch.round, torch.floor, torch.ceil])
def test_zero_gradient_ops_keep_requires_grad_like_eager(fn):
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.l = nn.Linear(3, 3)

        def forward(self, x):
            return fn(self.l(x) * 3)

    ref = M()
    model = onnxtrain.ORTModule(copy.deepcopy(ref))
    out = model(randn(4, 3))
    assert_engine_ran(out)
    out.sum().backward()
    ref(randn(4, 3)).sum().backward()
    assert torch.equal(model.module.l.weight.grad, ref.l.weight.grad)  # zeros in both


# ---- eval-mode exports: torch merges parameters with equal values ----

def test_eval_mode_gradients_of_a_fresh_batchnorm():
    # A fresh BatchNorm's running_var equals its weight and running_mean its bias: the eval-mode
    # export merged them, and the weight received the variance's gradient too.
    torch.manual_seed(0)
    ref = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU()).eval()
    model = onnxtrain.ORTModule(copy.deepcopy(ref)).eval()
    x = randn(2, 3, 6, 6)
    out = model(x)
    assert_engine_ran(out)
    grad = randn(*out.shape, seed=1)
    out.backward(grad)
    ref(x).backward(grad)
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        assert_close(p.grad, q.grad, name)


def test_eval_mode_gradients_of_parameters_with_equal_values():
    torch.manual_seed(0)
    ref = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 4)).eval()
    with torch.no_grad():
        ref[0].bias.zero_()
        ref[2].bias.zero_()
    model = onnxtrain.ORTModule(copy.deepcopy(ref)).eval()
    model(randn(3, 4)).pow(2).sum().backward()
    ref(randn(3, 4)).pow(2).sum().backward()
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        assert_close(p.grad, q.grad, name)


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_tied_weights_get_the_sum_of_both_uses(training):
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(7, 4)
            self.head = nn.Linear(4, 7, bias=False)
            self.head.weight = self.embed.weight

        def forward(self, tokens):
            return self.head(torch.tanh(self.embed(tokens)))

    torch.manual_seed(0)
    ref = Tied().train(training)
    model = onnxtrain.ORTModule(copy.deepcopy(ref)).train(training)
    tokens = torch.tensor([[1, 2, 3], [4, 5, 6]])
    out = model(tokens)
    assert_engine_ran(out)
    out.pow(2).sum().backward()
    ref(tokens).pow(2).sum().backward()
    assert_close(model.module.embed.weight.grad, ref.embed.weight.grad, "tied weight")


def test_eval_mode_transformer_runs_through_the_engine():
    # In eval mode nn.TransformerEncoderLayer takes a fused fast path that cannot be exported,
    # unless the trace runs with gradients enabled.
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
    ref = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()
    model = onnxtrain.ORTModule(copy.deepcopy(ref)).eval()
    x = randn(2, 5, 8)
    out = model(x)
    assert_engine_ran(out)
    assert_close(out, ref(x), "output")
    for p in model.parameters():
        p.requires_grad_(False)
    with torch.no_grad():
        assert_close(model(x), ref(x), "frozen, no_grad output")
    assert model.fallback_reason is None


# ---- the thread pool can be resized after graphs exist ----

def test_set_num_threads_after_building_keeps_graphs_valid():
    torch.manual_seed(0)
    ref = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 14 * 14, 5))
    model = onnxtrain.ORTModule(copy.deepcopy(ref))
    before = onnxtrain.get_num_threads()
    try:
        for step, threads in enumerate([2, 1, 2, 3, 1]):
            onnxtrain.set_num_threads(threads)
            assert onnxtrain.get_num_threads() == threads
            x = randn(4, 3, 16, 16, seed=step)
            out, expected = model(x), ref(x)
            assert_engine_ran(out)
            assert_close(out, expected, f"step {step} output")
            model.zero_grad()
            ref.zero_grad()
            out.sum().backward()
            expected.sum().backward()
            for (name, p), q in zip(model.named_parameters(), ref.parameters()):
                assert_close(p.grad, q.grad, f"step {step} {name}")
    finally:
        onnxtrain.set_num_threads(before)


def test_set_num_threads_while_another_thread_trains():
    torch.manual_seed(0)
    model = onnxtrain.ORTModule(nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 8)))
    before = onnxtrain.get_num_threads()
    errors = []

    def train():
        try:
            for step in range(40):
                model(randn(128, 64, seed=step)).sum().backward()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    worker = threading.Thread(target=train)
    worker.start()
    try:
        for k in range(40):
            onnxtrain.set_num_threads(1 + k % 3)
    finally:
        worker.join()
        onnxtrain.set_num_threads(before)
    assert not errors, errors


# ---- pooling with tied values routes the gradient where eager does ----

class Pool(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


@pytest.mark.parametrize("name,fn", [
    ("max2x2", lambda x: F.max_pool2d(x, 2)),
    ("max3x3s2p1", lambda x: F.max_pool2d(x, 3, 2, 1)),
    ("max3x3s2_ceil", lambda x: F.max_pool2d(x, 3, 2, ceil_mode=True)),
    ("adaptive_max", lambda x: F.adaptive_max_pool2d(x, 1)),
    ("max1d", lambda x: F.max_pool1d(x.flatten(2), 3, 2)),
], ids=lambda v: v if isinstance(v, str) else "")
def test_max_pooling_ties_route_the_gradient_like_eager(name, fn):
    # Values from {-1, 0, 1, 2}: most windows hold ties, positive, zero and negative.
    x = torch.randint(-1, 3, (2, 3, 9, 14), generator=torch.Generator().manual_seed(3)).float()
    out, expected = exact_gradient_routing(Pool(fn), x)
    assert torch.equal(out, expected)


# ---- an output may outlive the engine's graphs ----

def test_an_output_without_backward_outlives_the_module(tmp_path):
    import os
    import subprocess
    import sys

    # In a child process: a heap corruption would only show when the interpreter exits.
    script = tmp_path / "outlive.py"
    script.write_text(
        "import sys, gc, torch, torch.nn as nn\n"
        f"sys.path.insert(0, {os.path.dirname(os.path.dirname(onnxtrain.__file__))!r})\n"
        "import onnxtrain\n"
        "net = nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 3))\n"
        "model = onnxtrain.ORTModule(net)\n"
        "x = torch.randn(2, 1, 8, 8)\n"
        "for _ in range(2):\n"
        "    model(x).sum().backward()\n"
        "kept = [model(x), model(torch.randn(3, 1, 8, 8))]\n"
        "del model, net\n"
        "gc.collect()\n"
        "del kept\n"
        "gc.collect()\n"
        "print('clean')\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                          env=dict(__import__("os").environ, ONNXTRAIN_FALLBACK="0"))
    assert done.returncode == 0 and "clean" in done.stdout, done.stdout + done.stderr
