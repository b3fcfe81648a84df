#!/usr/bin/python3
"""The trade-off of DebugOptions(memory_optimization="recompute") on a zoo model (default: the
Transformer): memory against step time, "none" and "recompute" measured in alternating fresh
processes (A/B pairs) at equal threads. Per process: the bytes the forward keeps for backward
(ForwardCall.stashed_bytes), the bytes recomputed instead (recomputed_bytes), the memory plan's
arena (idle after the last step: one plan for the one batch shape), peak RSS, and the median
time of the timed steps. Writes bench/results/memory_optimization/report.{md,json} and, for the
default model and thread counts, README.md's block between the memopt markers.

    bench/run --memory-tradeoff                      # transformer, 1 and 2 threads, 3 pairs
    bench/run --memory-tradeoff --pairs 5 --threads-list 1
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.environ.get("ONNXTRAIN_PYTHONPATH", os.path.join(ROOT, "python")))
import bench  # noqa: E402  (its README writer)

MODES = ("none", "recompute")
README_BEGIN, README_END = "<!-- memopt:begin -->", "<!-- memopt:end -->"


def measure(model_name, mode, warmup, steps, threads):
    import torch

    import models
    import onnxtrain
    from onnxtrain import _engine

    torch.set_num_threads(threads)
    onnxtrain.set_num_threads(threads)
    stash = []
    original = _engine.TrainingRun.forward

    def recording(self, tensors):
        outputs, call = original(self, tensors)
        stash.append((call.stashed_bytes(), call.recomputed_bytes()))
        return outputs, call

    _engine.TrainingRun.forward = recording
    torch.manual_seed(0)
    model = onnxtrain.ORTModule(models.build(model_name), onnxtrain.DebugOptions(memory_optimization=mode,
                                                                                  eager_warmup=False))
    opt = onnxtrain.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    batch = models.ZOO[model_name]["batch_fn"](torch.Generator().manual_seed(1))
    times = []
    for step in range(warmup + steps):
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        model(*batch).backward()
        opt.step()
        if step >= warmup:
            times.append(time.perf_counter() - start)
    assert model.fallback_reason is None, model.fallback_reason
    return dict(stashed_bytes=stash[-1][0], recomputed_bytes=stash[-1][1], arena_bytes=onnxtrain._C.idle_arena_bytes(),
                peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                step_ms=1e3 * statistics.median(times))


def spawn(model_name, mode, args, threads):
    cmd = [sys.executable, __file__, "--single", model_name, mode, "--warmup", str(args.warmup), "--steps",
           str(args.steps), "--threads", str(threads)]
    env = dict(os.environ, ONNXTRAIN_FALLBACK="0", OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads))
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode or not lines:
        sys.exit(f"{model_name} {mode} failed:\n{done.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def spread(values, fmt):
    return f"{fmt.format(statistics.median(values))} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def table(model_name, results, args):
    mib = 2 ** 20
    lines = [f"`bench/run --memory-tradeoff`: {model_name}, {args.pairs} fresh-process A/B pairs per thread count, "
             f"{args.warmup} warm-up + {args.steps} timed steps each; median of pairs (min-max). Time ratio: "
             "recompute over none within each pair.", "",
             "| threads | mode | stash MiB | recomputed MiB | arena MiB | peak RSS MB | step ms | time ratio |",
             "|---|---|---|---|---|---|---|---|"]
    for threads, pairs in results.items():
        ratios = [p["recompute"]["step_ms"] / p["none"]["step_ms"] for p in pairs]
        for mode in MODES:
            runs = [p[mode] for p in pairs]
            ratio = spread(ratios, "{:.2f}") if mode == "recompute" else "1"
            lines.append(
                f"| {threads} | {mode} | {statistics.median(r['stashed_bytes'] for r in runs) / mib:.1f} | "
                f"{statistics.median(r['recomputed_bytes'] for r in runs) / mib:.1f} | "
                f"{statistics.median(r['arena_bytes'] for r in runs) / mib:.1f} | "
                f"{statistics.median(r['peak_rss_mb'] for r in runs):.0f} | "
                f"{spread([r['step_ms'] for r in runs], '{:.1f}')} | {ratio} |")
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="transformer")
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--threads-list", default="1,2")
    p.add_argument("--out", default=os.path.join(HERE, "results", "memory_optimization"))
    p.add_argument("--single", nargs=2, metavar=("MODEL", "MODE"), help=argparse.SUPPRESS)
    p.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.single:
        print("RESULT " + json.dumps(measure(*args.single, args.warmup, args.steps, args.threads)))
        return
    results = {}
    for threads in [int(t) for t in args.threads_list.split(",")]:
        results[threads] = []
        for pair in range(args.pairs):
            order = MODES if pair % 2 == 0 else MODES[::-1]  # alternate which one runs first
            runs = {mode: spawn(args.model, mode, args, threads) for mode in order}
            results[threads].append(runs)
            print(f"[memopt] {threads} thread(s), pair {pair + 1}: "
                  + ", ".join(f"{m} {runs[m]['step_ms']:.1f} ms" for m in MODES), flush=True)
    report = table(args.model, results, args)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "report.md"), "w") as f:
        f.write(report)
    with open(os.path.join(args.out, "report.json"), "w") as f:
        json.dump(dict(model=args.model, results=results), f, indent=1)
    print(report)
    if args.model == "transformer" and args.threads_list == "1,2":
        bench.update_readme(report, (README_BEGIN, README_END))
        print("[memopt] README.md updated")


if __name__ == "__main__":
    main()
