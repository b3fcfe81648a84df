#!/usr/bin/python3
"""Each elementwise kernel's memory bandwidth against a plain copy of the same tensor (issue 36).

    bench/run --elementwise                       # every op below, N = 2^23 float32, 1 thread, 9 repeats
    bench/run --elementwise --ops Relu,ReluGrad --n 65536 --repeats 1 --out /tmp/e.md
    bench/run --elementwise --readme              # only rewrite README.md's table from the stored results

Each op runs as a one-node ONNX model (opset 17, ai.onnxtrain 1) in onnxtrain._C.InferenceSession
at opt_level 0, so no pass rewrites or fuses it, over tensors of N elements, far beyond the caches.
An elementwise kernel at full speed is limited by memory, as a copy is: bytes moved = the bytes of
its N-sized inputs and outputs (scalar parameters are initializers and do not count), and GB/s =
bytes / median kernel time. A copy moves 2 x 4N bytes; "x copy" is an op's GB/s over the faster of
torch's Tensor.copy_ and numpy's copyto into a preallocated tensor, torch's at the same thread count
(numpy's copy is single-threaded). Both sides stream tensors far beyond the caches, so the ratio
compares like with like.

Timing is the engine's profiler (src/runtime/profiler.cc): each repeat runs under its own
profiler_start/profiler_stop, and its time is the sum of the trace's kernel events. That is the
kernel alone: neither the Python call, nor the DLPack conversions, nor the executor's own work. Its
resolution is 1 us, far below the milliseconds of a kernel at the default N. After the warm-up runs
the output buffers come from the engine's buffer cache (each run's outputs are dropped before the
next), so first-touch page faults, which a preallocated copy target never pays, are not measured.
Ops below half of copy speed are flagged; the README says why.

Left out, not same-shape float maps: the comparisons, logic and bitwise ops, IsNaN/IsInf, Cast and
CastLike (bool or integer data), BitShift/FloorDiv (integers only), Identity and StopGradient
(aliases, no work), Bernoulli and the Random*Like ops (generators), Softmax/LogSoftmax and their
grads (row reductions), FusedElementwise (made by the fusion pass from the ops listed here), and the
reductions, pools and ...Grad kernels of non-elementwise ops. There is no Mish kernel (torch exports
it as Softplus, Tanh and Mul).
"""
import argparse
import datetime
import json
import os
import shlex
import statistics
import sys
import tempfile
import time

import numpy as np
import torch
from onnx import TensorProto, helper, numpy_helper
from torch.utils.dlpack import from_dlpack, to_dlpack

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.environ.get("ONNXTRAIN_PYTHONPATH", os.path.join(ROOT, "python")))
sys.path.insert(0, HERE)
from onnxtrain import _C  # noqa: E402  (from the path above)
import bench  # noqa: E402  (its machine and commit names, and its README writer)

README_BEGIN, README_END = "<!-- elementwise-table:start -->", "<!-- elementwise-table:end -->"
DEFAULT_OUT = os.path.join(HERE, "results", "elementwise.md")
SLOW = 0.5  # below this fraction of copy speed an op is flagged


# Input makers: (number of elements, torch.Generator) -> tensor. Values lie where each op is defined
# and its branches are taken both ways (signs mixed), as activations see them.
def uniform(lo, hi, rows=1):
    def make(n, gen):
        shape = (rows, n // rows) if rows > 1 else (n,)
        return torch.empty(shape).uniform_(lo, hi, generator=gen)
    return make


def mask(n, gen):
    return torch.rand(n, generator=gen) < 0.9


def per_channel(n, gen):  # a slope per row of X = uniform(..., rows=64): PReLU(num_parameters=C)
    return torch.empty(64, 1).uniform_(0.1, 0.3, generator=gen)


MIXED, POSITIVE, GRAD = uniform(-3, 3), uniform(0.5, 2), uniform(-1, 1)
UNIT, ABOVE_ONE, OPEN_UNIT = uniform(-0.9, 0.9), uniform(1.1, 3), uniform(0.01, 0.99)


def op(name, inputs, domain="", kind="forward", label=None, outputs=("output",), **attrs):
    """One benchmark row: `inputs` maps each input name to an input maker (an N-sized graph input)
    or to a number (a scalar initializer, whose bytes do not count)."""
    return dict(op=name, domain=domain, kind=kind, label=label or name, inputs=inputs, outputs=outputs, attrs=attrs)


def grad(name, inputs, label=None, **attrs):
    return op(name, inputs, "ai.onnxtrain", "gradient", label, **attrs)


UNARY = [("Relu", MIXED), ("Sigmoid", MIXED), ("Tanh", MIXED), ("Exp", MIXED), ("Log", POSITIVE), ("Sqrt", POSITIVE),
         ("Reciprocal", POSITIVE), ("Abs", MIXED), ("Neg", MIXED), ("Erf", MIXED), ("Softplus", MIXED),
         ("Softsign", MIXED), ("HardSwish", MIXED), ("Sin", MIXED), ("Cos", MIXED), ("Tan", UNIT), ("Asin", UNIT),
         ("Acos", UNIT), ("Atan", MIXED), ("Sinh", MIXED), ("Cosh", MIXED), ("Asinh", MIXED), ("Acosh", ABOVE_ONE),
         ("Atanh", UNIT), ("Floor", MIXED), ("Ceil", MIXED), ("Round", MIXED), ("Sign", MIXED)]
# <Op>Grad(dY, V): V is the forward's X, or its Y where the rule saves Y (ops/math, ops/activation).
GRADS_OF = [("Relu", "Y", MIXED), ("Sigmoid", "Y", OPEN_UNIT), ("Tanh", "Y", UNIT), ("Softplus", "Y", POSITIVE),
            ("Softsign", "X", MIXED), ("HardSwish", "X", MIXED), ("Silu", "X", MIXED), ("Erf", "X", MIXED),
            ("Sqrt", "Y", POSITIVE), ("Reciprocal", "Y", POSITIVE), ("Abs", "X", MIXED), ("Sin", "X", MIXED),
            ("Cos", "X", MIXED), ("Tan", "Y", MIXED), ("Asin", "X", UNIT), ("Acos", "X", UNIT), ("Atan", "X", MIXED),
            ("Sinh", "X", MIXED), ("Cosh", "X", MIXED), ("Asinh", "X", MIXED), ("Acosh", "X", ABOVE_ONE),
            ("Atanh", "X", UNIT)]
SPECS = (
    [op(name, {"X": values}) for name, values in UNARY]
    + [op("LeakyRelu", {"X": MIXED}, alpha=0.01), op("Elu", {"X": MIXED}), op("Selu", {"X": MIXED}),
       op("Celu", {"X": MIXED}), op("HardSigmoid", {"X": MIXED}), op("ThresholdedRelu", {"X": MIXED}),
       op("Shrink", {"X": MIXED}, lambd=0.5), op("Clip", {"X": MIXED, "min": -1.0, "max": 1.0}),
       op("Gelu", {"X": MIXED}, "ai.onnxtrain", label="Gelu (none)", approximate="none"),
       op("Gelu", {"X": MIXED}, "ai.onnxtrain", label="Gelu (tanh)", approximate="tanh"),
       op("Silu", {"X": MIXED}, "ai.onnxtrain"),
       op("HardTanh", {"X": MIXED}, "ai.onnxtrain", label="HardTanh (0, 6)", min_val=0.0, max_val=6.0),
       op("Dropout", {"X": MIXED, "ratio": 0.1, "training_mode": True}, label="Dropout (train, 0.1)",
          outputs=("output", "mask_output"))]
    + [op(name, {"A": MIXED, "B": POSITIVE}) for name in ("Add", "Sub", "Mul", "Div", "Max", "Min", "Sum", "Mean")]
    + [op("Pow", {"X": POSITIVE, "E": MIXED}), op("Pow", {"X": MIXED, "E": 2.0}, label="Pow (scalar 2)"),
       op("Mod", {"A": MIXED, "B": POSITIVE}, label="Mod (fmod)", fmod=1),
       op("PRelu", {"X": MIXED, "slope": uniform(0.1, 0.3)}, label="PRelu (same-shape slope)"),
       op("PRelu", {"X": uniform(-3, 3, rows=64), "slope": per_channel}, label="PRelu (per-channel slope)"),
       op("Where", {"C": mask, "A": MIXED, "B": MIXED})]
    + [grad(f"{name}Grad", {"dY": GRAD, saved: values}) for name, saved, values in GRADS_OF]
    + [grad("LeakyReluGrad", {"dY": GRAD, "Y": MIXED}, alpha=0.01),
       grad("EluGrad", {"dY": GRAD, "Y": uniform(-0.95, 3)}, label="EluGrad (from Y)", op="Elu", is_result=1),
       # Y beyond [0, 1] takes the saturated branch, as y = 0 or 1 does.
       grad("HardSigmoidGrad", {"dY": GRAD, "Y": uniform(-0.2, 1.2)}, alpha=0.2),
       grad("GeluGrad", {"dY": GRAD, "X": MIXED}, label="GeluGrad (none)", approximate="none"),
       grad("GeluGrad", {"dY": GRAD, "X": MIXED}, label="GeluGrad (tanh)", approximate="tanh"),
       grad("HardTanhGrad", {"dY": GRAD, "X": uniform(-2, 8)}, label="HardTanhGrad (0, 6)", min_val=0.0, max_val=6.0),
       grad("ClipGrad", {"dY": GRAD, "X": MIXED, "min": -1.0, "max": 1.0}),
       grad("DropoutGrad", {"dY": GRAD, "mask": mask, "ratio": 0.1}),
       grad("PowGrad", {"dY": GRAD, "X": POSITIVE, "E": MIXED}, label="PowGrad (base)", input=0),
       grad("PowGrad", {"dY": GRAD, "X": POSITIVE, "E": MIXED}, label="PowGrad (exponent)", input=1),
       grad("MaxGrad", {"dY": GRAD, "A": MIXED, "B": MIXED}, input=0),
       grad("MinGrad", {"dY": GRAD, "A": MIXED, "B": MIXED}, input=0),
       grad("PReluGrad", {"dY": GRAD, "X": MIXED, "slope": uniform(0.1, 0.3)}, label="PReluGrad (X)", input=0),
       grad("PReluGrad", {"dY": GRAD, "X": MIXED, "slope": uniform(0.1, 0.3)}, label="PReluGrad (slope)", input=1)])


# torch's own kernel for a row, where torch has one, writing into a preallocated tensor as the
# engine's buffer cache lets it: label -> f(inputs by name, out) making the call. The time of the
# same op in the framework a user would otherwise run tells a compute-bound kernel (both slow)
# from a slow one (only ours).
A = torch.ops.aten
SELU_ALPHA, SELU_SCALE = 1.6732632423543772, 1.0507009873554805
def _torch_function(name, *extra):
    """torch.<name>(the row's inputs in order, *extra, out=o)."""
    return lambda t, o: getattr(torch, name)(*t.values(), *extra, out=o)


TORCH = {label: _torch_function(name) for label, name in {
    "Sigmoid": "sigmoid", "Tanh": "tanh", "Exp": "exp", "Log": "log", "Sqrt": "sqrt", "Reciprocal": "reciprocal",
    "Abs": "abs", "Neg": "neg", "Erf": "erf", "Sin": "sin", "Cos": "cos", "Tan": "tan", "Asin": "asin",
    "Acos": "acos", "Atan": "atan", "Sinh": "sinh", "Cosh": "cosh", "Asinh": "asinh", "Acosh": "acosh",
    "Atanh": "atanh", "Floor": "floor", "Ceil": "ceil", "Round": "round", "Sign": "sign", "Add": "add",
    "Sub": "sub", "Mul": "mul", "Div": "div", "Max": "maximum", "Min": "minimum", "Pow": "pow",
    "Mod (fmod)": "fmod", "Where": "where"}.items()}
TORCH.update({
    "Relu": _torch_function("clamp_min", 0.0),
    "Clip": _torch_function("clamp", -1.0, 1.0),
    "Softplus": lambda t, o: A.softplus.out(t["X"], 1.0, 20.0, out=o),
    "HardSwish": lambda t, o: A.hardswish.out(t["X"], out=o),
    "LeakyRelu": lambda t, o: A.leaky_relu.out(t["X"], 0.01, out=o),
    "Elu": lambda t, o: A.elu.out(t["X"], 1.0, 1.0, 1.0, out=o),
    "Selu": lambda t, o: A.elu.out(t["X"], SELU_ALPHA, SELU_SCALE, 1.0, out=o),
    "Celu": lambda t, o: A.elu.out(t["X"], 1.0, 1.0, 1.0, out=o),  # alpha 1: the bench's Celu
    "HardSigmoid": lambda t, o: A.hardsigmoid.out(t["X"], out=o),
    "Gelu (none)": lambda t, o: A.gelu.out(t["X"], approximate="none", out=o),
    "Gelu (tanh)": lambda t, o: A.gelu.out(t["X"], approximate="tanh", out=o),
    "Silu": lambda t, o: A.silu.out(t["X"], out=o),
    "HardTanh (0, 6)": lambda t, o: A.hardtanh.out(t["X"], 0.0, 6.0, out=o),
    "ReluGrad": lambda t, o: A.threshold_backward.grad_input(t["dY"], t["Y"], 0.0, grad_input=o),
    "SigmoidGrad": lambda t, o: A.sigmoid_backward.grad_input(t["dY"], t["Y"], grad_input=o),
    "TanhGrad": lambda t, o: A.tanh_backward.grad_input(t["dY"], t["Y"], grad_input=o),
    # torch's softplus_backward reads X where ours reads Y: the same work, a sigmoid per element.
    "SoftplusGrad": lambda t, o: A.softplus_backward.grad_input(t["dY"], t["Y"], 1.0, 20.0, grad_input=o),
    "SiluGrad": lambda t, o: A.silu_backward.grad_input(t["dY"], t["X"], grad_input=o),
    "LeakyReluGrad": lambda t, o: A.leaky_relu_backward.grad_input(t["dY"], t["Y"], 0.01, True, grad_input=o),
    "EluGrad (from Y)": lambda t, o: A.elu_backward.grad_input(t["dY"], 1.0, 1.0, 1.0, True, t["Y"], grad_input=o),
    "HardSigmoidGrad": lambda t, o: A.hardsigmoid_backward.grad_input(t["dY"], t["Y"], grad_input=o),
    "GeluGrad (none)": lambda t, o: A.gelu_backward.grad_input(t["dY"], t["X"], approximate="none", grad_input=o),
    "GeluGrad (tanh)": lambda t, o: A.gelu_backward.grad_input(t["dY"], t["X"], approximate="tanh", grad_input=o),
    "HardTanhGrad (0, 6)": lambda t, o: A.hardtanh_backward.grad_input(t["dY"], t["X"], 0.0, 6.0, grad_input=o),
})


def torch_seconds(spec, tensors, args):
    """torch's kernel for the row by wall clock (its Python call's microsecond is nothing beside
    the default N), or None where torch has no such op."""
    if spec["label"] not in TORCH:
        return None
    out = torch.empty_like(next(t for t in tensors.values() if t.dtype == torch.float32))
    run = TORCH[spec["label"]]
    return statistics.median(wall_clock_times(lambda: run(tensors, out), args))


def wall_clock_times(call, args):
    """`args.repeats` wall-clock times of call() after `args.warmup` untimed calls."""
    for _ in range(args.warmup):
        call()
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return times


def model_bytes(spec, tensors):
    elem = {torch.float32: TensorProto.FLOAT, torch.bool: TensorProto.BOOL}
    graph_inputs = [helper.make_tensor_value_info(name, elem[t.dtype], list(t.shape)) for name, t in tensors.items()]
    scalars = [numpy_helper.from_array(np.array(v, dtype=np.bool_ if isinstance(v, bool) else np.float32), name)
               for name, v in spec["inputs"].items() if name not in tensors]
    outputs = [helper.make_tensor_value_info(name, TensorProto.UNDEFINED, None) for name in spec["outputs"]]
    node = helper.make_node(spec["op"], list(spec["inputs"]), list(spec["outputs"]), domain=spec["domain"],
                            **spec["attrs"])
    graph = helper.make_graph([node], spec["label"], graph_inputs, outputs, initializer=scalars)
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("ai.onnxtrain", 1)]
    return helper.make_model(graph, opset_imports=opsets).SerializeToString()


def kernel_seconds(session, tensors, trace):
    """One run under the profiler: the sum of its kernel events, and the op types that ran."""
    capsules = [to_dlpack(t.view(torch.uint8) if t.dtype == torch.bool else t) for t in tensors.values()]
    _C.profiler_start(trace)
    outputs = session.run(capsules)
    _C.profiler_stop()
    del outputs  # back to the buffer cache, for the next run's output
    with open(trace) as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    return sum(e["dur"] for e in events) * 1e-6, {e["name"] for e in events}


def measure_op(spec, n, args, trace):
    gen = torch.Generator().manual_seed(0)
    tensors = {name: make(n, gen) for name, make in spec["inputs"].items() if callable(make)}
    session = _C.InferenceSession(model_bytes(spec, tensors), opt_level=0)
    capsules = [to_dlpack(t.view(torch.uint8) if t.dtype == torch.bool else t) for t in tensors.values()]
    outputs, _ = session.run(capsules)  # the first run plans; its outputs give the bytes written
    moved = sum(t.numel() * t.element_size() for t in tensors.values())
    moved += sum(from_dlpack(c).numpy().nbytes for c in outputs if c is not None)
    del outputs
    for _ in range(args.warmup - 1):
        kernel_seconds(session, tensors, trace)
    times, ran = [], set()
    for _ in range(args.repeats):
        seconds, op_types = kernel_seconds(session, tensors, trace)
        times.append(max(seconds, 1e-6))  # a tiny smoke-test N can finish within the profiler's 1 us
        ran |= op_types
    assert ran == {spec["op"]}, f"{spec['label']}: the session ran {sorted(ran)}, not {spec['op']}"
    return dict(times=times, bytes=moved, torch_seconds=torch_seconds(spec, tensors, args), inputs=", ".join(
        name if callable(v) else f"{name}={v}" for name, v in spec["inputs"].items()))


def measure_copies(n, args):
    """Tensor.copy_ and numpy.copyto of N float32 into a preallocated tensor, by wall clock: the
    Python call's microsecond is nothing beside a copy of the default N."""
    src, dst = torch.rand(n), torch.zeros(n)
    src_np, dst_np = src.numpy(), dst.numpy()
    rows = {}
    for label, copy in (("copy (torch Tensor.copy_)", lambda: dst.copy_(src)),
                        ("copy (numpy copyto)", lambda: np.copyto(dst_np, src_np))):
        times = wall_clock_times(copy, args)
        rows[label] = dict(op="copy", label=label, domain="torch" if "torch" in label else "numpy", kind="baseline",
                           inputs="X", times=times, bytes=2 * src_np.nbytes)
    return rows


def gbps(row):
    return row["bytes"] / statistics.median(row["times"]) / 1e9


def table(rows, copy_gbps, args):
    command = "bench/run --elementwise" + "".join(" " + shlex.quote(a) for a in sys.argv[1:])
    ms = lambda t: f"{1e3 * t:.3f}" if t < 1e-3 else f"{1e3 * t:.2f}" if t < 0.1 else f"{1e3 * t:.0f}"  # noqa: E731
    lines = [f"`{command}`, {datetime.date.today()} (commit {bench._commit()}) on {bench._machine()}: "
             f"N = {args.n} float32 elements per tensor, {args.threads} thread(s), {args.warmup} warm-up runs, "
             f"median (min-max) of {args.repeats} timed runs of the kernel alone (the engine's profiler). GB/s "
             f"counts the bytes of every N-sized input and output once; \"x copy\": over the faster copy's "
             f"{copy_gbps:.1f} GB/s; **slow**: below {SLOW} of it. \"torch ms\": torch {torch.__version__}'s "
             f"kernel for the same op on the same tensors into a preallocated output (wall clock, median), where "
             f"torch has one.", "",
             "| op | domain | kind | inputs | median ms (min-max) | GB/s | x copy | flag | torch ms |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        t, ratio = r["times"], gbps(r) / copy_gbps
        theirs = r.get("torch_seconds")
        lines.append(f"| {r['label']} | {r['domain'] or 'onnx'} | {r['kind']} | {r['inputs']} | "
                     f"{ms(statistics.median(t))} ({ms(min(t))}-{ms(max(t))}) | {gbps(r):.1f} | {ratio:.2f} | "
                     f"{'**slow**' if ratio < SLOW else ''} | {ms(theirs) if theirs else '-'} |")
    slow = [r["label"] for r in rows if gbps(r) / copy_gbps < SLOW]
    lines += ["", f"Below {SLOW} x copy: " + (", ".join(slow) if slow else "none") + "."]
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=2 ** 23, help="elements per tensor (default 2^23: 32 MiB of float32)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeats", type=int, default=9)
    p.add_argument("--ops", help="comma-separated op types (all their variants), default every op")
    p.add_argument("--out", default=DEFAULT_OUT, help="where the markdown table goes")
    p.add_argument("--readme", action="store_true", help="only rewrite README.md's table from the stored --out file")
    args = p.parse_args()
    if args.readme:
        with open(args.out) as f:
            bench.update_readme(f.read(), (README_BEGIN, README_END), os.path.join(ROOT, "README.md"))
        print(f"[elementwise] README.md table rewritten from {args.out}", flush=True)
        return
    torch.set_num_threads(args.threads)
    _C.set_num_threads(args.threads)
    wanted = set(args.ops.split(",")) if args.ops else None
    specs = [s for s in SPECS if wanted is None or s["op"] in wanted]
    if wanted and wanted - {s["op"] for s in specs}:
        sys.exit(f"not benchmarked here: {', '.join(sorted(wanted - {s['op'] for s in specs}))}")
    kernels = {tuple(k) for k in _C.ops_with_kernels()}
    missing = [s["op"] for s in specs if (s["domain"], s["op"]) not in kernels]
    if missing:
        sys.exit(f"this build has no kernel for: {', '.join(missing)}")
    copies = measure_copies(args.n, args)
    copy_gbps = max(gbps(r) for r in copies.values())
    rows = list(copies.values())
    with tempfile.TemporaryDirectory() as tmp:
        for spec in specs:
            row = dict(spec, **measure_op(spec, args.n, args, os.path.join(tmp, "trace.json")))
            rows.append(row)
            print(f"[elementwise] {row['label']}: {gbps(row):.1f} GB/s, {gbps(row) / copy_gbps:.2f} x copy",
                  file=sys.stderr, flush=True)
    report = table(rows, copy_gbps, args)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(report)
    print(report)


if __name__ == "__main__":
    main()
