"""onnxtrain against what a CPU user would pick instead, at equal threads, in fresh processes.

The contenders (bench/contenders.py) are eager PyTorch on Debian's 1.13 and on the newest PyPI
torch, torch.compile on the newest torch (default mode and max-autotune-no-cudagraphs), ONNX
Runtime's own ORTModule, and onnxtrain on 1.13 and on the newest torch; each runs in its own venv.
For each model and thread count (1 and 2), `--rounds` rounds run every contender once, each in a
fresh process, the order rotating from round to round, with torch, OpenBLAS, oneDNN and the
engine's pool all at the same thread count. A process times `--warmup` then `--steps` training
steps (zero_grad, loss = model(batch), backward, SGD with momentum) and reports its median step.
onnxtrain's ratio to the fastest peer is taken round by round; tables give medians over rounds
with their min-max spread. The first step includes export or compilation.

onnxtrain's first calls run in eager PyTorch while its capture goes on beside them (the eager
warm-up, ORTModule's default): its process steps on until the engine has taken over, and warms the
engine up with `--warmup` more steps, before its timed steps, each of which must have run on the
engine. Every process also reports how it started, cold: its first and second steps and the time to
its 20th step (steps past the timed ones where a model times fewer), and onnxtrain's the peak RSS of
its largest child process (the export child, or a larger one); `--check` holds them against eager on the same torch.

The physical limit of a step is its GEMM and convolution FLOPs (counted once per model by
models.train_flops) at the sgemm peak measured in the same run (fresh processes, best of five
2048^3 products, the faster of PyTorch's and the engine's). "% of limit" is that time over the
contender's median step.

  bench/run                               # the whole zoo (hours)
  bench/run --models mlp_small,cnn        # a subset
  bench/run --contenders eager-1.13,onnxtrain-1.13 --quick   # a quick look
  bench/run --models bert_base --contenders bf16 --quick     # under bfloat16 autocast

The bfloat16 contenders (contenders.BFLOAT16) train under torch.autocast("cpu", dtype=bfloat16);
onnxtrain's are judged against the bfloat16 peers only, and their limit is the bfloat16 GEMM peak
(PyTorch's 2048^3 bfloat16 product, measured beside the sgemm peak). `--contenders bf16` runs them
with onnxtrain's own float32 beside (each bfloat16 onnxtrain contender's ratio to its float32
twin); such a run by the method below stores its rows in bench/results/rows-bf16/ and rewrites
README.md's bfloat16 table (models.BFLOAT16_ZOO), apart from the float32 one.

A run by the README's method (every contender, the zoo's steps, 3+ rounds, no --quick) stores
each model's row in bench/results/rows/ and rewrites README.md's table from every stored row of
this machine, naming the zoo models not measured yet; any other run leaves both alone.
  bench/run --check                       # exit 1 when a target is missed
  bench/run --readme --check              # the same for the stored rows, measuring nothing
"""
import argparse
import datetime
import json
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.environ.get("ONNXTRAIN_PYTHONPATH", os.path.join(ROOT, "python")))
sys.path.insert(0, HERE)

# Issue 23's targets, for each onnxtrain contender against the fastest peer, at 1 thread and at 2:
# step time at most STEP_TARGET of the fastest peer's, first step at most FIRST_STEP_TARGET of the
# fastest peer's first step, peak RSS no more than the lowest peer's. Losses: as close to a
# float64 eager run as eager's own float32 losses are, within LOSS_NOISE_FACTOR, or within
# LOSS_RTOL (training amplifies float32 rounding step by step, most of all through BatchNorm at
# small batches, so eager float32 itself drifts from float64).
STEP_TARGET, FIRST_STEP_TARGET, LOSS_RTOL, MLP_LARGE_GEMM_EFFICIENCY = 0.9, 1.5, 1e-4, 0.9
SECOND_STEP_TARGET = 1.2  # the second step of the process, over its steady step
START_STEPS = 20  # the start figure: the time from a cold process's first call to its 20th step
LOSS_NOISE_FACTOR, LOSS_FLOOR = 5.0, 1e-3  # relative differences are taken against max(|loss|, LOSS_FLOOR)
README_BEGIN, README_END = "<!-- bench:begin -->", "<!-- bench:end -->"
README_BF16_BEGIN, README_BF16_END = "<!-- bench-bf16:begin -->", "<!-- bench-bf16:end -->"
# Issue 37's target for a bfloat16 onnxtrain contender against its own float32 on the transformer
# models, by the host's bfloat16 instructions (none: no target).
OWN_FLOAT32_TARGET = {"amx": 0.5, "avx512_bf16": 0.75}


def _threads_env(threads):
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
               ONNXTRAIN_NUM_THREADS=str(threads), ONNXTRAIN_FALLBACK="0")
    env.pop("ONNXTRAIN_CACHE_DIR", None)  # onnxtrain starts cold too: no export read from disk
    return env


# ---------------------------------------------------------------- one process

def _setup(threads, with_engine):
    """Only onnxtrain's processes import onnxtrain, so that a peer's peak RSS is its own."""
    import torch
    torch.set_num_threads(threads)
    torch.set_flush_denormal(True)  # what a careful eager user does on this machine; the engine flushes too
    if with_engine:
        import onnxtrain
        onnxtrain.set_num_threads(threads)


class Contender:
    def __init__(self, name, model_name, dropout, initial_state=None, save_initial_state=None):
        import torch

        import contenders
        import models
        torch.manual_seed(0)
        net = models.build(model_name, dropout)
        if initial_state:
            net.load_state_dict(torch.load(initial_state))
        if save_initial_state:
            torch.save(net.state_dict(), save_initial_state)
        self.name = name
        gen = torch.Generator().manual_seed(1)
        self.batches = [models.ZOO[model_name]["batch_fn"](gen) for _ in range(4)]
        if name == "eager64":  # the reference that float32 noise (BatchNorm at small batches) is measured against
            net = net.double()
            self.batches = [tuple(t.double() if t.is_floating_point() else t for t in b) for b in self.batches]
            self.model, self.opt = net, torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
        else:
            self.model, self.opt = contenders.wrap(name, net)
        self.train = contenders.train_step(name, self.model, self.opt)
        self.net = net
        self.step_index = 0
        self.losses = []

    def step(self):
        batch = self.batches[self.step_index % len(self.batches)]
        self.step_index += 1
        start = time.perf_counter()
        loss = self.train(*batch)
        elapsed = time.perf_counter() - start
        self.losses.append(loss.item())
        return elapsed


def run_single(args):
    """One contender at `--threads`: step times, the first step (export or compilation, and the
    first run), peak RSS and losses; the reference eager process also counts FLOPs."""
    import contenders
    if args.agreement:  # the losses compared with float64's are the engine's from the first step on
        os.environ["ONNXTRAIN_EAGER_WARMUP"] = "0"
    _setup(args.threads, with_engine=args.contender != "eager64" and contenders.is_ours(args.contender))
    c = Contender(args.contender, args.model, args.dropout, args.initial_state, args.save_initial_state)
    steps = [c.step() for _ in range(max(args.warmup, 1))]  # every step the process ran, in order
    if args.contender != "eager64" and contenders.is_ours(args.contender):
        # The engine's steady step: the calls that ran eagerly while the capture went on (the eager
        # warm-up) are not its steps, and its own first runs warm up as a peer's do.
        while contenders.capturing(c.model):
            steps.append(c.step())
            if len(steps) > 1_000_000:
                raise RuntimeError("the engine never took over from the eager warm-up")
        for _ in range(args.warmup):
            steps.append(c.step())
    engine_calls = contenders.engine_calls(args.contender, c.model, c.train)
    times = [c.step() for _ in range(args.steps)]
    if engine_calls is not None:
        ran = contenders.engine_calls(args.contender, c.model, c.train) - engine_calls
        if ran != args.steps:  # honest figures: every timed step ran on the engine
            raise RuntimeError(f"{ran} of the {args.steps} timed steps ran on the engine")
    # The start figure, time to the 20th step, on every process: a user judges a trainer by how
    # soon it has trained, not by its steady step alone.
    later = ([c.step() for _ in range(START_STEPS - len(steps) - len(times))]
             if not (args.agreement or args.count_flops) else [])
    result = dict(times=times, first=steps[0], second=(steps + times)[1] if len(steps + times) > 1 else None,
                  to_20th=sum((steps + times + later)[:START_STEPS]) if len(steps + times + later) >= START_STEPS
                  else None,
                  warmup_steps=len(steps), rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  export_child_rss_mb=contenders.export_child_rss_mb(args.contender), losses=c.losses)
    if args.count_flops:
        import models
        result["flops"] = models.train_flops(c.net, c.batches[0])
    if args.contender != "eager64":
        result.update(contenders.evidence(args.contender, c.model, c.train))
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
    # The bfloat16 GEMM peak (oneDNN through PyTorch): the limit of the bfloat16 contenders' steps.
    a16, b16 = a.bfloat16(), b.bfloat16()
    torch.mm(a16, b16)
    best16 = min(_timed(lambda: torch.mm(a16, b16)) for _ in range(5))
    print("RESULT " + json.dumps(dict(torch=2 * 2048 ** 3 / best / 1e9, engine=onnxtrain._C.sgemm_gflops(2048, 5),
                                      bfloat16=2 * 2048 ** 3 / best16 / 1e9,
                                      torch_version=torch.__version__.split("+")[0])))


def _timed(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def gemm_efficiency(contender):
    """The engine's GEMM GFLOP/s in the large MLP: its GEMM FLOPs over the time its GEMM kernels
    took (the best of five profiled steps per node, as the peak is a best of five)."""
    import models
    import onnxtrain
    flops = models.train_flops(contender.net, contender.batches[0])
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

def _spawn(python, mode, threads, extra, contender=None):
    import contenders
    cmd = [python, os.path.abspath(__file__), "--mode", mode, "--threads", str(threads)] + extra
    # Every process starts cold: torch.compile's on-disk caches (inductor's FX graph and autotuning
    # caches, Triton's) would otherwise serve later rounds and hide the compilation in the first step.
    with tempfile.TemporaryDirectory(prefix="bench-caches-") as caches:
        env = dict(_threads_env(threads), **(contenders.environment_variables(contender) if contender else {}),
                   TORCHINDUCTOR_CACHE_DIR=os.path.join(caches, "inductor"), TRITON_CACHE_DIR=os.path.join(caches, "triton"))
        env.setdefault("ONNXTRAIN_PYTHONPATH", os.path.join(ROOT, "python"))
        done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise ContenderFailed(_why(done.stderr or done.stdout))


class ContenderFailed(RuntimeError):
    pass


def _why(text):
    """The last error line of a failed process: what the table says."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    errors = [line for line in lines if re.match(r"^[\w.]*(Error|Exception|Failed)\b", line)]
    why = (errors or lines or ["no output"])[-1]
    if re.fullmatch(r"[\w.]+", why):  # an exception without a message (a bare assert): say where it was raised
        frames = [i for i, line in enumerate(lines) if line.startswith("File ")]
        if frames:
            where = re.sub(r'^File "(?:.*/site-packages/)?([^"]*)", line (\d+), in (\S+)', r"\1:\2 in \3",
                           lines[frames[-1]])
            code = lines[frames[-1] + 1] if frames[-1] + 1 < len(lines) else ""
            why = f"{why} at {where}: {code}"
    return why[:300]


def _spread(values):
    return dict(median=statistics.median(values), min=min(values), max=max(values))


def measure_model(name, args, peaks):
    """Every contender on one model: `args.rounds` rounds per thread count, the order rotating."""
    import contenders
    import models
    entry = models.ZOO[name]
    steps = args.steps or entry.get("steps", 20)
    warmup = args.warmup or entry.get("warmup", 5)
    common = ["--model", name, "--steps", str(steps), "--warmup", str(warmup)]
    row = dict(model=name, title=entry["title"], batch=entry["batch"], steps=steps, warmup=warmup, rounds=args.rounds,
               failed={}, runs={}, bfloat16_isa=_bfloat16_isa())
    live = []
    for c in args.contenders:
        try:
            contenders.interpreter(c)
            live.append(c)
        except RuntimeError as e:
            row["failed"][c] = str(e)
    flops, reference = None, args.contenders[0]  # the FLOPs and the float64 run: the first contender's venv
    try:
        flops = _spawn(contenders.interpreter(reference), "single", 1,
                       common + ["--contender", reference, "--steps", "1", "--warmup", "1", "--count-flops"],
                       reference)["flops"]
    except (ContenderFailed, RuntimeError) as e:
        print(f"[bench] {name}: FLOPs not counted: {e}", flush=True)
    for threads in args.thread_counts:
        runs = {c: [] for c in live}
        for round_index in range(args.rounds):
            shift = round_index % max(1, len(live))
            for c in live[shift:] + live[:shift]:
                if c in row["failed"]:
                    continue
                extra = common + ["--contender", c]
                if contenders.is_ours(c) and threads == 1 and round_index == 0 and name == "mlp_large" and not args.quick:
                    extra.append("--gemm-efficiency")
                try:
                    runs[c].append(_spawn(contenders.interpreter(c), "single", threads, extra, c))
                except ContenderFailed as e:
                    row["failed"][c] = str(e)
                    print(f"[bench] {name} {c}: FAILED: {e}", flush=True)
            print(f"[bench] {name} {threads}t round {round_index + 1}/{args.rounds}: " + ", ".join(
                f"{c} {1e3 * statistics.median(r[-1]['times']):.2f} ms" for c, r in runs.items() if r), flush=True)
        row["runs"][threads] = {c: r for c, r in runs.items() if c not in row["failed"]}
    _summarize(row, flops, peaks, args)
    if args.agreement_steps > 0:
        # Every agreement run starts from the reference's initial parameters: a model's seeded
        # initialization is not the same on every torch (torchvision's convnext_tiny draws other
        # weights on torch 2.15 than on 1.13), and a loss is only comparable on the same model.
        initial_state = os.path.join(tempfile.mkdtemp(prefix="bench-init-"), "initial_state.pt")
        agree = common[:2] + ["--steps", str(args.agreement_steps), "--warmup", "1", "--dropout", "0", "--agreement"]
        row["loss_diff"] = {}
        try:
            ref = _spawn(contenders.interpreter(reference), "single", 1,
                         agree + ["--contender", "eager64", "--save-initial-state", initial_state])
            row["agreement_steps"] = len(ref["losses"])
        except ContenderFailed as e:
            ref = None
            print(f"[bench] {name}: the float64 reference failed: {e}", flush=True)
        for c in [c for c in live if c not in row["failed"] and ref]:
            try:
                losses = _spawn(contenders.interpreter(c), "single", 1,
                                agree + ["--contender", c, "--initial-state", initial_state], c)["losses"]
                row["loss_diff"][c] = max(abs(a - r) / max(abs(r), LOSS_FLOOR) for a, r in zip(losses, ref["losses"]))
            except ContenderFailed as e:
                print(f"[bench] {name} {c}: loss agreement run failed: {e}", flush=True)
        shutil.rmtree(os.path.dirname(initial_state), ignore_errors=True)
    del row["runs"]
    return row


def _summarize(row, flops, peaks, args):
    """Medians over rounds, onnxtrain's ratios to the fastest peer round by round, % of limit."""
    import contenders
    med = lambda r: statistics.median(r["times"])  # noqa: E731
    row["flops"] = flops
    row["step"], row["first"], row["rss"], row["ratio"], row["pct_limit"], row["evidence"] = {}, {}, {}, {}, {}, {}
    for threads, runs in row["runs"].items():
        for c, rs in runs.items():
            row["step"][f"{c}@{threads}"] = _spread([med(r) for r in rs])
            if flops:
                peak = peaks[threads] if contenders.precision(c) == "float32" else peaks["bfloat16"][threads]
                row["pct_limit"][f"{c}@{threads}"] = flops / (peak * 1e9) / row["step"][f"{c}@{threads}"]["median"]
            start = {}
            for figure in ("first", "second", "to_20th", "export_child_rss_mb"):
                values = [r[figure] for r in rs if r.get(figure) is not None]
                if values:
                    start[figure] = statistics.median(values)
            start["steady"] = statistics.median(med(r) for r in rs)
            row.setdefault("start", {})[f"{c}@{threads}"] = start
            if threads == 1:
                row["first"][c] = statistics.median(r["first"] for r in rs)
                row["rss"][c] = statistics.median(r["rss_mb"] for r in rs)
                row["evidence"][c] = {k: v for k, v in rs[0].items() if k in ("graphs", "graph_breaks", "whole_steps")}
                if "gemm_gflops" in rs[0]:
                    row["gemm_gflops"] = rs[0]["gemm_gflops"]
                    row["gemm_efficiency"] = rs[0]["gemm_gflops"] / peaks[1]
        rounds = min([len(runs[c]) for c in runs] or [0])
        for c in [c for c in runs if contenders.is_ours(c)]:
            their = contenders.peers(list(runs), like=c)  # a bfloat16 contender against bfloat16 peers
            if their and rounds:
                row["ratio"][f"{c}@{threads}"] = _spread([
                    med(runs[c][i]) / min(med(runs[p][i]) for p in their) for i in range(rounds)])
                row.setdefault("fastest_peer_of", {})[f"{c}@{threads}"] = min(
                    their, key=lambda p: row["step"][f"{p}@{threads}"]["median"])
        for c in [c for c in runs if contenders.is_ours(c) and contenders.float32_twin(c) in runs]:
            twin = contenders.float32_twin(c)
            if rounds:
                row.setdefault("own_float32", {})[f"{c}@{threads}"] = _spread([
                    med(runs[c][i]) / med(runs[twin][i]) for i in range(rounds)])
        their = contenders.peers(list(runs))
        if their:
            row.setdefault("fastest_peer", {})[threads] = min(their, key=lambda p: row["step"][f"{p}@{threads}"]["median"])


def _start_misses(r):
    """Issue 38's targets, at every thread count, against eager on the same torch: the time to the
    20th step no more than eager's, the second step at most SECOND_STEP_TARGET x the steady step,
    and the largest child process's peak RSS (an export child's, or a larger one) no more than eager's process's."""
    import contenders
    out = []
    start = r.get("start", {})
    for key, ours in start.items():
        c, threads = key.split("@")
        if not contenders.is_ours(c):
            continue
        eager = next((start[k] for k in start if k.split("@")[1] == threads and contenders.is_eager_twin(
            k.split("@")[0], c)), None)
        if eager and "to_20th" in ours and "to_20th" in eager and ours["to_20th"] > eager["to_20th"]:
            out.append(f"{r['model']} {c} {threads}t: 20th step at {ours['to_20th']:.2f} s > eager's "
                       f"{eager['to_20th']:.2f} s")
        if "second" in ours and ours["second"] > SECOND_STEP_TARGET * ours["steady"]:
            out.append(f"{r['model']} {c} {threads}t: second step {ours['second']:.3f} s > {SECOND_STEP_TARGET} x "
                       f"its steady {ours['steady']:.3f} s")
        if threads == "1" and eager and ours.get("export_child_rss_mb") and c in r["rss"]:
            eager_rss = next(r["rss"][p] for p in r["rss"] if contenders.is_eager_twin(p, c))
            if ours["export_child_rss_mb"] > eager_rss:
                out.append(f"{r['model']} {c}: largest child process's peak RSS {ours['export_child_rss_mb']:.0f} MB > eager's "
                           f"{eager_rss:.0f} MB")
    return out


def misses(rows):
    import contenders
    import models
    out = []
    for r in rows:
        name = r["model"]
        for key, ratio in r.get("ratio", {}).items():
            c, threads = key.split("@")
            if ratio["median"] > STEP_TARGET:
                fastest = r.get("fastest_peer_of", {}).get(key) or r["fastest_peer"][int(threads)]
                out.append(f"{name} {c} {threads}t: step {ratio['median']:.2f} x {fastest}'s "
                           f"> {STEP_TARGET}")
        for c in [c for c in r["first"] if contenders.is_ours(c)]:
            their = contenders.peers(list(r["first"]), like=c)
            if their:
                fastest = min(their, key=lambda p: r["first"][p])
                if r["first"][c] > FIRST_STEP_TARGET * r["first"][fastest]:
                    out.append(f"{name} {c}: first step {r['first'][c]:.2f} s > {FIRST_STEP_TARGET} x {fastest}'s "
                               f"{r['first'][fastest]:.2f} s")
                leanest = min(their, key=lambda p: r["rss"][p])
                if r["rss"][c] > r["rss"][leanest]:
                    out.append(f"{name} {c}: peak RSS {r['rss'][c]:.0f} MB > {leanest}'s {r['rss'][leanest]:.0f} MB")
        out += _start_misses(r)
        target = OWN_FLOAT32_TARGET.get(r.get("bfloat16_isa"))
        for key, ratio in r.get("own_float32", {}).items():
            c, threads = key.split("@")
            if target and r["model"] in models.TRANSFORMERS and ratio["median"] > target:
                out.append(f"{name} {c} {threads}t: step {ratio['median']:.2f} x {contenders.float32_twin(c)}'s "
                           f"> {target} on {r['bfloat16_isa']}")
        diffs = r.get("loss_diff", {})
        for c in [c for c in diffs if contenders.is_ours(c)]:
            eager_noise = min([diffs[p] for p in contenders.peers(list(diffs), like=c)] or [0.0])
            if diffs[c] > max(LOSS_RTOL, LOSS_NOISE_FACTOR * eager_noise):
                out.append(f"{name} {c}: losses {diffs[c]:.1e} from float64 over {r['agreement_steps']} steps, "
                           f"the closest peer's {eager_noise:.1e}")
        for c in r["failed"]:
            if contenders.is_ours(c):
                out.append(f"{name} {c}: failed")
        if "gemm_efficiency" in r and r["gemm_efficiency"] < MLP_LARGE_GEMM_EFFICIENCY:
            out.append(f"{name}: GEMMs at {100 * r['gemm_efficiency']:.0f}% of the sgemm peak "
                       f"< {100 * MLP_LARGE_GEMM_EFFICIENCY:.0f}%")
    return out


def orchestrate(args):
    import contenders
    import models
    names = args.models.split(",") if args.models else list(models.ZOO)
    unknown = [n for n in names if n not in models.ZOO]
    if unknown:
        sys.exit(f"unknown models {unknown}; the zoo has {list(models.ZOO)}")
    args.precision = "bfloat16" if args.contenders == "bf16" else "float32"
    args.contenders = (list(contenders.BFLOAT16_TABLE) if args.contenders == "bf16" else
                       args.contenders.split(",") if args.contenders else list(contenders.DEFAULT))
    unknown = [c for c in args.contenders if c not in contenders.CONTENDERS]
    if unknown:
        sys.exit(f"unknown contenders {unknown}; there are {list(contenders.CONTENDERS)}")
    if args.readme:
        _write_readme_table(args.precision, _machine(), args.contenders)
        if args.check:  # the stored rows' targets, without measuring again
            missed = misses([stored["row"] for stored in stored_rows(_machine(), args.contenders, args.precision)[0]])
            for m in missed:
                print(f"[bench] target missed: {m}")
            if missed:
                sys.exit(1)
        return
    args.thread_counts = [int(t) for t in args.threads_list.split(",")]
    if args.threads_list != "1,2" and args.check:
        sys.exit("--check needs both thread counts")
    peaks = {"bfloat16": {}}
    for threads in args.thread_counts:
        p = _spawn(contenders.interpreter(args.contenders[0]), "peak", threads, [])
        peaks[threads] = max(p["torch"], p["engine"])
        peaks["bfloat16"][threads] = p["bfloat16"]
        print(f"[bench] sgemm peak at {threads} thread(s): {peaks[threads]:.0f} GFLOP/s "
              f"(PyTorch {p['torch_version']} {p['torch']:.0f}, engine {p['engine']:.0f}); bfloat16 GEMM peak "
              f"{p['bfloat16']:.0f} GFLOP/s", flush=True)
    rows = [measure_model(name, args, peaks) for name in names]
    if args.thread_counts != [1, 2]:  # a quick look: no table, no README
        return
    meta = dict(date=datetime.date.today().isoformat(), machine=_machine(), peaks=peaks, rounds=args.rounds,
                contenders=args.contenders, commit=_commit())
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "bench.json"), "w") as f:
        json.dump(dict(meta=meta, rows=rows), f, indent=1)
    table = markdown(rows, meta)
    with open(os.path.join(args.out, "bench.md"), "w") as f:
        f.write(table)
    chart(rows, os.path.join(args.out, "bench.png"))
    print(table)
    if by_the_method(args):
        store_rows(rows, meta, args.precision)
        _write_readme_table(args.precision, meta["machine"], args.contenders)
    missed = misses(rows)
    for m in missed:
        print(f"[bench] target missed: {m}")
    if args.check and missed:
        sys.exit(1)


def _write_readme_table(precision, machine, names):
    table = (assembled_table(machine, names, precision) if precision == "float32" else
             tables_of_every_machine(machine, names, precision))
    if precision == "bfloat16":
        update_readme(table, (README_BF16_BEGIN, README_BF16_END))
    else:
        update_readme(table)
    print(f"[bench] README.md's {precision} table rewritten from {_rows_dir(precision)}", flush=True)


def _cpuinfo():
    """/proc/cpuinfo's first model name and flags: ("unknown CPU", []) where it cannot be read."""
    try:
        with open("/proc/cpuinfo") as f:
            info = f.read()
        return (re.search(r"model name\s*:\s*(.*)", info).group(1).strip(),
                re.search(r"flags\s*:\s*(.*)", info).group(1).split())
    except (OSError, AttributeError):
        return "unknown CPU", []


def _bfloat16_isa():
    """The host's bfloat16 instructions: "amx", "avx512_bf16" or None (lscpu's flags)."""
    flags = _cpuinfo()[1]
    return "amx" if "amx_bf16" in flags else "avx512_bf16" if "avx512_bf16" in flags else None


def _commit():
    """The commit the measured code is, with "+changes" when the work tree differs from it."""
    def git(*cmd):
        done = subprocess.run(["git", *cmd], cwd=ROOT, capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""
    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    return commit + ("+changes" if git("status", "--porcelain", "--untracked-files=no", "--", "src", "python", "bench",
                                       "CMakeLists.txt") else "")


def _machine():
    cpu, flags = _cpuinfo()
    if flags:
        cpu += ", " + ("AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2")
    return f"{os.cpu_count()} vCPUs of an {cpu}, {platform.system()} {platform.release()}"


def gflops(peak):
    """A peak, or the (min, max) range of the peaks of several runs."""
    if isinstance(peak, tuple):
        low, high = (f"{p:.0f}" for p in peak)
        return low if low == high else f"{low}-{high}"
    return f"{peak:.0f}"


def markdown(rows, meta):
    import contenders
    names = meta["contenders"]
    ours = [c for c in names if contenders.is_ours(c)]
    ms = lambda v: f"{1e3 * v:.1f}" if v >= 0.01 else f"{1e3 * v:.2f}"  # noqa: E731
    sp = lambda d: f"{d['median']:.2f} ({d['min']:.2f}-{d['max']:.2f})"  # noqa: E731
    commits = meta.get("commit")
    lines = [
        f"Measured {meta['date']}" + (f" (commit {commits})" if commits else "") + f" on {meta['machine']}; sgemm peak {gflops(meta['peaks'][1])} GFLOP/s at 1 thread, "
        f"{gflops(meta['peaks'][2])} at 2. {meta['rounds']} rounds per model and thread count, each contender a fresh "
        "process per round, the order rotating (the first contender's venv measures the FLOPs, the sgemm peak and the float64 reference); step times are medians over rounds of each process's median step; "
        "ratios are onnxtrain over the fastest peer of the same round, median over rounds (min-max). "
        "\"% of limit\": the step's GEMM and convolution FLOPs at the sgemm peak, over the step time. "
        "A cell \"failed [n]\" is a contender that could not run the model: note n below says why."]
    bfloat16 = [c for c in names if contenders.precision(c) == "bfloat16"]
    if bfloat16 and meta["peaks"].get("bfloat16"):
        twins = [c for c in ours if contenders.float32_twin(c) in names]
        lines[0] += (f" The bfloat16 contenders ({', '.join(bfloat16)}) train under torch.autocast(\"cpu\", "
                     f"dtype=torch.bfloat16); their % of limit is at the bfloat16 GEMM peak, "
                     f"{gflops(meta['peaks']['bfloat16'][1])} GFLOP/s at 1 thread and "
                     f"{gflops(meta['peaks']['bfloat16'][2])} at 2 (PyTorch's 2048^3 bfloat16 product), and each "
                     "bfloat16 onnxtrain contender's ratio is to the fastest bfloat16 peer"
                     + (f"; \"/ own float32\" is {', '.join(twins)} over its float32 twin, round by round."
                        if twins else "."))
        if rows and rows[0].get("bfloat16_isa") is not None:
            lines[0] += f" The host's bfloat16 instructions: {rows[0]['bfloat16_isa']}."
    twins = [c for c in ours if any(f"{c}@1" in r.get("own_float32", {}) for r in rows)]
    failures = {}

    def cell(r, c, text):
        if c in r["failed"]:
            number = failures.setdefault((r["title"], c), len(failures) + 1)
            return f"failed [{number}]"
        return text

    for threads in (1, 2):
        lines += ["", f"**Step time at {threads} thread{'s' if threads > 1 else ''}, ms** (% of limit)", "",
                  "| model | batch | " + " | ".join(names) + " | " + " | ".join(f"**{c} / fastest**" for c in ours)
                  + "".join(f" | **{c} / own float32**" for c in twins) + " |",
                  "|---" * (2 + len(names) + len(ours) + len(twins)) + "|"]
        for r in rows:
            cells = []
            for c in names:
                key = f"{c}@{threads}"
                text = (f"{ms(r['step'][key]['median'])} ({100 * r['pct_limit'][key]:.0f}%)" if key in r["pct_limit"]
                        else ms(r['step'][key]['median']) if key in r["step"] else "-")
                cells.append(cell(r, c, text))
            ratios = [f"**{sp(r['ratio'][f'{c}@{threads}'])}**" if f"{c}@{threads}" in r["ratio"] else "-" for c in ours]
            own = r.get("own_float32", {})
            ratios += [f"**{sp(own[f'{c}@{threads}'])}**" if f"{c}@{threads}" in own else "-" for c in twins]
            lines.append(f"| {r['title']} | {r['batch']} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
    lines += ["", "**First step s / peak RSS MB / largest loss difference from float64 eager**, 1 thread", "",
              "| model | " + " | ".join(names) + " |", "|---" * (1 + len(names)) + "|"]
    for r in rows:
        cells = []
        for c in names:
            text = "-"
            if c in r["first"]:
                diff = r.get("loss_diff", {}).get(c)
                text = f"{r['first'][c]:.2f} / {r['rss'][c]:.0f} / " + (f"{diff:.0e}" if diff is not None else "-")
                breaks = r["evidence"].get(c, {}).get("graph_breaks")
                if breaks:
                    text += f" ({breaks} graph breaks)"
            cells.append(cell(r, c, text) if c in r["failed"] else text)
        lines.append(f"| {r['title']} | " + " | ".join(cells) + " |")
    started = [r for r in rows if r.get("start")]
    for threads in (1, 2) if started else ():
        lines += ["", f"**Start at {threads} thread{'s' if threads > 1 else ''}: first step s / second step s / time to "
                  "the 20th step s** (a cold process, from its first call into the model; after them, at 1 thread, the "
                  "peak RSS MB of onnxtrain's largest child process, its export's or larger)", "",
                  "| model | " + " | ".join(names) + " |", "|---" * (1 + len(names)) + "|"]
        for r in started:
            cells = []
            for c in names:
                figures = r["start"].get(f"{c}@{threads}")
                text = "-"
                if figures:
                    text = " / ".join(f"{figures[k]:.2f}" if k in figures else "-" for k in ("first", "second", "to_20th"))
                    if threads == 1 and figures.get("export_child_rss_mb"):
                        text += f" ({figures['export_child_rss_mb']:.0f} MB)"
                cells.append(cell(r, c, text) if c in r["failed"] else text)
            lines.append(f"| {r['title']} | " + " | ".join(cells) + " |")
    for r in rows:
        if "gemm_efficiency" in r:
            lines += ["", f"{r['title']}: the engine's GEMMs at {r['gemm_gflops']:.0f} GFLOP/s, "
                          f"{100 * r['gemm_efficiency']:.0f}% of the sgemm peak (best of five profiled steps per GEMM)."]
    if failures:
        lines += ["", "Failed contenders:", ""] + [
            f"{number}. {title}, {c}: {next(r['failed'][c] for r in rows if r['title'] == title)}"
            for (title, c), number in failures.items()]
    missed = misses(rows)
    lines += ["", "Targets missed: " + ("; ".join(missed) if missed else "none") + "."]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- the README's table

# One file per zoo model, written by every run that measures by the README's method: the whole zoo
# takes hours, so runs of a few models each fill the table, and a row says when it was measured.
ROWS_DIR = os.path.join(HERE, "results", "rows")
# The bfloat16 table's (bench/run --contenders bf16), over models.BFLOAT16_ZOO.
ROWS_DIR_BF16 = os.path.join(HERE, "results", "rows-bf16")


def _rows_dir(precision):
    return ROWS_DIR_BF16 if precision == "bfloat16" else ROWS_DIR


def _table_models(precision):
    import models
    return models.BFLOAT16_ZOO if precision == "bfloat16" else list(models.ZOO)


def by_the_method(args):
    """Every contender, the zoo's own steps, at least 3 rounds, both thread counts, the loss check,
    the GEMM profile, and the default output folder: a run whose rows may stand in the README."""
    every_contender = not args.contenders_given or getattr(args, "precision", "float32") == "bfloat16"
    return (every_contender and not args.quick and args.steps == 0 and args.warmup == 0
            and args.rounds >= 3 and args.agreement_steps > 0 and args.thread_counts == [1, 2]
            and args.out == os.path.join(HERE, "results"))


def store_rows(rows, meta, precision="float32"):
    os.makedirs(_rows_dir(precision), exist_ok=True)
    for r in rows:
        with open(os.path.join(_rows_dir(precision), r["model"] + ".json"), "w") as f:
            json.dump(dict(meta=meta, row=r), f, indent=1)


def stored_rows(machine, names, precision="float32"):
    """The stored rows measured on `machine` with the contenders `names`, in zoo order, with their
    runs' meta; and the zoo models that have none."""
    found, missing = [], []
    for model in _table_models(precision):
        path = os.path.join(_rows_dir(precision), model + ".json")
        stored = None
        if os.path.exists(path):
            with open(path) as f:
                stored = json.load(f)
        if stored and stored["meta"]["machine"] == machine and stored["meta"]["contenders"] == list(names):
            stored["meta"]["peaks"] = {(k if k == "bfloat16" else int(k)): (v if k != "bfloat16" else
                                                                          {int(t): p for t, p in v.items()})
                                       for k, v in stored["meta"]["peaks"].items()}
            row = stored["row"]
            row["fastest_peer"] = {int(k): v for k, v in row.get("fastest_peer", {}).items()}  # JSON keys are strings
            found.append(stored)
        else:
            missing.append(model)
    return found, missing


def assembled_table(machine, names, precision="float32", note_missing=True):
    """The README's table: every stored row of this machine and contender set. Each row keeps the %
    of limit of its own run's sgemm peak; the header gives the dates and the peaks' range."""
    found, missing = stored_rows(machine, names, precision)
    command = "bench/run --models " + ",".join(missing) + (" --contenders bf16" if precision == "bfloat16" else "")
    if not found:
        return f"Nothing measured on {machine} with these contenders yet: `{command}` measures the zoo.\n"
    rows = [s["row"] for s in found]
    dates = sorted({s["meta"]["date"] for s in found})
    peaks = {t: [s["meta"]["peaks"][t] for s in found] for t in (1, 2)}
    bfloat16_peaks = {t: [s["meta"]["peaks"]["bfloat16"][t] for s in found
                          if t in s["meta"]["peaks"].get("bfloat16", {})] for t in (1, 2)}
    commits = sorted({s["meta"].get("commit", "unknown") for s in found})
    meta = dict(date=dates[0] if len(dates) == 1 else f"{dates[0]} to {dates[-1]}", machine=machine,
                commit=", ".join(commits),
                peaks={t: (min(v), max(v)) for t, v in peaks.items()}, rounds=min(s["meta"]["rounds"] for s in found),
                contenders=list(names))
    if precision == "bfloat16" and all(bfloat16_peaks.values()):
        meta["peaks"]["bfloat16"] = {t: (min(v), max(v)) for t, v in bfloat16_peaks.items()}
    table = markdown(rows, meta)
    if missing and note_missing:
        table += (f"\nNot yet measured on this machine by the method above (`{command}` adds them): "
                  + ", ".join(missing) + ".\n")
    return table


def tables_of_every_machine(machine, names, precision):
    """The bfloat16 README section: a table per machine with stored rows (this one first), since
    hosts differ in their bfloat16 instructions (AVX512_BF16, AMX) and a model's row was measured on
    one of them; then the zoo models no machine has a row of."""
    machines = {machine}
    for model in _table_models(precision):
        path = os.path.join(_rows_dir(precision), model + ".json")
        if os.path.exists(path):
            with open(path) as f:
                machines.add(json.load(f)["meta"]["machine"])
    tables, measured = [], set()
    for m in sorted(machines, key=lambda m: (m != machine, m)):
        found, _ = stored_rows(m, names, precision)
        if found:
            tables.append(assembled_table(m, names, precision, note_missing=False))
            measured.update(s["row"]["model"] for s in found)
    missing = [model for model in _table_models(precision) if model not in measured]
    command = "bench/run --models " + ",".join(missing) + " --contenders bf16"
    if not tables:
        return f"Nothing measured with these contenders yet: `{command}` measures the zoo.\n"
    text = "\n".join(tables)
    if missing:
        text += f"\nNot yet measured on any machine by the method above (`{command}` adds them): " + ", ".join(missing) + ".\n"
    return text


def update_readme(table, markers=(README_BEGIN, README_END), path=os.path.join(ROOT, "README.md")):
    """Replaces what lies between README.md's two marker lines with `table`; every table the
    benches generate (this one, bench/elementwise.py's, bench/memory_optimization.py's) goes in so."""
    with open(path) as f:
        text = f.read()
    begin, end = text.index(markers[0]), text.index(markers[1])
    text = text[:begin + len(markers[0])] + "\n" + table + text[end:]
    with open(path, "w") as f:
        f.write(text)


def chart(rows, path):
    """Each onnxtrain contender's step time over the fastest peer's, per model and thread count."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    keys = sorted({k for r in rows for k in r["ratio"]})
    fig, ax = plt.subplots(figsize=(1.2 * len(rows) + 3, 4))
    width = 0.8 / max(1, len(keys))
    for i, key in enumerate(keys):
        xs = [x for x, r in enumerate(rows) if key in r["ratio"]]
        med = [rows[x]["ratio"][key]["median"] for x in xs]
        err = [[m - rows[x]["ratio"][key]["min"] for m, x in zip(med, xs)],
               [rows[x]["ratio"][key]["max"] - m for m, x in zip(med, xs)]]
        ax.bar([x - 0.4 + (i + 0.5) * width for x in xs], med, width, yerr=err, capsize=2, label=key.replace("@", ", threads "))
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.axhline(STEP_TARGET, color="gray", linewidth=0.8, linestyle="--")
    ax.set_xticks(list(range(len(rows))))
    ax.set_xticklabels([r["model"] for r in rows], rotation=30, ha="right")
    ax.set_ylabel("step time / fastest peer's (lower is faster)")
    ax.set_title("onnxtrain against the fastest of eager, torch.compile and ORT's ORTModule")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="", help="comma-separated subset of the zoo (default: all)")
    p.add_argument("--rounds", type=int, default=3, help="rounds of every contender per model and thread count")
    p.add_argument("--contenders", default="", help="comma-separated subset of bench/contenders.py's (default: all)")
    p.add_argument("--steps", type=int, default=0, help="timed steps per process (default: the zoo entry's)")
    p.add_argument("--warmup", type=int, default=0, help="warm-up steps per process (default: the zoo entry's)")
    p.add_argument("--agreement-steps", type=int, default=10)
    p.add_argument("--out", default=os.path.join(HERE, "results"))
    p.add_argument("--quick", action="store_true", help="skip the GEMM-efficiency profile")
    p.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    p.add_argument("--readme", action="store_true", help="only rewrite README.md's table from the stored rows "
                   "(bench/results/rows/) of this machine and the contenders")
    p.add_argument("--threads-list", default="1,2", help="thread counts to measure; anything but 1,2 is a quick "
                   "look that writes no table")
    p.add_argument("--memory-optimization", choices=["none", "recompute"], default=None,
                   help="the engine's DebugOptions(memory_optimization=...), through ONNXTRAIN_MEMORY_OPTIMIZATION "
                   "(default: the environment's)")
    # internal: one measurement process
    p.add_argument("--mode", choices=["orchestrate", "single", "peak"], default="orchestrate")
    p.add_argument("--model")
    p.add_argument("--contender")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--dropout", type=float, default=None)
    p.add_argument("--save-initial-state", default=None, help="internal: write the model's initial state_dict here")
    p.add_argument("--initial-state", default=None, help="internal: start from this state_dict")
    p.add_argument("--agreement", action="store_true", help="internal: a loss-agreement run, whose steps all run on "
                   "the engine (no eager warm-up)")
    p.add_argument("--count-flops", action="store_true")
    p.add_argument("--gemm-efficiency", action="store_true")
    args = p.parse_args()
    args.contenders_given = bool(args.contenders)
    if args.memory_optimization:  # the measurement processes inherit it
        os.environ["ONNXTRAIN_MEMORY_OPTIMIZATION"] = args.memory_optimization
    {"orchestrate": orchestrate, "single": run_single, "peak": run_peak}[args.mode](args)


if __name__ == "__main__":
    main()
