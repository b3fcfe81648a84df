"""The eager warm-up (onnxtrain/_eager_warmup.py): a call structure's first calls run in eager
PyTorch while its capture goes on beside them, then the module switches to the engine.

Each test trains an ORTModule with the warm-up on beside a plain copy of the same module and checks,
step by step, which path ran (eager_warmup_runs, engine_runs, the output's grad_fn) and that the
two agree: outputs, parameters, .grad, buffers and the optimizer's state. The switch is made
deterministic by waiting for the capture (the job's wait()) where a test needs it to be ready.
"""
import copy
import os
import sys

import pytest
import torch
import torch.nn as nn

import onnxtrain
import onnxtrain.capture
from conftest import assert_close, assert_engine_ran, free_port, run_processes
from onnxtrain.capture.common import ExportError


def warm(net):
    return onnxtrain.ORTModule(net, debug_options=onnxtrain.DebugOptions(eager_warmup=True))


def make_net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 3))


def batches(n, rows=8, seed=1):
    gen = torch.Generator().manual_seed(seed)
    return [(torch.randn(rows, 6, generator=gen), torch.randn(rows, 3, generator=gen)) for _ in range(n)]


def wait_for_capture(model):
    model._warmup.job.wait()


def step(model, opt, x, y):
    opt.zero_grad(set_to_none=True)
    out = model(x)
    loss = (out - y).pow(2).mean()
    loss.backward()
    opt.step()
    return out


def assert_same_state(ours, plain, ours_opt, plain_opt, what):
    for (name, p), q in zip(ours.named_parameters(), plain.parameters()):
        assert_close(p, q, f"{what}: {name}")
        assert (p.grad is None) == (q.grad is None), f"{what}: {name}.grad"
        if p.grad is not None:
            assert_close(p.grad, q.grad, f"{what}: {name}.grad")
    for (name, b), c in zip(ours.named_buffers(), plain.buffers()):
        assert_close(b, c, f"{what}: buffer {name}")
    for p, q in zip(ours.parameters(), plain.parameters()):
        for key, value in plain_opt.state[q].items():
            assert_close(ours_opt.state[p][key], value, f"{what}: optimizer state {key}")


def test_first_calls_run_eagerly_then_the_engine_takes_over_with_the_same_state(caplog):
    before = onnxtrain.statistics()
    plain = make_net()
    model = warm(copy.deepcopy(plain))
    opts = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (model, plain)]
    data = batches(6)
    with caplog.at_level("INFO", logger="onnxtrain"):
        for i, (x, y) in enumerate(data):
            if i == 2:
                wait_for_capture(model)
            out = step(model, opts[0], x, y)
            expected = step(plain, opts[1], x, y)
            assert_close(out, expected, f"step {i} output")
            if i < 2:  # the capture started at the first call; the third is the first after it is ready
                assert model.eager_warmup_runs == i + 1 and model.engine_runs == 0, i
                assert "ORTModuleFunction" not in type(out.grad_fn).__name__
            else:
                assert model.eager_warmup_runs == 2 and model.engine_runs == i - 1, i
                assert_engine_ran(out)
            assert_same_state(model, plain, opts[0], opts[1], f"step {i}")
    assert "capturing Sequential in the background" in caplog.text
    assert "Sequential switches from eager PyTorch to the engine" in caplog.text
    after = onnxtrain.statistics()
    assert after["background_captures"] - before["background_captures"] == 1
    assert after["switches"] - before["switches"] == 1
    assert after["eager_warmup_calls"] - before["eager_warmup_calls"] == 2


@pytest.mark.parametrize("how", ["option", "environment"])
def test_turned_off_the_first_call_blocks_and_runs_on_the_engine(monkeypatch, how):
    if how == "option":
        monkeypatch.setenv("ONNXTRAIN_EAGER_WARMUP", "1")
        model = onnxtrain.ORTModule(make_net(), debug_options=onnxtrain.DebugOptions(eager_warmup=False))
    else:
        monkeypatch.setenv("ONNXTRAIN_EAGER_WARMUP", "0")
        model = onnxtrain.ORTModule(make_net())
    out = model(torch.randn(4, 6))
    assert_engine_ran(out)
    assert model.engine_runs == 1 and model.eager_warmup_runs == 0


def test_the_environment_variable_is_on_by_default_and_checked(monkeypatch):
    monkeypatch.delenv("ONNXTRAIN_EAGER_WARMUP", raising=False)
    model = onnxtrain.ORTModule(make_net())
    model(torch.randn(4, 6))
    assert model.eager_warmup_runs == 1 and model.engine_runs == 0
    monkeypatch.setenv("ONNXTRAIN_EAGER_WARMUP", "sometimes")
    with pytest.raises(ValueError, match="ONNXTRAIN_EAGER_WARMUP takes 1 or 0, got 'sometimes'"):
        onnxtrain.ORTModule(make_net())
    with pytest.raises(TypeError, match=r"DebugOptions\(eager_warmup=...\) takes True, False or None"):
        onnxtrain.DebugOptions(eager_warmup=1)


def test_gradient_accumulation_across_the_switch():
    plain = make_net()
    model = warm(copy.deepcopy(plain))
    opts = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (model, plain)]
    data = batches(8)
    for k in range(4):  # micro-batches of two; the switch falls between the two of the second step
        for m, opt in zip((model, plain), opts):
            opt.zero_grad(set_to_none=True)
        for j in range(2):
            x, y = data[2 * k + j]
            if k == 1 and j == 1:
                wait_for_capture(model)
            for m in (model, plain):
                ((m(x) - y).pow(2).mean() / 2).backward()
        for opt in opts:
            opt.step()
        assert_same_state(model, plain, opts[0], opts[1], f"step {k}")
    assert model.eager_warmup_runs == 3 and model.engine_runs == 5


def test_no_grad_evaluation_between_steps_before_and_after_the_switch():
    plain = make_net()
    model = warm(copy.deepcopy(plain))
    opts = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (model, plain)]
    probe = torch.randn(5, 6)
    for i, (x, y) in enumerate(batches(4)):
        if i == 2:
            wait_for_capture(model)
        step(model, opts[0], x, y)
        step(plain, opts[1], x, y)
        for m in (model, plain):
            m.eval()
        with torch.no_grad():
            assert_close(model(probe), plain(probe), f"eval after step {i}")
        for m in (model, plain):
            m.train()
        assert_same_state(model, plain, opts[0], opts[1], f"step {i}")
    assert model.engine_runs >= 2  # the training calls after the switch; eval captures on its own
    # The eval structure got a capture of its own: once ready, eval calls run on the engine too.
    model.eval()
    with torch.no_grad():
        model(probe)
        if model._warmup.job is not None:
            wait_for_capture(model)
        runs = model.engine_runs
        model(probe)
    assert model.engine_runs == runs + 1


def test_a_checkpoint_loaded_during_the_warmup_is_what_the_engine_trains():
    plain = make_net()
    model = warm(copy.deepcopy(plain))
    opts = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (model, plain)]
    data = batches(5)
    step(model, opts[0], *data[0])
    step(plain, opts[1], *data[0])
    checkpoint = copy.deepcopy(make_net().state_dict())
    with torch.no_grad():
        for value in checkpoint.values():
            if value.is_floating_point():
                value.mul_(0.5)
    for m in (model, plain):
        m.load_state_dict(checkpoint)
    wait_for_capture(model)
    for i, (x, y) in enumerate(data[1:]):
        assert_close(step(model, opts[0], x, y), step(plain, opts[1], x, y), f"step {i + 1}")
        assert_same_state(model, plain, opts[0], opts[1], f"step {i + 1}")
    assert model.engine_runs == 4


def test_a_shape_change_after_the_switch_warms_up_again():
    torch.manual_seed(0)
    plain = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))
    model = warm(copy.deepcopy(plain))
    opts = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (model, plain)]
    x, y = batches(1)[0]
    step(model, opts[0], x, y)
    step(plain, opts[1], x, y)
    wait_for_capture(model)
    assert_engine_ran(step(model, opts[0], x, y))
    step(plain, opts[1], x, y)
    # A 3-d input (another rank) needs a graph of its own: its calls run eagerly until it is ready.
    x3, y3 = x.reshape(2, 4, 6), y.reshape(2, 4, 3)
    for i in range(3):
        if i == 1:
            wait_for_capture(model)
        out = step(model, opts[0], x3, y3)
        assert_close(out, step(plain, opts[1], x3, y3), f"3-d step {i}")
        assert_same_state(model, plain, opts[0], opts[1], f"3-d step {i}")
        if i >= 1:
            assert_engine_ran(out)
    assert model.eager_warmup_runs == 2 and model.engine_runs == 3


@pytest.fixture
def failing_exports(monkeypatch):
    """Every capture backend fails (in the forked child too, which inherits the patch)."""
    def fails(*args, **kwargs):
        raise ExportError("this module cannot be exported (the test's own failure)")

    for backend in onnxtrain.capture.BACKENDS.values():
        monkeypatch.setattr(backend, "export_once", fails)


def test_a_capture_that_fails_raises_at_the_switch(failing_exports):
    model = warm(make_net())
    x = torch.randn(4, 6)
    model(x).sum().backward()  # eager, while the capture fails beside it
    assert model.eager_warmup_runs == 1
    wait_for_capture(model)
    with pytest.raises(RuntimeError, match=r"onnxtrain cannot run Sequential: .*the test's own failure.*"
                                           r"ONNXTRAIN_FALLBACK=0"):
        model(x)


def test_a_capture_that_fails_falls_back_loudly_where_the_policy_allows(monkeypatch, failing_exports):
    monkeypatch.setenv("ONNXTRAIN_FALLBACK", "1")
    model = warm(make_net())
    x = torch.randn(4, 6)
    model(x)
    wait_for_capture(model)
    with pytest.warns(RuntimeWarning, match="falling back to PyTorch for Sequential: .*the test's own failure"):
        model(x)
    assert "the test's own failure" in model.fallback_reason


def test_train_step_runs_the_four_lines_eagerly_then_whole_steps_on_the_engine():
    plain = make_net()
    net = copy.deepcopy(plain)

    class WithLoss(nn.Module):
        def __init__(self, net):
            super().__init__()
            self.net = net

        def forward(self, x, y):
            return (self.net(x) - y).pow(2).mean()

    wrapped = warm(WithLoss(net))
    opt = onnxtrain.optim.SGD(wrapped.parameters(), lr=0.1, momentum=0.9)
    plain_opt = torch.optim.SGD(plain.parameters(), lr=0.1, momentum=0.9)
    train = onnxtrain.TrainStep(wrapped, opt)
    for i, (x, y) in enumerate(batches(5)):
        if i == 1:
            wait_for_capture(wrapped)
        loss = train(x, y)
        plain_opt.zero_grad(set_to_none=True)
        expected = (plain(x) - y).pow(2).mean()
        expected.backward()
        plain_opt.step()
        assert_close(loss, expected.detach(), f"step {i} loss")
        assert_same_state(net, plain, opt, plain_opt, f"step {i}")
    assert wrapped.eager_warmup_runs == 1 and train.whole_steps >= 2


def test_audit_captures_blocking_during_the_warmup():
    model = warm(make_net())
    x = torch.randn(4, 6)
    model(x)
    report = onnxtrain.audit(model, x)
    assert report.rows and model.eager_warmup_runs == 1


def test_ddp_ranks_switch_at_the_same_call(tmp_path):
    worker = os.path.join(os.path.dirname(__file__), "ddp_worker.py")
    port = str(free_port())
    outs = [str(tmp_path / f"rank{r}.pt") for r in range(2)]
    env = dict(os.environ, OMP_NUM_THREADS="1", ONNXTRAIN_NUM_THREADS="1", ONNXTRAIN_EAGER_WARMUP="1")
    run_processes([[sys.executable, worker, str(r), "2", port, outs[r], "warmup"] for r in range(2)], [env, env],
                  timeout=180)
    results = [torch.load(o) for o in outs]
    runs = [r["engine_runs_by_step"] for r in results]
    assert runs[0] == runs[1], runs
    # Rank 1's capture was ready from the second step on, rank 0's (held back) only from the fifth.
    assert runs[0] == [0, 0, 0, 0, 1, 2, 3, 4], runs
    for name, value in results[0]["ours"].items():
        assert torch.equal(value, results[1]["ours"][name]), f"{name} differs across ranks"
        assert_close(value, results[0]["theirs"][name], f"{name} vs plain DDP")


def test_a_module_change_during_the_warmup_captures_again():
    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(6, 3)
            self.scale = 1.0

        def forward(self, x):
            return self.fc(x) * self.scale

    torch.manual_seed(0)
    net = Scaled()
    plain = copy.deepcopy(net)
    model = warm(net)
    x = torch.randn(4, 6)
    model(x)
    first_job = model._warmup.job
    model.scale = 3.0  # the running capture traced 1.0: it is dropped, and the next call captures anew
    plain.scale = 3.0
    assert model._warmup.job is None
    assert_close(model(x), plain(x), "eager call after the change")
    assert model._warmup.job is not None and model._warmup.job is not first_job
    wait_for_capture(model)
    out = model(x)
    assert_engine_ran(out)
    assert_close(out, plain(x), "engine call after the change")


def test_the_capture_gets_a_core_of_its_own_and_the_threads_come_back():
    cores = len(os.sched_getaffinity(0))
    if cores < 2:
        pytest.skip("one core: the eager calls keep their single thread")
    threads = torch.get_num_threads()
    torch.set_num_threads(cores)
    try:
        model = warm(make_net())
        x = torch.randn(4, 6)
        model(x)  # starts the capture: while it runs, the eager calls leave it a core
        assert torch.get_num_threads() == cores - 1
        wait_for_capture(model)
        assert_engine_ran(model(x))
        assert torch.get_num_threads() == cores
    finally:
        torch.set_num_threads(threads)


def test_a_module_torch_export_refuses_is_captured_by_torchscript_beside_the_eager_calls(monkeypatch):
    from conftest import torch_export_capture

    def refuses(*args, **kwargs):
        raise ExportError("torch.export refuses this module (the test's own refusal)")

    monkeypatch.setattr(onnxtrain.capture.BACKENDS["torch_export"], "export_once", refuses)
    plain = make_net()
    model = warm(copy.deepcopy(plain))
    x = torch.randn(4, 6)
    model(x)
    if torch_export_capture():  # the default capture refuses it: TorchScript's child is forked next
        with pytest.warns(RuntimeWarning, match="TorchScript exporter .*the test's own refusal"):
            wait_for_capture(model)
    else:
        wait_for_capture(model)
    out = model(x)
    assert_engine_ran(out)
    assert_close(out, plain(x), "output")
    assert model.eager_warmup_runs == 1 and model.engine_runs == 1


TORCH_2 = int(torch.__version__.split(".")[0]) >= 2


@pytest.mark.parametrize("dtype", [pytest.param(torch.bfloat16, id="bfloat16"),
                                   pytest.param(torch.float16, id="float16", marks=pytest.mark.skipif(
                                       not TORCH_2, reason="torch 1.13's CPU autocast has no float16"))])
def test_under_autocast_the_warmup_and_the_engine_both_compute_in_the_16_bit_type(dtype):
    torch.manual_seed(0)
    plain = nn.Sequential(nn.Linear(6, 16), nn.GELU(), nn.Linear(16, 3))
    model = warm(copy.deepcopy(plain))
    x = torch.randn(4, 6)
    for i in range(3):
        if i == 1:
            wait_for_capture(model)
        with torch.autocast("cpu", dtype=dtype):
            out, expected = model(x), plain(x)
        assert out.dtype == expected.dtype == dtype, i
        # Eager's call and the engine's round at different points: a few 16-bit steps apart at most.
        torch.testing.assert_close(out, expected, rtol=2e-2, atol=2e-2, msg=lambda m: f"call {i}: {m}")
        if i >= 1:
            assert_engine_ran(out)
    assert model.eager_warmup_runs == 1 and model.engine_runs == 2
