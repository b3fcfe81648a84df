#!/usr/bin/python3
"""RSS of a training job that sees a new batch size on every step (issue 11's probe): the MLP
256-2048-2048-10, SGD, batch sizes 1..N, each run twice (the second run of a shape builds its
memory plan). Prints RSS every `--every` sizes; the plan and buffer caches are held to
--plan-mb / --buffer-mb (None: the defaults, ONNXTRAIN_PLAN_CACHE_MB / ONNXTRAIN_BUFFER_CACHE_MB).

    /usr/bin/python3 bench/memory_budget.py --sizes 1000 --threads 2
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

import onnxtrain  # noqa: E402


def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, default=1000)
    parser.add_argument("--every", type=int, default=100)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--plan-mb", type=int, default=None)
    parser.add_argument("--buffer-mb", type=int, default=None)
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    onnxtrain.set_num_threads(args.threads)
    module = nn.Sequential(nn.Linear(256, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 10))
    model = onnxtrain.ORTModule(module, onnxtrain.DebugOptions(plan_cache_mb=args.plan_mb,
                                                               buffer_cache_mb=args.buffer_mb, eager_warmup=False))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    print(f"budgets: plan cache {onnxtrain._C.arena_budget() >> 20} MiB, buffer cache "
          f"{onnxtrain._C.buffer_cache_limit() >> 20} MiB; start RSS {rss_mb():.0f} MB")
    start = time.perf_counter()
    for batch in range(1, args.sizes + 1):
        for _ in range(2):
            opt.zero_grad()
            model(torch.randn(batch, 256)).square().mean().backward()
            opt.step()
        if batch % args.every == 0 or batch == args.sizes:
            print(f"{batch:5d} sizes: RSS {rss_mb():7.0f} MB, idle arenas "
                  f"{onnxtrain._C.idle_arena_bytes() / 2**20:6.0f} MiB, cached buffers "
                  f"{onnxtrain._C.cached_buffer_bytes() / 2**20:6.0f} MiB, {time.perf_counter() - start:6.0f} s",
                  flush=True)


if __name__ == "__main__":
    main()
