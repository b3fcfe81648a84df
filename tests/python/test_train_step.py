"""onnxtrain.TrainStep: forward, backward and the optimizer's update in one engine call leave the
parameters, param.grad, buffers and optimizer state as the four lines of a plain step do: against
eager PyTorch (float32 tolerances), and against ORTModule's own four lines (equal to the bit)."""
import copy
import logging

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import onnxtrain
from conftest import assert_close


class Net(nn.Module):
    """A classifier with BatchNorm (buffers the step updates), an unused parameter (its grad stays
    None) and the loss computed inside. fc1 has no bias: BatchNorm would make its gradient zero in
    exact arithmetic, rounding noise that Adam scales up to full steps."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(12, 32, bias=False)
        self.bn = nn.BatchNorm1d(32)
        self.fc2 = nn.Linear(32, 5)
        self.unused = nn.Parameter(torch.ones(3))

    def forward(self, x, y):
        return F.cross_entropy(self.fc2(torch.relu(self.bn(self.fc1(x)))), y)


def make_net():
    torch.manual_seed(0)
    return Net()


def batch(step):
    gen = torch.Generator().manual_seed(100 + step)
    return torch.randn(16, 12, generator=gen), torch.randint(0, 5, (16,), generator=gen)


def plain_step(model, optimizer, x, y):
    optimizer.zero_grad(set_to_none=True)
    loss = model(x, y)
    loss.backward()
    optimizer.step()
    return loss.detach()


OPTIMIZERS = {
    "sgd": (torch.optim.SGD, dict(lr=0.1)),
    "sgd-momentum-decay": (torch.optim.SGD, dict(lr=0.05, momentum=0.9, weight_decay=0.01)),
    "sgd-nesterov": (torch.optim.SGD, dict(lr=0.05, momentum=0.9, nesterov=True)),
    "adam": (torch.optim.Adam, dict(lr=1e-2)),
    "adam-amsgrad-decay": (torch.optim.Adam, dict(lr=1e-2, weight_decay=0.01, amsgrad=True)),
    "adamw": (torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.1)),
}


def state_tensors(optimizer, params):
    return [(k, v) for p in params for k, v in sorted(optimizer.state[p].items()) if isinstance(v, torch.Tensor)]


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_whole_steps_match_eager_and_the_four_lines(name):
    cls, kwargs = OPTIMIZERS[name]
    fused_cls = getattr(onnxtrain.optim, cls.__name__)
    eager = make_net()
    four, whole = onnxtrain.ORTModule(copy.deepcopy(eager)), onnxtrain.ORTModule(copy.deepcopy(eager))
    eager_opt, four_opt, whole_opt = cls(eager.parameters(), **kwargs), fused_cls(four.parameters(), **kwargs), \
        fused_cls(whole.parameters(), **kwargs)
    step = onnxtrain.TrainStep(whole, whole_opt)
    steps = 5
    for i in range(steps):
        x, y = batch(i)
        expected = plain_step(eager, eager_opt, x, y)
        four_loss = plain_step(four, four_opt, x, y)
        loss = step(x, y)
        assert loss.grad_fn is None and loss.shape == expected.shape
        assert_close(loss, expected, f"loss at step {i}")
        assert torch.equal(loss, four_loss), f"loss at step {i}"
        for (pname, p), q, r in zip(eager.named_parameters(), four.parameters(), whole.parameters()):
            assert_close(r, p, f"{pname} at step {i}")
            assert torch.equal(r, q), f"{pname} at step {i}"
            assert (r.grad is None) == (p.grad is None) == (q.grad is None), f"{pname}.grad at step {i}"
            if p.grad is not None:
                assert_close(r.grad, p.grad, f"{pname}.grad at step {i}")
                assert torch.equal(r.grad, q.grad), f"{pname}.grad at step {i}"
        for (bname, b), c in zip(eager.named_buffers(), whole.buffers()):
            assert_close(c, b, f"{bname} at step {i}")
        for (k, s), (_, t) in zip(state_tensors(whole_opt, list(whole.parameters())),
                                  state_tensors(eager_opt, list(eager.parameters()))):
            assert_close(s, t, f"optimizer state {k} at step {i}")
    assert whole.module.unused.grad is None and torch.equal(whole.module.unused, torch.ones(3))
    # The first step proves the export and learns the loss; every later one is one engine call.
    assert step.whole_steps == steps - 1
    assert whole.engine_runs == steps and whole.fallback_reason is None


def test_a_parameter_outside_the_optimizer_accumulates_its_gradient_as_backward_does():
    eager = make_net()
    whole = onnxtrain.ORTModule(copy.deepcopy(eager))
    outside = lambda m: [m.fc2.weight]  # noqa: E731
    inside = lambda m: [p for n, p in m.named_parameters() if n != "fc2.weight"]  # noqa: E731
    eager_opt = torch.optim.SGD(inside(eager), lr=0.1, momentum=0.9)
    step = onnxtrain.TrainStep(whole, onnxtrain.optim.SGD(inside(whole.module), lr=0.1, momentum=0.9))
    for i in range(4):
        x, y = batch(i)
        plain_step(eager, eager_opt, x, y)
        step(x, y)
        assert_close(outside(whole.module)[0].grad, outside(eager)[0].grad, f"accumulated grad at step {i}")
        for (n, p), q in zip(eager.named_parameters(), whole.module.parameters()):
            assert_close(q, p, f"{n} at step {i}")
    assert step.whole_steps == 3


def test_a_learning_rate_schedule_applies_and_the_scheduler_sees_optimizer_steps(recwarn):
    eager = make_net()
    whole = onnxtrain.ORTModule(copy.deepcopy(eager))
    eager_opt = torch.optim.SGD(eager.parameters(), lr=0.2, momentum=0.9)
    whole_opt = onnxtrain.optim.SGD(whole.parameters(), lr=0.2, momentum=0.9)
    scheds = [torch.optim.lr_scheduler.StepLR(o, step_size=2, gamma=0.5) for o in (eager_opt, whole_opt)]
    step = onnxtrain.TrainStep(whole, whole_opt)
    for i in range(5):
        x, y = batch(i)
        plain_step(eager, eager_opt, x, y)
        step(x, y)
        for s in scheds:
            s.step()
    for (n, p), q in zip(eager.named_parameters(), whole.parameters()):
        assert_close(q, p, n)
    assert not [w for w in recwarn.list if "lr_scheduler" in str(w.message)], [str(w.message) for w in recwarn.list]


def test_eval_mode_steps_use_the_running_statistics():
    eager = make_net().eval()
    whole = onnxtrain.ORTModule(copy.deepcopy(eager))
    eager_opt, whole_opt = torch.optim.Adam(eager.parameters(), lr=1e-2), onnxtrain.optim.Adam(whole.parameters(),
                                                                                                lr=1e-2)
    step = onnxtrain.TrainStep(whole, whole_opt)
    for i in range(3):
        x, y = batch(i)
        assert_close(step(x, y), plain_step(eager, eager_opt, x, y), f"loss at step {i}")
    for (n, p), q in zip(eager.named_parameters(), whole.parameters()):
        assert_close(q, p, n)
    assert step.whole_steps == 2


def test_a_failed_step_leaves_parameters_and_optimizer_state_as_they_were():
    model = onnxtrain.ORTModule(make_net(), onnxtrain.DebugOptions(check_finite=True))
    opt = onnxtrain.optim.Adam(model.parameters(), lr=1e-2)
    step = onnxtrain.TrainStep(model, opt)
    for i in range(3):
        step(*batch(i))
    assert step.whole_steps == 2
    params = [p.detach().clone() for p in model.parameters()]
    states = [(k, v.clone()) for k, v in state_tensors(opt, list(model.parameters()))]
    x, y = batch(3)
    x[0, 0] = float("nan")
    with pytest.raises(onnxtrain.EngineError, match="(?i)nan|finite"):
        step(x, y)
    for p, q in zip(model.parameters(), params):
        assert torch.equal(p, q)
    for (k, s), (_, t) in zip(state_tensors(opt, list(model.parameters())), states):
        assert torch.equal(s, t), k
    step(*batch(4))  # and the next step runs whole again
    assert step.whole_steps == 3


def test_a_forward_hook_on_the_model_runs_every_step():
    model = onnxtrain.ORTModule(make_net())
    calls = []
    model.register_forward_hook(lambda *args: calls.append(1))
    step = onnxtrain.TrainStep(model, onnxtrain.optim.SGD(model.parameters(), lr=0.1))
    for i in range(3):
        step(*batch(i))
    assert len(calls) == 3 and step.whole_steps == 0


def test_a_gradient_hook_on_a_parameter_runs_every_step():
    model = onnxtrain.ORTModule(make_net())
    seen = []
    model.module.fc1.weight.register_hook(lambda g: seen.append(g.shape))
    step = onnxtrain.TrainStep(model, onnxtrain.optim.SGD(model.parameters(), lr=0.1))
    for i in range(3):
        step(*batch(i))
    assert len(seen) == 3 and step.whole_steps == 0


def test_an_input_with_autograd_history_gets_its_gradient():
    eager = make_net()
    whole = onnxtrain.ORTModule(copy.deepcopy(eager))
    step = onnxtrain.TrainStep(whole, onnxtrain.optim.SGD(whole.parameters(), lr=0.1))
    eager_opt = torch.optim.SGD(eager.parameters(), lr=0.1)
    for i in range(2):
        x, y = batch(i)
        leaf_a, leaf_b = (x.clone().requires_grad_() for _ in range(2))
        plain_step(eager, eager_opt, leaf_a * 2, y)
        step(leaf_b * 2, y)
        assert_close(leaf_b.grad, leaf_a.grad, f"input grad at step {i}")
    assert step.whole_steps == 0


def test_a_model_that_returns_more_than_the_loss_is_refused():
    model = onnxtrain.ORTModule(nn.Linear(4, 3))
    step = onnxtrain.TrainStep(model, onnxtrain.optim.SGD(model.parameters(), lr=0.1))
    with pytest.raises(TypeError, match=r"return the loss.*Linear returned a tensor of shape \(2, 3\)"):
        step(torch.randn(2, 4))


def test_it_takes_an_ortmodule_and_a_fused_optimizer():
    net = make_net()
    with pytest.raises(TypeError, match="ORTModule"):
        onnxtrain.TrainStep(net, onnxtrain.optim.SGD(net.parameters(), lr=0.1))
    model = onnxtrain.ORTModule(net)
    with pytest.raises(TypeError, match="onnxtrain.optim"):
        onnxtrain.TrainStep(model, torch.optim.SGD(model.parameters(), lr=0.1))


def test_why_a_step_runs_as_four_lines_is_logged_once(caplog):
    model = onnxtrain.ORTModule(make_net())
    model.register_forward_hook(lambda *args: None)
    step = onnxtrain.TrainStep(model, onnxtrain.optim.SGD(model.parameters(), lr=0.1))
    with caplog.at_level(logging.INFO, logger="onnxtrain"):
        for i in range(3):
            step(*batch(i))
    told = [r.getMessage() for r in caplog.records if "TrainStep" in r.getMessage()]
    assert told == ["onnxtrain.TrainStep: a step runs as zero_grad, forward, backward and step (the model has hooks)"]


def test_new_sizes_prove_their_graph_first_then_run_whole():
    model = onnxtrain.ORTModule(make_net())
    step = onnxtrain.TrainStep(model, onnxtrain.optim.SGD(model.parameters(), lr=0.1))
    for n in (16, 16, 8, 8, 16):
        x, y = batch(n)
        step(x[:n], y[:n])
    assert step.whole_steps >= 3


def test_torchvision_resnet18_whole_steps_equal_the_four_lines():
    torchvision = pytest.importorskip("torchvision")

    class WithLoss(nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.net = torchvision.models.resnet18(num_classes=10)

        def forward(self, x, y):
            return F.cross_entropy(self.net(x), y)

    base = WithLoss()
    four, whole = onnxtrain.ORTModule(copy.deepcopy(base)), onnxtrain.ORTModule(copy.deepcopy(base))
    four_opt = onnxtrain.optim.SGD(four.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    step = onnxtrain.TrainStep(whole, onnxtrain.optim.SGD(whole.parameters(), lr=0.05, momentum=0.9,
                                                          weight_decay=1e-4))
    gen = torch.Generator().manual_seed(3)
    for i in range(3):
        x, y = torch.randn(4, 3, 32, 32, generator=gen), torch.randint(0, 10, (4,), generator=gen)
        assert torch.equal(step(x, y), plain_step(four, four_opt, x, y)), f"loss at step {i}"
    for (n, p), q in zip(four.named_parameters(), whole.parameters()):
        assert torch.equal(q, p), n
        assert torch.equal(q.grad, p.grad), n
    for (n, b), c in zip(four.named_buffers(), whole.buffers()):
        assert torch.equal(c, b), n
    assert step.whole_steps == 2
