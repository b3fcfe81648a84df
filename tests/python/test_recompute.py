"""Activations recomputed in backward instead of kept: torch.utils.checkpoint segments (their memory
saving holds: the stash keeps the segment's inputs, not its activations), and
DebugOptions(memory_optimization="recompute") for cheap activations. Each model trains at parity
with eager, at both optimizer levels, and the stash shrinks."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.utils.checkpoint

import onnxtrain
from conftest import assert_close, assert_engine_ran
from onnxtrain import _engine

LEVELS = [0, 1]


@pytest.fixture
def stash_log(monkeypatch):
    """(stashed bytes, recomputed bytes) of every training forward, in call order."""
    log = []
    original = _engine.TrainingRun.forward

    def recording(self, tensors):
        outputs, call = original(self, tensors)
        log.append((call.stashed_bytes(), call.recomputed_bytes()))
        return outputs, call

    monkeypatch.setattr(_engine.TrainingRun, "forward", recording)
    return log


def train_side_by_side(ref, options, make_inputs, steps=3, lr=0.05):
    """Trains `ref` in eager and a copy through the engine on the same batches; compares outputs,
    parameter gradients, input gradients and the parameters after each optimizer step."""
    model = onnxtrain.ORTModule(copy.deepcopy(ref), options)
    opt_ref = torch.optim.SGD(ref.parameters(), lr=lr)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for step in range(steps):
        inputs = make_inputs(step)
        x = [t.clone().requires_grad_() for t in inputs]
        x_ref = [t.clone().requires_grad_() for t in inputs]
        out = model(*x)
        assert_engine_ran(out)
        out_ref = ref(*x_ref)
        assert_close(out, out_ref, f"step {step} output")
        weights = torch.randn(out.shape, generator=torch.Generator().manual_seed(step))
        (out * weights).sum().backward()
        (out_ref * weights).sum().backward()
        for (name, p), q in zip(model.named_parameters(), ref.parameters()):
            assert_close(p.grad, q.grad, f"step {step} grad of {name}")
        for i, (a, b) in enumerate(zip(x, x_ref)):
            assert_close(a.grad, b.grad, f"step {step} grad of input {i}")
        opt.step()
        opt_ref.step()
        opt.zero_grad()
        opt_ref.zero_grad()
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        assert_close(p, q, f"{name} after {steps} steps")
    return model


class CheckpointedBlock(nn.Module):
    """Linear in, a checkpointed wide block (its activations are the model's largest), a head."""

    def __init__(self, d=16, wide=256, checkpointed=True, use_reentrant=True, dropout=0.0):
        super().__init__()
        self.inp = nn.Linear(d, d)
        self.block = nn.Sequential(nn.Dropout(dropout), nn.Linear(d, wide), nn.GELU(), nn.Linear(wide, wide),
                                   nn.Tanh(), nn.Linear(wide, d), nn.LayerNorm(d))
        self.head = nn.Linear(d, 4)
        self.checkpointed = checkpointed
        self.use_reentrant = use_reentrant

    def forward(self, x):
        h = self.inp(x)
        if self.checkpointed:
            h = torch.utils.checkpoint.checkpoint(self.block, h, use_reentrant=self.use_reentrant)
        else:
            h = self.block(h)
        return self.head(torch.relu(h))


def batches(*shape):
    return lambda step: [torch.randn(*shape, generator=torch.Generator().manual_seed(100 + step))]


@pytest.mark.parametrize("level", LEVELS)
def test_checkpoint_trains_at_parity_with_eager(level):
    torch.manual_seed(0)
    train_side_by_side(CheckpointedBlock(), onnxtrain.DebugOptions(optimization_level=level), batches(8, 16))


@pytest.mark.parametrize("level", LEVELS)
def test_non_reentrant_checkpoint_trains_at_parity_with_eager(level):
    torch.manual_seed(0)
    train_side_by_side(CheckpointedBlock(use_reentrant=False), onnxtrain.DebugOptions(optimization_level=level),
                       batches(8, 16))


@pytest.mark.parametrize("level", LEVELS)
def test_checkpoint_two_segments_and_a_tuple_output(level):
    class TwoSegments(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(8, 32)
            self.b = nn.Linear(32, 8)

        def split(self, x, scale):
            h = torch.sigmoid(self.a(x)) * scale
            return h, torch.tanh(h)

        def forward(self, x):
            h, t = torch.utils.checkpoint.checkpoint(self.split, x, 0.5)
            y = torch.utils.checkpoint.checkpoint(lambda u, v: self.b(u * v).exp(), h, t)
            return y.sum(dim=1)

    torch.manual_seed(1)
    train_side_by_side(TwoSegments(), onnxtrain.DebugOptions(optimization_level=level), batches(6, 8))


@pytest.mark.parametrize("use_reentrant", [True, False])
@pytest.mark.parametrize("level", LEVELS)
def test_checkpoint_keeps_the_segments_inputs_not_its_activations(level, use_reentrant, stash_log):
    torch.manual_seed(0)
    stashed = {}
    for checkpointed in (False, True):
        model = onnxtrain.ORTModule(CheckpointedBlock(wide=512, checkpointed=checkpointed, use_reentrant=use_reentrant),
                                    onnxtrain.DebugOptions(optimization_level=level))
        x = torch.randn(64, 16, requires_grad=True)
        for _ in range(2):
            model(x).sum().backward()
        stashed[checkpointed] = stash_log[-1]
    (plain, _), (checkpointed, recomputed) = stashed[False], stashed[True]
    # Without checkpoint the stash holds several [64, 512] activations (128 KiB each); with it,
    # the [64, 16] segment input and what lies outside the segment.
    assert plain > 2 * 64 * 512 * 4, stashed
    assert checkpointed * 8 < plain, stashed
    assert recomputed >= 64 * 512 * 4, stashed


def test_checkpoint_with_dropout_recomputes_the_same_mask(stash_log):
    """The recompute must see the forward's mask: a checkpointed model trains exactly as the same
    model without checkpoint (which reads its dropout output from the stash), given the same
    torch.manual_seed, and the dropout really drops."""
    torch.manual_seed(0)
    plain = CheckpointedBlock(checkpointed=False, dropout=0.5)
    checkpointed = copy.deepcopy(plain)
    checkpointed.checkpointed = True
    results = []
    for module in (plain, checkpointed):
        model = onnxtrain.ORTModule(copy.deepcopy(module), onnxtrain.DebugOptions(optimization_level=0))
        torch.manual_seed(7)
        x = torch.randn(32, 16, requires_grad=True)
        out = model(x)
        assert_engine_ran(out)
        out.sum().backward()
        results.append((out.detach(), x.grad, [p.grad for p in model.parameters()]))
    (out_a, gx_a, gp_a), (out_b, gx_b, gp_b) = results
    assert_close(out_b, out_a, "output")
    assert_close(gx_b, gx_a, "input grad")
    for i, (a, b) in enumerate(zip(gp_a, gp_b)):
        assert_close(b, a, f"grad of parameter {i}")
    # Dropout is active: the same model in eval mode gives another output.
    assert not torch.allclose(out_a, plain.eval()(x.detach()), atol=1e-3)
    assert stash_log[1][1] > 0


def test_checkpoint_with_dropout_in_eager_reference_mode():
    """Against eager itself: with the engine's dropout mask replayed in eager (read from the
    engine's dropout output, which the model also returns), outputs and gradients agree."""

    class Replay(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Linear(16, 16)
            self.mask = None

        def segment(self, x):
            d = nn.functional.dropout(x, 0.5, True) if self.mask is None else x * self.mask * 2.0
            return torch.tanh(self.w(d)), d

        def forward(self, x):
            y, d = torch.utils.checkpoint.checkpoint(self.segment, x)
            return torch.cat([y, d], dim=1)

    torch.manual_seed(3)
    ref = Replay()
    model = onnxtrain.ORTModule(copy.deepcopy(ref))
    x = torch.randn(8, 16) + 3.0  # no zeros in x: a zero in d is a dropped element
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    out = model(xa)
    assert_engine_ran(out)
    ref.mask = (out[:, 16:] != 0).float().detach()
    out_ref = ref(xb)
    assert_close(out, out_ref, "output")
    weights = torch.randn(out.shape)
    (out * weights).sum().backward()
    (out_ref * weights).sum().backward()
    assert_close(xa.grad, xb.grad, "input grad")
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        assert_close(p.grad, q.grad, name)


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 128), nn.GELU(), nn.Linear(128, 128), nn.LayerNorm(128), nn.SiLU(),
                                 nn.Linear(128, 10))

    def forward(self, x):
        return self.net(x)


class EncoderLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True, activation="gelu")

    def forward(self, x):
        return self.layer(x)


MODELS = {"mlp": (Mlp, (16, 32)), "encoder_layer": (EncoderLayer, (4, 6, 32))}


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("name", sorted(MODELS))
def test_memory_optimization_trains_at_parity_with_eager_and_stashes_less(name, level, stash_log):
    make, shape = MODELS[name]
    stashed = {}
    for mode in ("none", "recompute"):
        torch.manual_seed(0)
        train_side_by_side(make(), onnxtrain.DebugOptions(optimization_level=level, memory_optimization=mode),
                           batches(*shape))
        stashed[mode] = stash_log[-1]
    (none, none_recomputed), (recompute, recomputed) = stashed["none"], stashed["recompute"]
    assert none_recomputed == 0
    assert recompute < none, stashed
    assert recomputed > 0, stashed


def test_memory_optimization_from_the_environment(monkeypatch, stash_log):
    torch.manual_seed(0)
    module = Mlp()
    x = torch.randn(16, 32)
    monkeypatch.setenv("ONNXTRAIN_MEMORY_OPTIMIZATION", "recompute")
    onnxtrain.ORTModule(copy.deepcopy(module))(x).sum().backward()
    monkeypatch.setenv("ONNXTRAIN_MEMORY_OPTIMIZATION", "none")
    onnxtrain.ORTModule(copy.deepcopy(module))(x).sum().backward()
    assert stash_log[0][1] > 0 and stash_log[1][1] == 0
    monkeypatch.setenv("ONNXTRAIN_MEMORY_OPTIMIZATION", "all")
    with pytest.raises((ValueError, RuntimeError), match="ONNXTRAIN_MEMORY_OPTIMIZATION"):
        onnxtrain.ORTModule(copy.deepcopy(module))(x)


def test_memory_optimization_is_checked():
    assert onnxtrain.DebugOptions(memory_optimization="recompute").memory_optimization == "recompute"
    with pytest.raises(ValueError, match="memory_optimization"):
        onnxtrain.DebugOptions(memory_optimization="aggressive")
    with pytest.raises(TypeError, match="memory_optimization"):
        onnxtrain.DebugOptions(memory_optimization=True)


def test_the_stash_report_lists_what_was_recomputed():
    torch.manual_seed(0)
    model = onnxtrain.ORTModule(Mlp(), onnxtrain.DebugOptions(memory_optimization="recompute"))
    calls = []
    original = _engine.TrainingRun.forward

    def recording(self, tensors):
        outputs, call = original(self, tensors)
        calls.append(call)
        return outputs, call

    _engine.TrainingRun.forward = recording
    try:
        out = model(torch.randn(16, 32))
    finally:
        _engine.TrainingRun.forward = original
    report = calls[0].stash_report()
    recomputed = [e for e in report if e["kind"] == "recomputed"]
    assert recomputed and all(e["bytes"] > 0 and e["dtype"] == "float32" for e in recomputed), report
    assert sum(e["bytes"] for e in recomputed) == calls[0].recomputed_bytes()
    assert calls[0].stashed_bytes() == sum(e["bytes"] for e in report if e["kind"] not in ("input", "recomputed"))
    out.sum().backward()
    # After backward the stash is freed: the report still names the values (it used to crash).
    assert [e["name"] for e in calls[0].stash_report()] == [e["name"] for e in report]
    assert calls[0].stashed_bytes() == 0
