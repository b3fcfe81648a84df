"""onnxtrain against PyTorch eager at equal threads, in fresh-process A/B pairs.

For each model and thread count (1 and 2), `--pairs` pairs of processes run: one eager, one
onnxtrain, alternating which goes first, each with torch, OpenBLAS, oneDNN and the engine's pool
all at the same thread count. A process times `--warmup` then `--steps` training steps (zero_grad,
loss = model(batch), backward, SGD with momentum) and reports its median step. The ratio is taken
pair by pair; the table gives the median ratio over pairs with its min-max spread.

The physical limit of a step is its GEMM and convolution FLOPs (counted once per model by
models.train_flops) at the sgemm peak measured in the same run (fresh processes, best of five
2048^3 products, the faster of PyTorch's and the engine's). "% of limit" is that time over the
contender's median step.

  bench/run                               # the whole zoo; also rewrites README.md's table
  bench/run --models mlp_small,cnn        # a subset (README untouched)
  bench/run --check                       # exit 1 when a target in TARGETS is missed
"""
import argparse
import datetime
import json
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.environ.get("ONNXTRAIN_PYTHONPATH", os.path.join(ROOT, "python")))
sys.path.insert(0, HERE)

# Median onnxtrain / eager step-time ratio at 1 thread (issue 10's targets); at 2 threads every
# model at or below eager's best thread setting; first step within eager's + 1.5 s; peak RSS not
# above eager's; losses as close to a float64 eager run as eager's own float32 losses are, within
# LOSS_NOISE_FACTOR, or within LOSS_RTOL (training amplifies float32 rounding step by step, most of
# all through BatchNorm at small batches, so eager float32 itself drifts from float64).
TARGETS = {"mlp_small": 0.65, "demo_mlp": 0.8, "mlp_large": 0.72, "cnn": 0.45, "transformer": 0.55, "lm_head": 0.55,
           "resnet18": 0.8, "mobilenet_v3_small": 0.8, "convnext_tiny": 0.9, "vit": 0.75, "lstm_lm": 1.0}
TARGET_2T, FIRST_STEP_SLACK_S, LOSS_RTOL, MLP_LARGE_GEMM_EFFICIENCY = 1.0, 1.5, 1e-4, 0.9
LOSS_NOISE_FACTOR, LOSS_FLOOR = 5.0, 1e-3  # relative differences are taken against max(|loss|, LOSS_FLOOR)
README_BEGIN, README_END = "<!-- bench:begin -->", "<!-- bench:end -->"


def _threads_env(threads):
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
               ONNXTRAIN_NUM_THREADS=str(threads), ONNXTRAIN_FALLBACK="0")
    return env


# ---------------------------------------------------------------- one process

def _setup(threads, with_engine):
    """The eager process never imports onnxtrain, so that its peak RSS is eager's alone."""
    import torch
    torch.set_num_threads(threads)
    torch.set_flush_denormal(True)  # what a careful eager user does on this machine; the engine flushes too
    if with_engine:
        import onnxtrain
        onnxtrain.set_num_threads(threads)


class Contender:
    def __init__(self, name, model_name, dropout):
        import torch

        import models
        torch.manual_seed(0)
        net = models.build(model_name, dropout)
        if name == "eager64":  # the reference that float32 noise (BatchNorm at small batches) is measured against
            net = net.double()
        self.name = name
        self.model = net
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        if name == "onnxtrain":
            import onnxtrain
            self.model = onnxtrain.ORTModule(net)
            self.opt = onnxtrain.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        gen = torch.Generator().manual_seed(1)
        self.batches = [models.ZOO[model_name]["batch_fn"](gen) for _ in range(4)]
        if name == "eager64":
            self.batches = [tuple(t.double() if t.is_floating_point() else t for t in b) for b in self.batches]
        self.step_index = 0
        self.losses = []

    def step(self):
        batch = self.batches[self.step_index % len(self.batches)]
        self.step_index += 1
        start = time.perf_counter()
        self.opt.zero_grad(set_to_none=True)
        loss = self.model(*batch)
        loss.backward()
        self.opt.step()
        elapsed = time.perf_counter() - start
        self.losses.append(loss.item())
        return elapsed


def run_single(args):
    """One contender at `--threads`: step times, the first step (for onnxtrain: export, graph
    building and the first run), peak RSS and losses; the eager process also counts FLOPs."""
    _setup(args.threads, with_engine=args.contender == "onnxtrain")
    c = Contender(args.contender, args.model, args.dropout)
    first = c.step()
    for _ in range(args.warmup - 1):
        c.step()
    times = [c.step() for _ in range(args.steps)]
    result = dict(times=times, first=first, rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  losses=c.losses)
    if args.contender == "eager" and args.count_flops:
        import models
        result["flops"] = models.train_flops(c.model, c.batches[0])
    if args.contender == "onnxtrain":
        assert c.model.fallback_reason is None, c.model.fallback_reason
        if args.gemm_efficiency:
            result.update(gemm_efficiency(c))
    print("RESULT " + json.dumps(result))


def run_peak(args):
    """The sgemm peak at `--threads`: the faster of PyTorch's and the engine's 2048^3 product."""
    import torch

    import onnxtrain
    _setup(args.threads, with_engine=True)
    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    torch.mm(a, b)
    best = min(_timed(lambda: torch.mm(a, b)) for _ in range(5))
    print("RESULT " + json.dumps(dict(torch=2 * 2048 ** 3 / best / 1e9, engine=onnxtrain._C.sgemm_gflops(2048, 5))))


def _timed(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def gemm_efficiency(contender):
    """The engine's GEMM GFLOP/s in the large MLP: its GEMM FLOPs over the time its GEMM kernels
    took (the best of five profiled steps per node, as the peak is a best of five)."""
    import tempfile

    import models
    import onnxtrain
    flops = models.train_flops(contender.model.module, contender.batches[0])
    path = os.path.join(tempfile.mkdtemp(), "trace.json")
    with onnxtrain.profiler.profile(path):
        for _ in range(5):
            contender.step()
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    best_us = {}
    for e in events:
        if e["name"] in ("Gemm", "MatMul", "FusedMatMul", "MatMulGradA", "MatMulGradB"):
            node = e["args"]["node"]
            best_us[node] = min(best_us.get(node, float("inf")), e["dur"])
    return dict(gemm_gflops=flops / (sum(best_us.values()) * 1e-6) / 1e9)


# ---------------------------------------------------------------- orchestration

def _spawn(mode, threads, extra):
    cmd = [sys.executable, os.path.abspath(__file__), "--mode", mode, "--threads", str(threads)] + extra
    done = subprocess.run(cmd, env=_threads_env(threads), capture_output=True, text=True)
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stdout}\n{done.stderr}")


def _spread(values):
    return dict(median=statistics.median(values), min=min(values), max=max(values))


def measure_model(name, args, peaks):
    import models
    entry = models.ZOO[name]
    steps = args.steps or entry.get("steps", 20)
    warmup = args.warmup or entry.get("warmup", 5)
    common = ["--model", name, "--steps", str(steps), "--warmup", str(warmup)]
    row = dict(model=name, title=entry["title"], batch=entry["batch"], steps=steps, warmup=warmup, pairs=args.pairs)
    runs = {}
    for threads in args.thread_counts:
        eager, ours = [], []
        for pair in range(args.pairs):
            order = ("eager", "onnxtrain") if pair % 2 == 0 else ("onnxtrain", "eager")
            for contender in order:
                extra = common + ["--contender", contender]
                if contender == "eager" and threads == 1 and pair == 0:
                    extra.append("--count-flops")
                if contender == "onnxtrain" and threads == 1 and pair == 0 and name == "mlp_large" and not args.quick:
                    extra.append("--gemm-efficiency")
                r = _spawn("single", threads, extra)
                (eager if contender == "eager" else ours).append(r)
            print(f"[bench] {name} {threads}t pair {pair + 1}/{args.pairs}: eager "
                  f"{1e3 * statistics.median(eager[-1]['times']):.2f} ms, onnxtrain "
                  f"{1e3 * statistics.median(ours[-1]['times']):.2f} ms", flush=True)
        runs[threads] = (eager, ours)
    med = lambda r: statistics.median(r["times"])  # noqa: E731
    flops = runs[1][0][0]["flops"]
    for threads in args.thread_counts:
        eager, ours = runs[threads]
        row[f"eager_{threads}t"] = _spread([med(r) for r in eager])
        row[f"ours_{threads}t"] = _spread([med(r) for r in ours])
        row[f"ratio_{threads}t"] = _spread([med(o) / med(e) for o, e in zip(ours, eager)])
        limit = flops / (peaks[threads] * 1e9)
        row[f"limit_{threads}t"] = limit
        row[f"eager_pct_limit_{threads}t"] = limit / row[f"eager_{threads}t"]["median"]
        row[f"ours_pct_limit_{threads}t"] = limit / row[f"ours_{threads}t"]["median"]
    # 2 threads against eager's best thread setting, pair by pair.
    if 2 in runs:
        row["ratio_2t_vs_eager_best"] = _spread([
            med(o2) / min(med(e1), med(e2)) for o2, e1, e2 in zip(runs[2][1], runs[1][0], runs[2][0])])
    row["flops"] = flops
    row["floor_over_eager_1t"] = row["limit_1t"] / row["eager_1t"]["median"]
    row["eager_first"] = statistics.median(r["first"] for r in runs[1][0])
    row["ours_first"] = statistics.median(r["first"] for r in runs[1][1])
    row["eager_rss"] = statistics.median(r["rss_mb"] for r in runs[1][0])
    row["ours_rss"] = statistics.median(r["rss_mb"] for r in runs[1][1])
    if "gemm_gflops" in runs[1][1][0]:
        row["gemm_gflops"] = runs[1][1][0]["gemm_gflops"]
        row["gemm_efficiency"] = row["gemm_gflops"] / peaks[1]
    row["loss_diff_eager"], row["loss_diff_ours"], row["agreement_steps"] = 0.0, 0.0, 0
    if args.agreement_steps > 0:
        agree = ["--model", name, "--steps", str(args.agreement_steps), "--warmup", "1", "--dropout", "0"]
        l64 = _spawn("single", 1, agree + ["--contender", "eager64"])["losses"]
        le = _spawn("single", 1, agree + ["--contender", "eager"])["losses"]
        lo = _spawn("single", 1, agree + ["--contender", "onnxtrain"])["losses"]
        diff = lambda ls: max(abs(a - r) / max(abs(r), LOSS_FLOOR) for a, r in zip(ls, l64))  # noqa: E731
        row["loss_diff_eager"], row["loss_diff_ours"] = diff(le), diff(lo)
        row["agreement_steps"] = len(le)
    print(f"[bench] {name}: ratio 1t {row['ratio_1t']['median']:.2f} [{row['ratio_1t']['min']:.2f}-"
          f"{row['ratio_1t']['max']:.2f}]" + (f", 2t vs eager best {row['ratio_2t_vs_eager_best']['median']:.2f}"
                                              if "ratio_2t_vs_eager_best" in row else ""), flush=True)
    return row


def misses(rows):
    out = []
    for r in rows:
        name = r["model"]
        if name in TARGETS and r["ratio_1t"]["median"] > TARGETS[name]:
            out.append(f"{name}: 1-thread ratio {r['ratio_1t']['median']:.2f} > target {TARGETS[name]}")
        if r["ratio_2t_vs_eager_best"]["median"] > TARGET_2T:
            out.append(f"{name}: 2 threads {r['ratio_2t_vs_eager_best']['median']:.2f} of eager's best > {TARGET_2T}")
        if r["ours_first"] > r["eager_first"] + FIRST_STEP_SLACK_S:
            out.append(f"{name}: first step {r['ours_first']:.2f} s > eager's {r['eager_first']:.2f} s + "
                       f"{FIRST_STEP_SLACK_S} s")
        if r["ours_rss"] > r["eager_rss"]:
            out.append(f"{name}: peak RSS {r['ours_rss']:.0f} MB > eager's {r['eager_rss']:.0f} MB")
        if r["loss_diff_ours"] > max(LOSS_RTOL, LOSS_NOISE_FACTOR * r["loss_diff_eager"]):
            out.append(f"{name}: losses {r['loss_diff_ours']:.1e} from float64 over {r['agreement_steps']} steps, "
                       f"eager float32's {r['loss_diff_eager']:.1e}")
        if "gemm_efficiency" in r and r["gemm_efficiency"] < MLP_LARGE_GEMM_EFFICIENCY:
            out.append(f"{name}: GEMMs at {100 * r['gemm_efficiency']:.0f}% of the sgemm peak "
                       f"< {100 * MLP_LARGE_GEMM_EFFICIENCY:.0f}%")
    return out


def orchestrate(args):
    import models
    names = args.models.split(",") if args.models else list(models.ZOO)
    unknown = [n for n in names if n not in models.ZOO]
    if unknown:
        sys.exit(f"unknown models {unknown}; the zoo has {list(models.ZOO)}")
    args.thread_counts = [int(t) for t in args.threads_list.split(",")]
    if args.threads_list != "1,2" and args.check:
        sys.exit("--check needs both thread counts")
    peaks = {}
    for threads in args.thread_counts:
        p = _spawn("peak", threads, [])
        peaks[threads] = max(p["torch"], p["engine"])
        print(f"[bench] sgemm peak at {threads} thread(s): {peaks[threads]:.0f} GFLOP/s "
              f"(PyTorch {p['torch']:.0f}, engine {p['engine']:.0f})", flush=True)
    rows = [measure_model(name, args, peaks) for name in names]
    if args.thread_counts != [1, 2]:  # a quick look: no table, no README
        return
    meta = dict(date=datetime.date.today().isoformat(), machine=_machine(), peaks=peaks, pairs=args.pairs)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "bench.json"), "w") as f:
        json.dump(dict(meta=meta, rows=rows), f, indent=1)
    table = markdown(rows, meta)
    with open(os.path.join(args.out, "bench.md"), "w") as f:
        f.write(table)
    chart(rows, os.path.join(args.out, "bench.png"))
    print(table)
    full = not args.models and not args.quick and args.steps == 0 and args.pairs >= 3 and args.agreement_steps > 0
    if full and args.out == os.path.join(HERE, "results"):
        update_readme(table)
        print("[bench] README.md table updated")
    missed = misses(rows)
    for m in missed:
        print(f"[bench] target missed: {m}")
    if args.check and missed:
        sys.exit(1)


def _machine():
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            info = f.read()
        cpu = re.search(r"model name\s*:\s*(.*)", info).group(1).strip()
        flags = re.search(r"flags\s*:\s*(.*)", info).group(1).split()
        cpu += ", " + ("AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2")
    except (OSError, AttributeError):
        pass
    return f"{os.cpu_count()} vCPUs of an {cpu}, {platform.system()} {platform.release()}"


def markdown(rows, meta):
    ms = lambda s: f"{1e3 * s:.1f}" if s >= 0.01 else f"{1e3 * s:.2f}"  # noqa: E731
    sp = lambda d: f"**{d['median']:.2f}** ({d['min']:.2f}-{d['max']:.2f})"  # noqa: E731
    lines = [
        f"Measured {meta['date']} on {meta['machine']}; sgemm peak {meta['peaks'][1]:.0f} GFLOP/s at 1 thread, "
        f"{meta['peaks'][2]:.0f} at 2. {meta['pairs']} fresh-process pairs per model and thread count; ratios are "
        "onnxtrain / eager, median over pairs (min-max); step times are medians over pairs of each process's "
        "median step. \"% of limit\": the step's GEMM and convolution FLOPs at the sgemm peak, over the step time.",
        "",
        "| model | batch | eager 1t ms | onnxtrain 1t ms | **ratio 1t** (spread) | target | % of limit eager / ours "
        "| floor / eager | 2t vs eager's best (spread) | first step s eager / ours | peak RSS MB eager / ours "
        "| loss vs float64 eager / ours |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['title']} | {r['batch']} | {ms(r['eager_1t']['median'])} | {ms(r['ours_1t']['median'])} | "
            f"{sp(r['ratio_1t'])} | {TARGETS.get(r['model'], '-')} | "
            f"{100 * r['eager_pct_limit_1t']:.0f}% / {100 * r['ours_pct_limit_1t']:.0f}% | "
            f"{r['floor_over_eager_1t']:.2f} | {sp(r['ratio_2t_vs_eager_best'])} | "
            f"{r['eager_first']:.2f} / {r['ours_first']:.2f} | {r['eager_rss']:.0f} / {r['ours_rss']:.0f} | "
            f"{r['loss_diff_eager']:.0e} / {r['loss_diff_ours']:.0e} |")
    for r in rows:
        if "gemm_efficiency" in r:
            lines += ["", f"{r['title']}: the engine's GEMMs at {r['gemm_gflops']:.0f} GFLOP/s, "
                          f"{100 * r['gemm_efficiency']:.0f}% of the sgemm peak (best of five profiled steps per GEMM)."]
    missed = misses(rows)
    lines += ["", "Targets missed: " + ("; ".join(missed) if missed else "none") + "."]
    return "\n".join(lines) + "\n"


def update_readme(table):
    path = os.path.join(ROOT, "README.md")
    with open(path) as f:
        text = f.read()
    begin, end = text.index(README_BEGIN), text.index(README_END)
    text = text[:begin + len(README_BEGIN)] + "\n" + table + text[end:]
    with open(path, "w") as f:
        f.write(text)


def chart(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = [r["model"] for r in rows]
    fig, ax = plt.subplots(figsize=(1.2 * len(rows) + 3, 4))
    xs = list(range(len(rows)))
    for offset, key, label in ((-0.2, "ratio_1t", "1 thread: onnxtrain / eager"),
                               (0.2, "ratio_2t_vs_eager_best", "2 threads: onnxtrain / eager's best")):
        med = [r[key]["median"] for r in rows]
        err = [[m - r[key]["min"] for m, r in zip(med, rows)], [r[key]["max"] - m for m, r in zip(med, rows)]]
        ax.bar([x + offset for x in xs], med, 0.4, yerr=err, capsize=3, label=label)
    ax.scatter(xs, [r["floor_over_eager_1t"] for r in rows], marker="_", s=300, color="black",
               label="physical floor / eager 1t")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(xs)
    ax.set_xticklabels(names, rotation=30, ha="right")
    ax.set_ylabel("median step time ratio (lower is faster)")
    ax.set_title("onnxtrain vs PyTorch eager at equal threads")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="", help="comma-separated subset of the zoo (default: all)")
    p.add_argument("--pairs", type=int, default=3, help="fresh-process A/B pairs per model and thread count")
    p.add_argument("--steps", type=int, default=0, help="timed steps per process (default: the zoo entry's)")
    p.add_argument("--warmup", type=int, default=0, help="warm-up steps per process (default: the zoo entry's)")
    p.add_argument("--agreement-steps", type=int, default=10)
    p.add_argument("--out", default=os.path.join(HERE, "results"))
    p.add_argument("--quick", action="store_true", help="skip the GEMM-efficiency profile")
    p.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    p.add_argument("--threads-list", default="1,2", help="thread counts to measure; anything but 1,2 is a quick "
                   "look that writes no table")
    p.add_argument("--memory-optimization", choices=["none", "recompute"], default=None,
                   help="the engine's DebugOptions(memory_optimization=...), through ONNXTRAIN_MEMORY_OPTIMIZATION "
                   "(default: the environment's)")
    # internal: one measurement process
    p.add_argument("--mode", choices=["orchestrate", "single", "peak"], default="orchestrate")
    p.add_argument("--model")
    p.add_argument("--contender", choices=["eager", "eager64", "onnxtrain"])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--dropout", type=float, default=None)
    p.add_argument("--count-flops", action="store_true")
    p.add_argument("--gemm-efficiency", action="store_true")
    args = p.parse_args()
    if args.memory_optimization:  # the measurement processes inherit it
        os.environ["ONNXTRAIN_MEMORY_OPTIMIZATION"] = args.memory_optimization
    {"orchestrate": orchestrate, "single": run_single, "peak": run_peak}[args.mode](args)


if __name__ == "__main__":
    main()
