"""Logging, the first-step report, and the export cache across processes."""
import logging
import os
import subprocess
import sys

import torch
import torch.nn as nn

import onnxtrain


def test_logging_goes_through_python_logging_and_respects_the_level(caplog):
    with caplog.at_level(logging.DEBUG, logger="onnxtrain"):
        onnxtrain.ORTModule(nn.Linear(3, 2), onnxtrain.DebugOptions(log_level=onnxtrain.LogLevel.WARNING))(
            torch.ones(1, 3)).sum().backward()
        assert not [r for r in caplog.records if r.levelno < logging.WARNING]
        caplog.clear()
        model = onnxtrain.ORTModule(nn.Linear(3, 2), onnxtrain.DebugOptions(log_level=onnxtrain.LogLevel.INFO))
        model(torch.ones(1, 3)).sum().backward()
    messages = [r.getMessage() for r in caplog.records if r.name == "onnxtrain"]
    assert any("exported Linear in train mode in" in m for m in messages), messages
    assert any("built the training graph of Linear in" in m for m in messages), messages
    assert any("first training forward of Linear took" in m and "bytes saved for backward" in m for m in messages)
    onnxtrain.ORTModule(nn.Identity(), onnxtrain.DebugOptions())  # restore WARNING for later tests


def run_worker(cache_dir):
    worker = os.path.join(os.path.dirname(__file__), "cache_worker.py")
    env = dict(os.environ, ONNXTRAIN_CACHE_DIR=str(cache_dir))
    done = subprocess.run([sys.executable, worker], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines() if line.startswith(("EXPORTS", "OUTPUT")))
    return int(lines["EXPORTS"]), float(lines["OUTPUT"]), done.stderr


def test_cache_dir_lets_a_new_process_skip_the_export(tmp_path):
    exports, first, _ = run_worker(tmp_path)
    assert exports == 1 and os.listdir(tmp_path)
    exports, second, log = run_worker(tmp_path)
    assert exports == 0, log
    assert "loaded the train export of Sequential from the cache" in log
    assert second == first


def test_profile_has_one_event_per_kernel_with_op_shapes_and_time(tmp_path):
    import json

    path = tmp_path / "trace.json"
    model = onnxtrain.ORTModule(nn.Sequential(nn.Linear(3, 5), nn.ReLU(), nn.Linear(5, 2)))
    with onnxtrain.profiler.profile(path):
        model(torch.ones(4, 3)).sum().backward()
    events = json.loads(path.read_text())["traceEvents"]
    forward = [e for e in events if e["cat"] == "forward"]
    backward = [e for e in events if e["cat"] == "backward"]
    assert [e["name"] for e in forward] == ["Gemm", "Relu", "Gemm"]
    assert forward[0]["args"]["shapes"].startswith("float32[4x3], float32[5x3], float32[5]")
    assert any(e["name"] == "ReluGrad" for e in backward)
    assert all(e["ph"] == "X" and e["dur"] >= 0 and "node" in e["args"] for e in events)
