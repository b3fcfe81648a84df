import os
import sys

import pytest
import torch

# ONNXTRAIN_PYTHONPATH points the tests at another build of the package (a private build dir).
sys.path.insert(0, os.environ.get("ONNXTRAIN_PYTHONPATH", os.path.join(os.path.dirname(__file__), "..", "..", "python")))

RTOL, ATOL = 1e-4, 1e-5

# The suite's tests judge the engine's runs, so every call captures blocking (as it would with
# DebugOptions(eager_warmup=False)) and runs on the engine from the first call on; the eager
# warm-up itself, the default for users, has its own tests (test_eager_warmup.py), which turn it
# on. Worker processes the tests start inherit this.
os.environ.setdefault("ONNXTRAIN_EAGER_WARMUP", "0")

# torch's autograd engine starts its device threads once per process, at the first backward, one
# per device it counts, and torch.export's fake tensors make CUDA count devices even without a GPU
# (FakeTensorMode installs a no-op CUDA device guard). In a worker whose first backward follows an
# export in the worker itself (ONNXTRAIN_EXPORT_IN_PROCESS=1, or a result the forked child cannot
# send back, such as a Function class defined inside a test), the engine starts such threads, and
# torch then refuses autograd in every child forked later: the exports of custom Functions then
# run in the worker (capture/common.py), and the call counts of test_custom_functions.py count
# their probes too. One backward here counts the devices before any export.
_warm = torch.zeros((), requires_grad=True)
(_warm * 2).backward()
del _warm


@pytest.fixture(autouse=True)
def no_silent_fallback(monkeypatch):
    """Engine tests fail rather than pass through PyTorch: fallback raises unless a test allows it."""
    monkeypatch.setenv("ONNXTRAIN_FALLBACK", "0")


def assert_close(actual, expected, what=""):
    torch.testing.assert_close(actual, expected, rtol=RTOL, atol=ATOL, msg=lambda m: f"{what}: {m}")


def torch_export_capture():
    """Whether modules are captured with torch.export (ONNXTRAIN_CAPTURE=torch_export or auto):
    tests of what only one capture does (torch.export fixes dims of size 0 and 1, so a batch of 1
    gets an export of its own) ask this."""
    import onnxtrain.capture

    return onnxtrain.capture.backend_name() == "torch_export"


def assert_engine_ran(output):
    assert output.grad_fn is not None, "output has no grad_fn: the engine did not run"
    assert "ORTModuleFunction" in type(output.grad_fn).__name__, type(output.grad_fn).__name__


def export_onnx_file(*args, **kwargs):
    """torch.onnx.export through the TorchScript-based exporter on every torch version (torch 2.9+
    defaults to the dynamo exporter, whose IR version 10 and opset 18 models the C++ product, on
    Debian's onnx 1.12, does not read yet): the models the CLI tests train."""
    from onnxtrain.capture.torchscript import torch_onnx

    return torch_onnx.export(*args, **kwargs)


def _fallback_reasons():
    """The first line of each export the torch.export capture handed to TorchScript in this process."""
    import re

    import onnxtrain.capture

    reasons = []
    for _, reason in onnxtrain.capture.FALLBACKS:
        first = reason.splitlines()[0]
        first = re.sub(r"for \w+:", "for M:", first)
        first = re.sub(r"export \w+:", "export M:", first)
        reasons.append(first[:160])
    return reasons


_WORKER_FALLBACKS = []  # with pytest-xdist: what each worker sent when it finished


def pytest_sessionfinish(session):
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: the controller writes the summary
        workeroutput["onnxtrain_fallbacks"] = _fallback_reasons()


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: absent without it
def pytest_testnodedown(node, error):
    _WORKER_FALLBACKS.extend(getattr(node, "workeroutput", {}).get("onnxtrain_fallbacks", []))


def pytest_terminal_summary(terminalreporter):
    """Where the torch.export capture is used: how many exports it handed to TorchScript, and why
    (the first line of each reason, most frequent first)."""
    import collections

    import onnxtrain.capture

    if onnxtrain.capture.backend_name() != "torch_export":
        return
    reasons = collections.Counter(_fallback_reasons() + _WORKER_FALLBACKS)
    terminalreporter.write_line(f"onnxtrain: {sum(reasons.values())} exports fell back from torch.export to "
                                "TorchScript")
    for reason, count in reasons.most_common(25):
        terminalreporter.write_line(f"  {count:4d}  {reason}")


def pytest_configure(config):
    config.addinivalue_line("markers", "zoo: a model of a zoo (HuggingFace, timm) trained at the float64 floor; "
                                       "scripts/test.sh runs these at the default optimizer level only")


def pytest_collection_modifyitems(session, config, items):
    # pytest-xdist hands tests out in collection order. The long ones go first, the longest (the zoos'
    # audits, minutes each on torch 2.15) before the zoos' models, so that the workers finish
    # together instead of one of them running the alphabetically last files alone at the end.
    def cost_rank(item):
        return 0 if "every_node" in item.name else 1 if item.get_closest_marker("zoo") else 2

    items.sort(key=cost_rank)


@pytest.fixture
def no_fallback(monkeypatch):
    """The capture this torch uses by default, named so that it cannot fall back; no PyTorch fallback."""
    import zoo_parity

    zoo_parity.without_fallback(monkeypatch)


def _descendants(pid):
    """Every live process below `pid` (Linux /proc)."""
    import os

    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parent = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def run_processes(commands, envs, timeout=300):
    """Runs the commands side by side (each with its environment); a failure or a hang stops them
    all, with every process they started, and shows every process's output."""
    import os
    import signal
    import subprocess
    import threading
    import time

    procs = [subprocess.Popen(c, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for c, e in zip(commands, envs)]
    logs = [[] for _ in procs]

    def read(pipe, log):
        # A child the process started may keep the pipe open after the process ends: the reader
        # is a daemon, and the logs are taken as they stand.
        for line in iter(pipe.readline, b""):
            log.append(line)

    readers = [threading.Thread(target=read, args=(p.stdout, log), daemon=True) for p, log in zip(procs, logs)]
    for reader in readers:
        reader.start()
    deadline = time.monotonic() + timeout

    def running():
        codes = [p.poll() for p in procs]
        # One process failing leaves its peers waiting for it: stop them too.
        return None in codes and not any(code not in (None, 0) for code in codes)

    while running() and time.monotonic() < deadline:
        time.sleep(0.1)
    hung = running()
    # torchrun starts each worker in a session of its own: collect the whole tree before killing.
    doomed = {pid for p in procs for pid in [p.pid, *_descendants(p.pid)]}
    for pid in doomed:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for p in procs:
        p.wait()
    for reader in readers:
        reader.join(timeout=1.0)
    texts = [b"".join(log).decode(errors="replace") for log in logs]
    for r, p in enumerate(procs):
        if hung or p.returncode != 0:
            why = f"did not finish in {timeout} s" if hung else "failed"
            raise AssertionError(f"process {r} {why}:\n"
                                 + "\n".join(f"--- process {k}:\n{t[-3000:]}" for k, t in enumerate(texts)))


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago (for a process group's rendezvous)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
