"""DistributedDataParallel over ORTModule, gloo backend, 2 processes on 127.0.0.1."""
import os
import socket
import subprocess
import sys

import torch

from conftest import assert_close


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ddp_two_ranks_match_plain_pytorch_ddp(tmp_path):
    worker = os.path.join(os.path.dirname(__file__), "ddp_worker.py")
    port = str(free_port())
    outs = [str(tmp_path / f"rank{r}.pt") for r in range(2)]
    env = dict(os.environ, OMP_NUM_THREADS="1", ONNXTRAIN_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, worker, str(r), "2", port, outs[r]], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for r in range(2)]
    try:
        logs = [p.communicate(timeout=180)[0].decode(errors="replace") for p in procs]
    finally:
        for p in procs:
            p.kill()
    for r, p in enumerate(procs):
        assert p.returncode == 0, f"rank {r} failed:\n{logs[r]}"
    results = [torch.load(o) for o in outs]
    for name, value in results[0]["ours"].items():
        assert torch.equal(value, results[1]["ours"][name]), f"{name} differs across ranks"
        assert_close(value, results[0]["theirs"][name], f"{name} vs plain DDP")
