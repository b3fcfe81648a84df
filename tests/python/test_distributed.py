"""DistributedDataParallel over ORTModule, gloo backend, 2 processes on 127.0.0.1."""
import os
import sys

import torch

from conftest import assert_close, free_port, run_processes


def test_ddp_two_ranks_match_plain_pytorch_ddp(tmp_path):
    worker = os.path.join(os.path.dirname(__file__), "ddp_worker.py")
    port = str(free_port())
    outs = [str(tmp_path / f"rank{r}.pt") for r in range(2)]
    env = dict(os.environ, OMP_NUM_THREADS="1", ONNXTRAIN_NUM_THREADS="1")
    run_processes([[sys.executable, worker, str(r), "2", port, outs[r]] for r in range(2)], [env, env], timeout=180)
    results = [torch.load(o) for o in outs]
    for name, value in results[0]["ours"].items():
        assert torch.equal(value, results[1]["ours"][name]), f"{name} differs across ranks"
        assert_close(value, results[0]["theirs"][name], f"{name} vs plain DDP")
