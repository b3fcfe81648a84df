"""One rank of the DDP test: trains DDP(ORTModule(net)) and plain DDP(net) side by side."""
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn

sys.path.insert(0, os.environ.get("ONNXTRAIN_PYTHONPATH", os.path.join(os.path.dirname(__file__), "..", "..", "python")))
import onnxtrain  # noqa: E402


def hold_back_capture(ortmodule, until_step, current_step):
    """Rank 0's capture reports ready only from step `until_step` on, as a slower rank's would."""
    job = ortmodule._warmup.job
    ready = job.poll
    job.poll = lambda: current_step[0] >= until_step and ready()


def main(rank, world, port, out_path, warmup=False):
    os.environ["ONNXTRAIN_FALLBACK"] = "0"
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    torch.manual_seed(0)  # the same initial weights on every rank
    net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    plain = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    plain.load_state_dict(net.state_dict())
    ours = nn.parallel.DistributedDataParallel(onnxtrain.ORTModule(net))
    theirs = nn.parallel.DistributedDataParallel(plain)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (ours, theirs)]
    gen = torch.Generator().manual_seed(100 + rank)  # each rank sees different data
    current_step, engine_runs_by_step = [0], []
    for step in range(8 if warmup else 3):
        current_step[0] = step
        if warmup and step == 1:  # the eager warm-up (ONNXTRAIN_EAGER_WARMUP=1): both ranks' captures are
            ours.module._warmup.job.wait()  # done, but rank 0's says so only from step 4 on
            if rank == 0:
                hold_back_capture(ours.module, 4, current_step)
        x, y = torch.randn(6, 8, generator=gen), torch.randn(6, 4, generator=gen)
        for model, opt in zip((ours, theirs), opts):
            out = model(x)
            loss = (out - y).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        engine_runs_by_step.append(ours.module.engine_runs)
    assert "ORTModuleFunction" in type(ours(x).grad_fn).__name__
    torch.save({"ours": net.state_dict(), "theirs": plain.state_dict(), "engine_runs_by_step": engine_runs_by_step},
               out_path)
    dist.barrier()  # as in ddp_nodes_worker.py: both finish, and the group is left to the exit


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5:] == ["warmup"])
