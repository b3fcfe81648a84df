"""A model of a zoo (torchvision, HuggingFace transformers, timm) trained through the engine, in
eager float32 and in eager float64, the floor, for a few steps.

Float32 alone cannot judge a deep model: a BatchNorm over a batch of 2 loses digits, a 1-ulp
near-tie in a max pool or a ReLU flips a decision and moves a whole upstream gradient, and a
gradient that is zero in exact arithmetic (a key bias under softmax, a bias before a BatchNorm) is
rounding noise. So the engine is held to the float64 run: on the logits, the loss, every parameter
gradient and every floating buffer, its distance to float64 must stay within FACTOR times eager
float32's own distance, plus FLOOR. Eager float32's distance is the largest over eager runs whose
inputs and parameters are perturbed at the level of float32 rounding (relative 1e-6): where a
decision sits that close, some perturbed run flips it too. A gradient is also measured against the
size of the whole gradient, so that a gradient that should be zero is judged by what it adds.

Each step starts all three runs from the same parameters (the float64 run's, rounded), so that
chaotic divergence over steps does not hide a wrong gradient; the steps still exercise the
engine's planned runs and buffer write-back. A gradient that eager leaves None must be None.

Under torch.autocast (bfloat16 or float16), the engine and eager run the same autocast, and the
floor is in units of the 16-bit type's rounding step (HALF_FLOOR_STEPS of them) instead: eager's
own 16-bit distance to float64 is the measure, as float32's is above.

A decision float32 cannot resolve at all is not left to chance: where the float64 run feeds a
ReLU a value within UNRESOLVABLE of zero, relative to the largest value of that input (below one
float32 rounding step of it), the sign float32 computes is noise, and the perturbed eager runs
need not flip it (resnet18 at step 2: 5.7e-9). Such a step's gradients are judged node by node
instead: onnxtrain.audit recomputes every node of the engine's step in float64 on its own inputs,
and each must be within zoo_audit's tolerance. Its logits, loss and buffers are compared as
always.
"""
import copy
import dataclasses
from typing import Any, Callable

import torch

from conftest import assert_engine_ran
import onnxtrain

STEPS = 3
PERTURBED_RUNS, PERTURBATION = 3, 1e-6
# The engine may be this many times farther from float64 than eager float32 is, plus a floor
# for the values where both are at float32's rounding level.
FACTOR, FLOOR = 10.0, 1e-4
HALF_FLOOR_STEPS = 1
# A ReLU input this close to zero, relative to that input's largest magnitude, has a sign float32
# cannot compute (its rounding step there is about 6e-8); the perturbed runs cover the range above.
UNRESOLVABLE = 1e-7
KINKED = (torch.nn.ReLU, torch.nn.ReLU6, torch.nn.LeakyReLU)
LEARNING_RATE = 0.05


@dataclasses.dataclass
class Case:
    """make() builds the float32 module (deterministic: no dropout); batch(gen) gives one step's
    (args, kwargs, target); loss(output, target) the scalar loss; logits(output) the output compared."""
    make: Callable[[], torch.nn.Module]
    batch: Callable[[torch.Generator], Any]
    loss: Callable[[Any, Any], torch.Tensor]
    logits: Callable[[Any], torch.Tensor]
    output_type: type = None  # the type each output must have (HF's ModelOutput subclasses)


def distance(a, b):
    """Normwise relative distance of a to the float64 reference b."""
    a, b = a.detach().double(), b.detach().double()
    return ((a - b).norm() / (b.norm() + 1e-30)).item()


class Comparison:
    """Distances to float64 of the engine and of eager float32 (the largest over the unperturbed
    and perturbed eager runs), per compared quantity."""

    def __init__(self, floor=FLOOR, eager_label="eager float32"):
        self.entries = []  # (what, engine distance, eager distance)
        self.floor = floor
        self.eager_label = eager_label

    def add(self, what, ours, eagers, ref64, scale=None):
        def dist(t):
            d = distance(t, ref64)
            if scale is not None:  # gradients near zero: measure against the whole gradient's size
                d = min(d, (t.detach().double() - ref64.detach().double()).norm().item() / scale)
            return d

        self.entries.append((what, dist(ours), max(dist(e) for e in eagers)))

    def problems(self):
        found = [f"{w}: engine {a:.2e} from float64, {self.eager_label} {b:.2e}" for w, a, b in self.entries
                 if a > FACTOR * b + self.floor]
        return found + [f"{w}: the audit's worst node {node} at {error:.2e} > {tolerance:.0e}"
                        for w, node, error, tolerance in self.audits if error > tolerance]

    audits = ()  # (step, worst node, its rel_error, tolerance) of the steps judged node by node

    def worst(self, prefix):
        rows = [e for e in self.entries if e[0].split(" ", 2)[2].startswith(prefix)]
        return max(rows, key=lambda e: e[1]) if rows else None

    def worst_ratio(self):
        """The largest engine / (eager + floor / FACTOR): at most FACTOR where every check passes."""
        return max(a / (b + self.floor / FACTOR) for _, a, b in self.entries)


def _map_tensors(obj, fn):
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, (tuple, list)):
        return type(obj)(_map_tensors(v, fn) for v in obj)
    if isinstance(obj, dict):
        return {k: _map_tensors(v, fn) for k, v in obj.items()}
    return obj


def _as_float64(obj):
    return _map_tensors(obj, lambda t: t.double() if t.is_floating_point() else t)


def _perturbed(obj, gen):
    return _map_tensors(obj, lambda t: t + PERTURBATION * t.abs() * torch.randn(t.shape, generator=gen)
                        if t.is_floating_point() else t)


def sync_from(reference, *models):
    with torch.no_grad():
        for m in models:
            for p, q in zip(m.parameters(), reference.parameters()):
                p.copy_(q)
            for b, c in zip(m.buffers(), reference.buffers()):
                b.copy_(c)
        # The float64 run continues from the float32-rounded values the others start from.
        for p in reference.parameters():
            p.copy_(p.float().double())
        for b in reference.buffers():
            if b.is_floating_point():
                b.copy_(b.float().double())


def perturbed_copies(model, count, seed):
    gen = torch.Generator().manual_seed(seed)
    copies = []
    for _ in range(count):
        m = copy.deepcopy(model)
        with torch.no_grad():
            for p in m.parameters():
                p.mul_(1 + PERTURBATION * torch.randn(p.shape, generator=gen))
        copies.append(m)
    return copies


def closest_kink(model, run):
    """Runs run() and returns the smallest |x| / max|x| over the inputs of model's ReLU-like
    modules (1.0 when it has none)."""
    smallest = [1.0]

    def record(module, inputs, output):
        x = inputs[0].detach().abs()
        top = x.max().item() if x.numel() else 0.0
        if top > 0:
            nonzero = x[x > 0]
            smallest[0] = min(smallest[0], nonzero.min().item() / top)

    hooks = [m.register_forward_hook(record) for m in model.modules() if isinstance(m, KINKED)]
    try:
        result = run()
    finally:
        for h in hooks:
            h.remove()
    return result, smallest[0]


def _audit_step(case, model, args, kwargs, target):
    """The worst node of the engine's training step on this batch, audited in float64."""
    import zoo_audit
    report = onnxtrain.audit(model, *args, loss_fn=lambda out: case.loss(out, target), **kwargs)
    worst = report.worst(1)[0]
    return worst.node, worst.rel_error, zoo_audit.AUDIT_TOLERANCE


def _step(case, model, args, kwargs, target, autocast=None):
    model.zero_grad(set_to_none=True)
    if autocast is None:
        output = model(*args, **kwargs)
    else:
        with torch.autocast("cpu", dtype=autocast):
            output = model(*args, **kwargs)
    if case.output_type is not None:
        assert isinstance(output, case.output_type), f"the output is a {type(output).__name__}"
    loss = case.loss(output, target)
    loss.backward()
    return case.logits(output), loss


def _float64_step(case, model, args, kwargs, target):
    """The float64 reference's step, with float64 the default dtype too: a tensor the model makes
    from a Python number must not be float32 there (torch 1.13's torch.full infers float32 for
    transformers 4.44's mask fill finfo(float64).min, and overflows)."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        return _step(case, model, _as_float64(args), _as_float64(kwargs), _as_float64(target))
    finally:
        torch.set_default_dtype(previous)


def _mean_scale(name, buffers64):
    """A BatchNorm's running mean is measured in units of its channels' standard deviation too:
    a mean that is zero in exact arithmetic (a channel fed by a zero-mean product) is rounding
    noise, whose size only the spread of the values gives."""
    if not name.endswith("running_mean"):
        return None
    var = buffers64.get(name[: -len("running_mean")] + "running_var")
    return None if var is None else max(var.clamp(min=0).sqrt().norm().item(), 1e-30)


def compare_with_float64(case, steps=STEPS, seed=0, autocast=None):
    """Trains case's model for `steps` steps through the engine, in eager float32 and in eager
    float64, and returns the Comparison of the logits, the loss, every gradient and buffer. The
    engine must run every step, with neither a fallback to PyTorch nor to another capture. With
    autocast (torch.bfloat16 or torch.float16), the engine and eager train under that autocast."""
    torch.manual_seed(seed)
    base = case.make()
    ref64 = copy.deepcopy(base).double()
    ref32 = copy.deepcopy(base)
    net = copy.deepcopy(base)
    model = onnxtrain.ORTModule(net)
    capture_fallbacks = len(onnxtrain.capture.FALLBACKS)
    gen = torch.Generator().manual_seed(seed + 1)
    comparison = Comparison() if autocast is None else Comparison(
        HALF_FLOOR_STEPS * torch.finfo(autocast).eps, f"eager under {str(autocast).replace('torch.', '')} autocast")
    for step in range(steps):
        sync_from(ref64, net, ref32)
        args, kwargs, target = case.batch(gen)
        eagers = [ref32] + perturbed_copies(ref32, PERTURBED_RUNS, seed=100 + step)
        logits, loss = _step(case, model, args, kwargs, target, autocast)
        assert_engine_ran(logits)
        eager_results = [_step(case, m, *_perturbed((args, kwargs), gen), target, autocast) if k else
                         _step(case, m, args, kwargs, target, autocast) for k, m in enumerate(eagers)]
        (logits64, loss64), kink = closest_kink(ref64, lambda: _float64_step(case, ref64, args, kwargs, target))
        if autocast is not None:  # a 16-bit sign flip is within the perturbed eager runs' spread
            kink = float("inf")
        comparison.add(f"step {step} logits", logits, [r[0] for r in eager_results], logits64)
        comparison.add(f"step {step} loss", loss, [r[1] for r in eager_results], loss64)
        total = torch.cat([p.grad.flatten() for p in ref64.parameters() if p.grad is not None]).norm().item()
        scale = max(total, 1e-30) / len(list(ref64.parameters())) ** 0.5
        eager_params = [list(m.parameters()) for m in eagers]
        for i, ((pname, p), r) in enumerate(zip(net.named_parameters(), ref64.parameters())):
            q = eager_params[0][i]
            if q.grad is None:
                assert p.grad is None, f"step {step}: {pname} has a gradient, eager has none"
                continue
            assert p.grad is not None, f"step {step}: {pname} has no gradient, eager has one"
            if kink >= UNRESOLVABLE:
                comparison.add(f"step {step} grad {pname}", p.grad, [e[i].grad for e in eager_params], r.grad, scale)
        if kink < UNRESOLVABLE:  # the gradients hang on a sign float32 cannot compute
            comparison.audits = comparison.audits + ((f"step {step} (a ReLU input at {kink:.1e} of its largest)",
                                                      *_audit_step(case, model, args, kwargs, target)),)
        eager_buffers = [list(m.buffers()) for m in eagers]
        buffers64 = dict(ref64.named_buffers())
        for i, ((bname, b), d) in enumerate(zip(net.named_buffers(), ref64.buffers())):
            if b.is_floating_point():
                comparison.add(f"step {step} buffer {bname}", b, [e[i] for e in eager_buffers], d,
                               _mean_scale(bname, buffers64))
            else:
                assert torch.equal(b, eager_buffers[0][i]), f"step {step} buffer {bname}: {b} vs {eager_buffers[0][i]}"
        # One SGD step in float64 moves the shared starting point for the next step.
        with torch.no_grad():
            for r in ref64.parameters():
                if r.grad is not None:
                    r.add_(r.grad, alpha=-LEARNING_RATE)
    assert model.fallback_reason is None, model.fallback_reason
    assert len(onnxtrain.capture.FALLBACKS) == capture_fallbacks, onnxtrain.capture.FALLBACKS[-1]
    return comparison


def table_row(name, comparison):
    """One row of the parity tables (README): the worst gradient, loss and buffer, engine / eager
    float32 distance to float64, and the largest ratio of the two."""
    cells = []
    for prefix in ("grad", "loss", "buffer"):
        w = comparison.worst(prefix)
        cells.append("-" if w is None else f"{w[1]:.1e} / {w[2]:.1e}")
    problems = comparison.problems()
    return (f"| {name} | {cells[0]} | {cells[1]} | {cells[2]} | {comparison.worst_ratio():.2f} | "
            f"{len(problems)} of {len(comparison.entries)} |")


TABLE_HEADER = ("| model | worst gradient: engine / eager float32 distance to float64 | loss | buffers "
                "| largest engine / (eager + floor) | checks failed |\n|---|---|---|---|---|---|")


def without_fallback(environ=None):
    """The capture this torch uses by default, named so that it cannot fall back; no PyTorch
    fallback (environ: a monkeypatch, or os.environ when run as a script)."""
    import os

    setenv = environ.setenv if environ is not None else os.environ.__setitem__
    setenv("ONNXTRAIN_CAPTURE", onnxtrain.capture.backend_name())
    setenv("ONNXTRAIN_FALLBACK", "0")


def print_table(names, case, label=str):
    """The parity table of these models (case(name) -> Case, label(name) its first cell); a model
    that does not train is a row with the first line of its error."""
    print(TABLE_HEADER)
    for name in names:
        try:
            row = table_row(label(name), compare_with_float64(case(name)))
        except Exception as e:  # noqa: BLE001 - the table reports every failure as its row
            reason = str(e).splitlines()[0][:300].replace("|", "/")
            row = f"| {label(name)} | not trained: {type(e).__name__}: {reason} | | | | |"
        print(row, flush=True)
