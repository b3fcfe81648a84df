"""onnxtrain against PyTorch eager, side by side. See `bench/run --help` and README.md.

1-thread numbers come from a fresh process per contender; 2-thread numbers from one process
that alternates the contenders step by step (this machine's second core is noisy, so both
see the same noise). Every step is zero_grad, loss = model(batch), backward, SGD(momentum).
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
sys.path.insert(0, os.environ.get("ONNXTRAIN_PYTHONPATH", os.path.join(HERE, "..", "python")))
sys.path.insert(0, HERE)


def _threads_env(threads):
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
               ONNXTRAIN_NUM_THREADS=str(threads), ONNXTRAIN_FALLBACK="0")
    return env


# ---------------------------------------------------------------- one process

def _setup(threads, with_engine):
    """The eager contender's process never loads onnxtrain, so that its peak RSS is eager's alone."""
    import torch
    torch.set_num_threads(threads)
    torch.set_flush_denormal(True)  # what a careful eager user does on this machine; we do FTZ too
    if with_engine:
        import onnxtrain
        onnxtrain.set_num_threads(threads)


class Contender:
    def __init__(self, name, model_name, dropout, optimizer):
        import torch

        import models
        torch.manual_seed(0)
        net = models.build(model_name, dropout)
        self.name = name
        self.model = net
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        if name == "onnxtrain":
            import onnxtrain
            self.model = onnxtrain.ORTModule(net)
            if optimizer == "fused":
                self.opt = onnxtrain.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        gen = torch.Generator().manual_seed(1)
        self.batches = [models.ZOO[model_name]["batch_fn"](gen) for _ in range(4)]
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
    """One contender, `--threads` threads: JSON with step times, first step, RSS, losses."""
    _setup(args.threads, with_engine=args.contender == "onnxtrain")
    c = Contender(args.contender, args.model, args.dropout, args.optimizer)
    first = c.step()
    for _ in range(args.warmup - 1):
        c.step()
    times = [c.step() for _ in range(args.steps)]
    result = dict(times=times, first=first, rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  losses=c.losses)
    if args.gemm_efficiency and args.contender == "onnxtrain":
        result.update(gemm_efficiency(c, args.model))
    print("RESULT " + json.dumps(result))


def run_alternating(args):
    """Both contenders in one process, alternating step by step."""
    _setup(args.threads, with_engine=True)
    contenders = [Contender(n, args.model, args.dropout, args.optimizer) for n in ("eager", "onnxtrain")]
    times = {c.name: [] for c in contenders}
    for i in range(args.warmup + args.steps):
        order = contenders if i % 2 == 0 else contenders[::-1]
        for c in order:
            t = c.step()
            if i >= args.warmup:
                times[c.name].append(t)
    print("RESULT " + json.dumps(dict(times=times, losses={c.name: c.losses for c in contenders})))


def sgemm_peak_gflops(torch):
    """The best 2048^3 float32 GEMM this machine offers on one thread: PyTorch's (OpenBLAS) or the
    engine's (oneDNN), whichever is faster."""
    import onnxtrain
    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    torch.mm(a, b)
    best = min(_timed(lambda: torch.mm(a, b)) for _ in range(5))
    return max(2 * 2048 ** 3 / best / 1e9, onnxtrain._C.sgemm_gflops(2048, 5))


def _timed(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def gemm_efficiency(contender, model_name):
    """Achieved GEMM GFLOP/s of the engine (FLOPs of the Linear layers over the time its GEMM
    kernels took, the best of a few profiled steps per GEMM) over the sgemm peak measured here and
    now."""
    import tempfile

    import torch

    import models
    import onnxtrain
    flops = models.train_flops(model_name, contender.model.module)
    path = os.path.join(tempfile.mkdtemp(), "trace.json")
    steps = 5
    with onnxtrain.profiler.profile(path):
        for _ in range(steps):
            contender.step()
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    # Best of the profiled steps for each GEMM node, as the peak is the best of its runs: both
    # sides of the ratio then see the machine at its least disturbed.
    best_us = {}
    for e in events:
        if e["name"] in ("Gemm", "MatMul", "FusedMatMul"):
            node = e["args"]["node"]
            best_us[node] = min(best_us.get(node, float("inf")), e["dur"])
    achieved = flops / (sum(best_us.values()) * 1e-6) / 1e9
    peak = sgemm_peak_gflops(torch)
    return dict(gemm_gflops=achieved, sgemm_peak_gflops=peak, gemm_efficiency=achieved / peak)


# ---------------------------------------------------------------- orchestration

def _spawn(mode, model, threads, extra):
    cmd = [sys.executable, os.path.abspath(__file__), "--mode", mode, "--model", model, "--threads", str(threads)]
    done = subprocess.run(cmd + extra, env=_threads_env(threads), capture_output=True, text=True)
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"{' '.join(cmd + extra)} failed:\n{done.stdout}\n{done.stderr}")


def orchestrate(args):
    import models
    names = args.models.split(",") if args.models else list(models.ZOO)
    common = ["--steps", str(args.steps), "--warmup", str(args.warmup), "--optimizer", args.optimizer]
    rows = []
    for name in names:
        print(f"[bench] {name}: 1 thread, fresh processes", flush=True)
        eager1 = _spawn("single", name, 1, common + ["--contender", "eager"])
        ours1 = _spawn("single", name, 1, common + ["--contender", "onnxtrain"] +
                       (["--gemm-efficiency"] if name == "mlp_large" and not args.quick else []))
        print(f"[bench] {name}: 2 threads, alternating", flush=True)
        alt = _spawn("alternating", name, 2, common)
        print(f"[bench] {name}: loss agreement (dropout 0)", flush=True)
        agree = _spawn("alternating", name, 1, ["--steps", str(args.agreement_steps), "--warmup", "0",
                                                  "--dropout", "0", "--optimizer", args.optimizer])
        le, lo = agree["losses"]["eager"], agree["losses"]["onnxtrain"]
        rel = max(abs(a - b) / max(abs(a), 1e-12) for a, b in zip(le, lo))
        row = dict(
            model=name, title=models.ZOO[name]["title"], batch=models.ZOO[name]["batch"],
            eager_1t_median=statistics.median(eager1["times"]), eager_1t_min=min(eager1["times"]),
            ours_1t_median=statistics.median(ours1["times"]), ours_1t_min=min(ours1["times"]),
            eager_2t_median=statistics.median(alt["times"]["eager"]), eager_2t_min=min(alt["times"]["eager"]),
            ours_2t_median=statistics.median(alt["times"]["onnxtrain"]), ours_2t_min=min(alt["times"]["onnxtrain"]),
            eager_rss=eager1["rss_mb"], ours_rss=ours1["rss_mb"], eager_first=eager1["first"],
            ours_first=ours1["first"], loss_rel_diff=rel, agreement_steps=args.agreement_steps)
        for k in ("gemm_gflops", "sgemm_peak_gflops", "gemm_efficiency"):
            if k in ours1:
                row[k] = ours1[k]
        row["ratio_1t"] = row["ours_1t_median"] / row["eager_1t_median"]
        row["eager_best"] = min(row["eager_1t_median"], row["eager_2t_median"])
        row["ratio_2t_vs_eager_best"] = row["ours_2t_median"] / row["eager_best"]
        rows.append(row)
        print(f"[bench] {name}: 1-thread ratio {row['ratio_1t']:.2f}, 2-thread vs eager best "
              f"{row['ratio_2t_vs_eager_best']:.2f}", flush=True)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "bench.json"), "w") as f:
        json.dump(rows, f, indent=1)
    table = markdown(rows, args)
    with open(os.path.join(args.out, "bench.md"), "w") as f:
        f.write(table)
    chart(rows, os.path.join(args.out, "bench.png"))
    print(table)


def markdown(rows, args):
    ms = lambda s: f"{1e3 * s:.2f}"  # noqa: E731
    lines = [
        f"Steps: {args.warmup} warm-up + {args.steps} timed; SGD(momentum 0.9); optimizer for onnxtrain: "
        f"{'onnxtrain.optim.SGD (fused)' if args.optimizer == 'fused' else 'torch.optim.SGD'}.",
        "",
        "| model | batch | eager 1t median / min ms | onnxtrain 1t median / min ms | **ratio 1t** | "
        "eager 2t median / min ms | onnxtrain 2t median / min ms | 2t vs eager best | peak RSS MB eager / ours | "
        "first step s eager / ours | loss rel. diff |",
        "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['title']} | {r['batch']} | {ms(r['eager_1t_median'])} / {ms(r['eager_1t_min'])} | "
            f"{ms(r['ours_1t_median'])} / {ms(r['ours_1t_min'])} | **{r['ratio_1t']:.2f}** | "
            f"{ms(r['eager_2t_median'])} / {ms(r['eager_2t_min'])} | {ms(r['ours_2t_median'])} / {ms(r['ours_2t_min'])} | "
            f"{r['ratio_2t_vs_eager_best']:.2f} | {r['eager_rss']:.0f} / {r['ours_rss']:.0f} | "
            f"{r['eager_first']:.3f} / {r['ours_first']:.3f} | {r['loss_rel_diff']:.1e} |")
    for r in rows:
        if "gemm_efficiency" in r:
            lines += ["", f"{r['title']}: engine GEMMs at {r['gemm_gflops']:.0f} GFLOP/s, "
                          f"{100 * r['gemm_efficiency']:.0f}% of the sgemm peak measured in the same run "
                          f"({r['sgemm_peak_gflops']:.0f} GFLOP/s: the faster of PyTorch's and the engine's "
                          f"2048x2048x2048 sgemm, 1 thread)."]
    return "\n".join(lines) + "\n"


def chart(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = [r["model"] for r in rows]
    fig, ax = plt.subplots(figsize=(1.6 * len(rows) + 3, 4))
    xs = range(len(rows))
    ax.bar([x - 0.2 for x in xs], [r["ratio_1t"] for r in rows], 0.4, label="1 thread: onnxtrain / eager")
    ax.bar([x + 0.2 for x in xs], [r["ratio_2t_vs_eager_best"] for r in rows], 0.4,
           label="2 threads: onnxtrain / eager's best")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(list(xs))
    ax.set_xticklabels(names)
    ax.set_ylabel("median step time ratio (lower is faster)")
    ax.set_title("onnxtrain vs PyTorch eager")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="", help="comma-separated subset of the zoo (default: all)")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--agreement-steps", type=int, default=10)
    p.add_argument("--optimizer", choices=["torch", "fused"], default="fused",
                   help="onnxtrain's optimizer: onnxtrain.optim.SGD (fused, the default) or torch.optim.SGD")
    p.add_argument("--out", default=os.path.join(HERE, "results"))
    p.add_argument("--quick", action="store_true", help="skip the GEMM-efficiency profile")
    # internal: one measurement process
    p.add_argument("--mode", choices=["orchestrate", "single", "alternating"], default="orchestrate")
    p.add_argument("--model")
    p.add_argument("--contender", choices=["eager", "onnxtrain"])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--dropout", type=float, default=None)
    p.add_argument("--gemm-efficiency", action="store_true")
    args = p.parse_args()
    {"orchestrate": orchestrate, "single": run_single, "alternating": run_alternating}[args.mode](args)


if __name__ == "__main__":
    main()
