"""One rank of test_ddp_across_nodes.py, started by torchrun (or, on torch 1.13, with torchrun's
environment by the test): trains DistributedDataParallel(ORTModule(net)) with SGD and with
ZeroRedundancyOptimizer on this rank's half of each global batch, and saves the parameters."""
import faulthandler
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.optim import ZeroRedundancyOptimizer

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.environ.get("ONNXTRAIN_PYTHONPATH", os.path.join(os.path.dirname(__file__), "..", "..", "python")))
import onnxtrain  # noqa: E402
from test_ddp_across_nodes import GLOBAL_BATCH, STEPS, batches, make_net  # noqa: E402


def train(rank, world, zero):
    net = make_net()
    model = torch.nn.parallel.DistributedDataParallel(onnxtrain.ORTModule(net))
    if zero:
        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.SGD, lr=0.1, momentum=0.9)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    share = GLOBAL_BATCH // world
    for x, y in batches():
        out = model(x[rank * share:(rank + 1) * share])
        assert "ORTModuleFunction" in type(out.grad_fn).__name__, "the engine did not run"
        loss = torch.nn.functional.cross_entropy(out, y[rank * share:(rank + 1) * share])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return {name: p.detach().clone() for name, p in net.named_parameters()}


def main(out_dir):
    # A hang shows where each thread waits, well inside the test's 240 s.
    faulthandler.dump_traceback_later(150, exit=False)
    os.environ["ONNXTRAIN_FALLBACK"] = "0"
    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    results = {"sgd": train(rank, world, zero=False), "zero": train(rank, world, zero=True),
               "node": os.environ.get("GROUP_RANK", os.environ.get("NODE_RANK", "")), "steps": STEPS}
    torch.save(results, os.path.join(out_dir, f"rank{rank}.pt"))
    # Both ranks finish before either leaves. The group is not destroyed: on torch 2.4,
    # destroy_process_group hung in the rank whose peer, the host of the group's store, had
    # already destroyed its group and exited (even after a barrier); exiting frees it all.
    dist.barrier()


if __name__ == "__main__":
    main(sys.argv[1])
