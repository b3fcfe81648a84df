"""requires_grad routing, shapes, schema changes and train/eval modes."""
import copy

import torch
import torch.nn as nn

import onnxtrain
from conftest import assert_close, assert_engine_ran, torch_export_capture


def x(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


class TwoInputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 5)
        self.b = nn.Linear(5, 3)
        self.unused = nn.Linear(3, 3)

    def forward(self, u, v):
        return self.b(torch.tanh(self.a(u)) * v)


def test_input_gradients_exist_exactly_when_inputs_require_grad():
    net = TwoInputs()
    ref = copy.deepcopy(net)
    model = onnxtrain.ORTModule(net)
    for u_grad, v_grad in [(True, False), (False, True), (True, True), (False, False)]:
        u, v = x(2, 4).requires_grad_(u_grad), x(2, 5, seed=1).requires_grad_(v_grad)
        u2, v2 = u.detach().clone().requires_grad_(u_grad), v.detach().clone().requires_grad_(v_grad)
        out, expected = model(u, v), ref(u2, v2)
        assert_engine_ran(out)
        out.pow(2).sum().backward()
        expected.pow(2).sum().backward()
        assert (u.grad is None) == (not u_grad) and (v.grad is None) == (not v_grad)
        if u_grad:
            assert_close(u.grad, u2.grad, "u.grad")
        if v_grad:
            assert_close(v.grad, v2.grad, "v.grad")


def test_frozen_parameters_get_no_grad_and_no_backward_work():
    net = TwoInputs()
    model = onnxtrain.ORTModule(net)
    model(x(2, 4), x(2, 5)).sum().backward()
    full = next(iter(model._graphs.values()))[0]._runs
    (all_trainable,) = full.values()
    for p in net.a.parameters():
        p.requires_grad_(False)
    net.zero_grad(set_to_none=True)
    out = model(x(2, 4), x(2, 5))
    out.sum().backward()
    assert net.a.weight.grad is None and net.a.bias.grad is None
    assert net.b.weight.grad is not None
    frozen_run = [r for r in full.values() if r is not all_trainable][0]
    assert not any(name.startswith("module.a.") for name in frozen_run.session.wrt)
    assert frozen_run.session.num_backward_nodes < all_trainable.session.num_backward_nodes
    # Unused parameters never get a gradient.
    assert net.unused.weight.grad is None


def test_requires_grad_change_between_steps_rebuilds_and_matches():
    net = TwoInputs()
    ref = copy.deepcopy(net)
    model = onnxtrain.ORTModule(net)
    for step, frozen in enumerate([False, True, False]):
        for m in (net, ref):
            m.b.weight.requires_grad_(not frozen)
            m.zero_grad(set_to_none=True)
        u, v = x(3, 4, seed=step), x(3, 5, seed=10 + step)
        model(u, v).pow(2).mean().backward()
        ref(u, v).pow(2).mean().backward()
        for (name, p), q in zip(net.named_parameters(), ref.parameters()):
            assert (p.grad is None) == (q.grad is None), name
            if q.grad is not None:
                assert_close(p.grad, q.grad, name)


class Sequence(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 6)

    def forward(self, tokens):
        h = torch.tanh(self.fc(tokens))
        return h.transpose(0, 1) * 2


def test_batch_and_sequence_lengths_change_without_reexport():
    net = Sequence()
    ref = copy.deepcopy(net)
    model = onnxtrain.ORTModule(net)
    for batch, seq in [(2, 5), (3, 5), (3, 9), (1, 1), (8, 2)]:
        data = x(batch, seq, 6, seed=batch * seq)
        out, expected = model(data), ref(data)
        assert_close(out, expected, f"{batch}x{seq}")
        out.sum().backward()
    assert len(model._graphs) == (2 if torch_export_capture() else 1)  # torch.export: (1, 1) on its own


def test_dtype_rank_and_structure_changes_reexport():
    model = onnxtrain.ORTModule(nn.Linear(6, 6))
    model(x(2, 6))
    model(x(3, 4, 6))  # rank
    model(x(3, 6).double().float())
    assert len(model._graphs) == 2
    model.double()
    out = model(x(2, 6).double())  # dtype (and parameters converted by .double())
    assert out.dtype == torch.float64
    assert_engine_ran(out)


class ModeDependent(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        h = self.drop(self.fc(x))
        return h * 2 if self.training else h - 1


def test_train_eval_toggling_no_grad_and_dropout_identity_in_eval():
    net = ModeDependent()
    ref = copy.deepcopy(net)
    model = onnxtrain.ORTModule(net)
    data = x(3, 4)
    model.eval()
    ref.eval()
    assert_close(model(data), ref(data), "eval output (dropout is the identity)")
    model.train()
    train_out = model(data)
    assert_engine_ran(train_out)
    model.eval()
    eval_out = model(data)
    assert_engine_ran(eval_out)
    assert not torch.allclose(train_out, eval_out)
    with torch.no_grad():
        out = model(data)
        assert out.grad_fn is None and not out.requires_grad
    model.train()
    with torch.no_grad():
        out = model(data)
        assert out.grad_fn is None
    assert len(model._graphs) == 2


class FixedBatch(nn.Module):
    """Written for batch 6 only: the trace on a cut-down batch cannot export it."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.register_buffer("offsets", torch.arange(24.0).reshape(6, 4))

    def forward(self, x):
        return self.fc(x) + self.offsets


class BatchBranch(nn.Module):
    """Branches on the batch size: a trace on fewer samples would take the other branch."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        h = self.fc(x)
        return h * 2 if x.shape[0] > 3 else h * 3


def test_the_small_batch_trace_falls_back_to_the_full_batch_when_it_must():
    for net in (FixedBatch(), BatchBranch()):
        ref = copy.deepcopy(net)
        model = onnxtrain.ORTModule(net)
        data = x(6, 4)
        out = model(data)
        assert_engine_ran(out)
        assert_close(out, ref(data), type(net).__name__)
        out.sum().backward()
        ref(data).sum().backward()
        for p, q in zip(net.parameters(), ref.parameters()):
            assert_close(p.grad, q.grad, type(net).__name__)
