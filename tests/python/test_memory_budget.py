"""Memory stays inside its budget however many input shapes a training job sees (variable
sequence lengths, last batches): each shape's memory plan and arena are cached, but only up to
DebugOptions(plan_cache_mb=...), and freed buffers only up to buffer_cache_mb."""
import os
import subprocess
import sys
import textwrap

import onnxtrain

PACKAGE_DIR = os.path.dirname(os.path.dirname(onnxtrain.__file__))

WORKER = """
import torch, torch.nn as nn, onnxtrain

def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20

torch.manual_seed(0)
torch.set_num_threads(1)
onnxtrain.set_num_threads(1)
module = nn.Sequential(nn.Linear(256, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 10))
model = onnxtrain.ORTModule(module, onnxtrain.DebugOptions(plan_cache_mb=__PLAN_MB__, buffer_cache_mb=__BUFFER_MB__))
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
for batch in range(1, __SIZES__ + 1):
    for _ in range(2):  # a shape's second run builds and keeps its plan
        opt.zero_grad()
        model(torch.randn(batch, 256)).square().mean().backward()
        opt.step()
    if batch == __WARM__:
        warm = rss_mb()
print("WARM", warm)
print("END", rss_mb())
print("IDLE_ARENAS", onnxtrain._C.idle_arena_bytes())
print("CACHED_BUFFERS", onnxtrain._C.cached_buffer_bytes())
print("RUNS", model.engine_runs)
"""


def run_worker(sizes, warm, plan_mb, buffer_mb):
    code = (WORKER.replace("__PLAN_MB__", str(plan_mb)).replace("__BUFFER_MB__", str(buffer_mb))
            .replace("__SIZES__", str(sizes)).replace("__WARM__", str(warm)))
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=600, env=dict(os.environ, PYTHONPATH=PACKAGE_DIR))
    assert done.returncode == 0, done.stdout + done.stderr
    return {k: float(v) for k, v in (line.split() for line in done.stdout.splitlines())}


def test_rss_over_many_batch_sizes_stays_within_the_budget():
    plan_mb, buffer_mb = 48, 48
    stats = run_worker(sizes=160, warm=40, plan_mb=plan_mb, buffer_mb=buffer_mb)
    assert stats["RUNS"] == 320  # every call ran in the engine
    assert stats["IDLE_ARENAS"] <= plan_mb << 20
    assert stats["CACHED_BUFFERS"] <= buffer_mb << 20
    # Without the bound, every shape kept its arena: about 8 MB more per batch size here, over
    # 1 GB across these 120. With it, growth after warm-up is what the budgets allow, plus a
    # constant for the allocator and the batches' own growth.
    growth = stats["END"] - stats["WARM"]
    assert growth < plan_mb + buffer_mb + 64, stats
