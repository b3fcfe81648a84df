"""Where onnxtrain's step goes: the engine's per-kernel profile of one zoo model, summed by op type.

    bench/run --profile transformer [--threads 1] [--steps 5] [--warmup 3] [--contender onnxtrain-1.13]

The contender runs in its own venv, in a fresh process, as in bench/bench.py (same model, batches,
threads and training step). After the warm-up, `--steps` steps run under the engine's profiler
(onnxtrain.profiler, one event per kernel). The table gives each op type's kernel time per step,
its share of the step's wall time, and what the kernels do not account for: the time outside the
engine's kernels (PyTorch's autograd and optimizer around the engine call, the boundary's copies,
the executor's own work), as the step's wall time minus the sum of its kernels.
"""
# Not named profile.py: bench/ is on sys.path, and that would hide the standard library's profile
# module, which cProfile, and so torch._dynamo, imports.
import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.environ.get("ONNXTRAIN_PYTHONPATH", os.path.join(ROOT, "python")))
sys.path.insert(0, HERE)
# The profile is the engine's steps, from the first call on: no call runs in eager PyTorch while
# the capture goes on (ORTModule's eager warm-up).
os.environ["ONNXTRAIN_EAGER_WARMUP"] = "0"


def measure(args):
    """In the contender's interpreter: warm up, profile `args.steps` steps, print one JSON line."""
    import bench
    import onnxtrain
    bench._setup(args.threads, with_engine=True)
    c = bench.Contender(args.contender, args.model, None)
    for _ in range(args.warmup):
        c.step()
    trace = os.path.join(tempfile.mkdtemp(), "trace.json")
    onnxtrain.profiler.start(trace)
    start = time.perf_counter()
    step_times = [c.step() for _ in range(args.steps)]
    wall = time.perf_counter() - start
    onnxtrain.profiler.stop()
    with open(trace) as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    by_op = collections.defaultdict(lambda: [0.0, 0])
    for e in events:
        key = (e.get("cat", ""), e["args"].get("op", e["name"]))
        by_op[key][0] += e["dur"] * 1e-6
        by_op[key][1] += 1
    print(json.dumps(dict(steps=args.steps, wall=wall, step_median=statistics.median(step_times),
                          ops=[[cat, op, seconds, calls] for (cat, op), (seconds, calls) in by_op.items()])))


def measure_first_steps(args):
    """In the contender's interpreter: each of the first `args.steps` steps under its own profile."""
    import resource

    import bench
    import onnxtrain
    bench._setup(args.threads, with_engine=True)
    c = bench.Contender(args.contender, args.model, None)
    steps = []
    for _ in range(args.steps):
        trace = os.path.join(tempfile.mkdtemp(), "trace.json")
        onnxtrain.profiler.start(trace)
        wall = c.step()
        onnxtrain.profiler.stop()
        with open(trace) as f:
            events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
        by_op = collections.Counter()
        for e in events:
            by_op[f"{e.get('cat', '')} {e['args'].get('op', e['name'])}"] += e["dur"] * 1e-6
        steps.append(dict(wall=wall, kernels=sum(by_op.values()), top=by_op.most_common(3)))
    peak = {who: resource.getrusage(who).ru_maxrss / 1024 for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)}
    print(json.dumps(dict(steps=steps, rss=peak[resource.RUSAGE_SELF], child_rss=peak[resource.RUSAGE_CHILDREN])))


def first_steps_table(result, args):
    lines = [f"**{args.model}**, {args.contender}, {args.threads} thread(s), the first {args.steps} steps "
             f"({'export cache ' + args.cache_dir if args.cache_dir else 'no export cache'}):", "",
             "| step | wall ms | kernels ms | outside the kernels ms | largest kernels, ms |", "|---|---|---|---|---|"]
    for i, step in enumerate(result["steps"], 1):
        top = ", ".join(f"{op} {1e3 * seconds:.0f}" for op, seconds in step["top"])
        lines.append(f"| {i} | {1e3 * step['wall']:.0f} | {1e3 * step['kernels']:.0f} | "
                     f"{1e3 * (step['wall'] - step['kernels']):.0f} | {top} |")
    # RUSAGE_CHILDREN is the largest child's: the export's where it ran, else any other (torch 2.x
    # runs `ldconfig -p` on import), at least the size of this process when that child forked.
    lines.append(f"\nPeak RSS: this process {result['rss']:.0f} MB, its largest child {result['child_rss']:.0f} MB "
                 "(the export's, unless a cache served it).")
    return "\n".join(lines)


def table(result, args):
    steps = result["steps"]
    per_step = result["wall"] / steps
    ops = sorted(result["ops"], key=lambda o: -o[2])
    kernels = sum(o[2] for o in ops) / steps
    lines = [f"**{args.model}**, {args.contender}, {args.threads} thread(s): {1e3 * per_step:.2f} ms per step "
             f"(mean of {steps} profiled steps; median {1e3 * result['step_median']:.2f} ms), of which the engine's "
             f"kernels {1e3 * kernels:.2f} ms ({100 * kernels / per_step:.0f}%) and the rest "
             f"{1e3 * (per_step - kernels):.2f} ms ({100 * (per_step - kernels) / per_step:.0f}%).", "",
             "| graph | op | ms per step | % of step | kernels per step |", "|---|---|---|---|---|"]
    shown = ops[:args.top]
    for cat, op, seconds, calls in shown:
        lines.append(f"| {cat} | {op} | {1e3 * seconds / steps:.3f} | {100 * seconds / steps / per_step:.1f} | "
                     f"{calls / steps:.0f} |")
    rest = ops[args.top:]
    if rest:
        seconds = sum(o[2] for o in rest)
        lines.append(f"| | {len(rest)} other op types | {1e3 * seconds / steps:.3f} | "
                     f"{100 * seconds / steps / per_step:.1f} | {sum(o[3] for o in rest) / steps:.0f} |")
    lines.append(f"| | outside the kernels | {1e3 * (per_step - kernels):.3f} | "
                 f"{100 * (per_step - kernels) / per_step:.1f} | |")
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model")
    p.add_argument("--contender", default="onnxtrain-1.13")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--top", type=int, default=15)
    p.add_argument("--first-steps", action="store_true", help="profile each of the first --steps steps, no warm-up")
    p.add_argument("--cache-dir", default="", help="with --first-steps: ONNXTRAIN_CACHE_DIR for the process")
    p.add_argument("--measure", action="store_true", help="internal: the profiled process")
    args = p.parse_args()
    if args.measure:
        (measure_first_steps if args.first_steps else measure)(args)
        return
    import bench
    import contenders
    if not contenders.is_ours(args.contender):
        sys.exit(f"{args.contender} is not an onnxtrain contender; the profile is the engine's")
    cmd = [contenders.interpreter(args.contender), os.path.abspath(__file__), args.model, "--measure",
           "--contender", args.contender, "--threads", str(args.threads), "--steps", str(args.steps),
           "--warmup", str(args.warmup)] + (["--first-steps"] if args.first_steps else [])
    env = bench._threads_env(args.threads)
    if args.cache_dir:
        env["ONNXTRAIN_CACHE_DIR"] = args.cache_dir
    env.update(contenders.environment_variables(args.contender))
    env.setdefault("ONNXTRAIN_PYTHONPATH", os.path.join(ROOT, "python"))
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"the profiled process failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    print(first_steps_table(result, args) if args.first_steps else table(result, args))


if __name__ == "__main__":
    main()
