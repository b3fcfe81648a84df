"""DistributedDataParallel(ORTModule(net)) across two nodes: two torchrun agents on this machine
(--nnodes 2 --nproc-per-node 1, a c10d rendezvous on 127.0.0.1, gloo), each rank training on its
half of every global batch, with SGD and with ZeroRedundancyOptimizer. Every rank's parameters
must equal a single-process run on the whole global batch. torch 1.13's torchrun fails on Python
3.11 inside its own elastic agent: there the two ranks are started with the environment torchrun
gives them (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT: env:// initialization)."""
import os
import sys
import uuid

import pytest
import torch

from conftest import assert_close, free_port, run_processes

GLOBAL_BATCH, STEPS = 12, 3


def make_net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 6, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(2),
                               torch.nn.Flatten(), torch.nn.Linear(24, 5))


def batches():
    gen = torch.Generator().manual_seed(7)
    return [(torch.randn(GLOBAL_BATCH, 3, 8, 8, generator=gen), torch.randint(0, 5, (GLOBAL_BATCH,), generator=gen))
            for _ in range(STEPS)]


def single_process_run():
    net = make_net()
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    for x, y in batches():
        loss = torch.nn.functional.cross_entropy(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return dict(net.named_parameters())


def torchrun_works():
    return int(torch.__version__.split(".")[0]) >= 2


def launch(out_dir):
    worker = os.path.join(os.path.dirname(__file__), "ddp_nodes_worker.py")
    port = str(free_port())
    env = dict(os.environ, OMP_NUM_THREADS="1", ONNXTRAIN_NUM_THREADS="1")
    if torchrun_works():
        rendezvous = ["--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
                      "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", uuid.uuid4().hex, "--rdzv-conf", "join_timeout=120",
                      "--max-restarts", "0"]
        commands = [[sys.executable, "-m", "torch.distributed.run", *rendezvous, worker, out_dir] for _ in range(2)]
        envs = [env, env]
    else:
        commands = [[sys.executable, worker, out_dir] for _ in range(2)]
        envs = [dict(env, RANK=str(r), WORLD_SIZE="2", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1", GROUP_RANK=str(r),
                     MASTER_ADDR="127.0.0.1", MASTER_PORT=port) for r in range(2)]
    run_processes(commands, envs, timeout=240)


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    """Both optimizers trained in one launch of the two nodes."""
    out_dir = tmp_path_factory.mktemp("ddp_nodes")
    launch(str(out_dir))
    return [torch.load(out_dir / f"rank{r}.pt") for r in range(2)]


@pytest.mark.parametrize("optimizer", ["sgd", "zero"])
def test_ddp_across_two_nodes_equals_one_process_on_the_global_batch(ranks, optimizer):
    assert sorted(r["node"] for r in ranks) == ["0", "1"], "the two ranks did not run on two nodes"
    reference = single_process_run()
    for r, result in enumerate(ranks):
        for name, value in result[optimizer].items():
            assert_close(value, reference[name], f"rank {r} {name} ({optimizer})")
