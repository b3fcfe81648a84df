"""onnxtrain.audit: which kernel, if any, computes badly.

One training step of a module runs through the engine (forward and backward). Every node of both
graphs is then recomputed alone in float64, on that node's own inputs as the engine computed them,
by the engine's float64 kernels (dgemm and the im2col convolution, not oneDNN), and its outputs are
measured against that twin. A node is judged on its own inputs, so a rounding decision upstream (a
max-pool window whose top two differ by 1e-7, a bias whose gradient is pure rounding noise) cannot
move its error. How each op family's error is scaled is in src/audit/audit_compare.h and the
README ("Numerics audit").

Under torch.autocast (call audit inside it) a node computes in bfloat16 or float16: each row also
gives its error in rounding steps of the type it computed in (2^-7 for bfloat16, 2^-10 for
float16, 2^-23 for float32), so 16-bit and float32 nodes are ranked on one scale; a correctly
rounded 16-bit kernel is within half a step.
"""
import contextlib
import dataclasses
import json
from typing import List, Optional, Tuple

import torch

from . import _C, _eager_warmup, _engine
from .ortmodule import ORTModule


@dataclasses.dataclass(frozen=True)
class AuditRow:
    """One node of the step. rel_error is None where the node has no float64 twin (see reason)."""
    node: str
    op_type: str
    graph: str  # "forward" or "backward"
    rel_error: Optional[float]
    reason: str  # why rel_error is None, or how the node was judged (random ops)
    worst_output: str
    normalization: str  # sum_of_terms, output_scale, exact or selected_value (README)
    output_shapes: Tuple[Tuple[int, ...], ...]
    domain: str = ""
    rounding_steps: Optional[float] = None  # rel_error in rounding steps of `computed_in`
    computed_in: str = ""  # "float32", "bfloat16", "float16" or "float64"; "" without a float output

    @property
    def _rank(self):
        return self.rounding_steps if self.rounding_steps is not None else self.rel_error


class AuditReport:
    """The audit of one training step: one row per node, in execution order."""

    def __init__(self, rows: List[AuditRow]):
        self.rows = rows

    @property
    def compared(self):
        return [r for r in self.rows if r.rel_error is not None]

    @property
    def not_compared(self):
        """Rows without a float64 twin, each with its reason."""
        return [r for r in self.rows if r.rel_error is None]

    def worst(self, n=10):
        """The n rows with the most rounding steps of their own type (rows without a twin excluded)."""
        return sorted(self.compared, key=lambda r: r._rank, reverse=True)[:n]

    @property
    def max_rel_error(self):
        """The largest rel_error of the step; None when no node could be compared."""
        errors = [r.rel_error for r in self.compared]
        return max(errors) if errors else None

    def max_rounding_steps(self, computed_in=None):
        """The most rounding steps of any compared node (of those computed in `computed_in`)."""
        steps = [r.rounding_steps for r in self.compared if r.rounding_steps is not None
                 and (computed_in is None or r.computed_in == computed_in)]
        return max(steps) if steps else None

    def to_dict(self):
        return {"max_rel_error": self.max_rel_error, "max_rounding_steps": self.max_rounding_steps(),
                "rows": [dataclasses.asdict(r) for r in self.rows]}

    def to_json(self, path):
        with open(path, "w") as f:
            json.dump(self.to_dict(), f, indent=1)

    def table(self, n=15):
        """The n worst nodes, then the nodes without a float64 twin, as text."""
        lines = [f"onnxtrain audit: {len(self.rows)} nodes, {len(self.compared)} compared with their float64 twin; "
                 f"max rel_error {_format_error(self.max_rel_error)}"]
        header = ("graph", "op_type", "node", "rel_error", "steps", "type", "normalization", "output")
        body = [(r.graph, r.op_type, r.node, _format_error(r.rel_error), _format_steps(r.rounding_steps),
                 r.computed_in, r.normalization, r.worst_output) for r in self.worst(n)]
        lines += _aligned([header] + body)
        if self.not_compared:
            lines.append(f"{len(self.not_compared)} nodes without a float64 twin:")
            lines += [f"  {r.graph} {r.op_type} {r.node}: {r.reason}" for r in self.not_compared]
        return "\n".join(lines)

    def __str__(self):
        return self.table()

    def __repr__(self):
        return f"<AuditReport: {len(self.rows)} nodes, max rel_error {_format_error(self.max_rel_error)}>"


def audit(module, *args, loss_fn=None, **kwargs) -> AuditReport:
    """Audits one training step of `module` on (*args, **kwargs) through the engine.

    `module` is an nn.Module (wrapped in an ORTModule here) or an ORTModule. `loss_fn` maps the
    module's output to a scalar loss (default: the sum of every floating-point tensor of the
    output). The module's parameters, buffers (BatchNorm statistics), .grad and torch's RNG are as
    they were afterwards: gradients come from torch.autograd.grad, never accumulated into .grad.
    """
    wrapper = module if isinstance(module, ORTModule) else ORTModule(module)
    inner = wrapper.module
    observer = _C.AuditObserver()
    with _state_kept(inner):
        _engine.set_audit_observer(observer)
        try:
            with _eager_warmup.captures_block():  # the audit judges the engine's run of this call
                output = wrapper(*args, **kwargs)
        finally:
            _engine.set_audit_observer(None)
        if wrapper.fallback_reason is not None:
            raise RuntimeError(f"onnxtrain.audit: {type(inner).__name__} runs in PyTorch, not in the engine, so "
                               f"there is nothing to audit: {wrapper.fallback_reason}")
        if not observer.rows():
            raise ValueError(f"onnxtrain.audit: the call of {type(inner).__name__} was not a training step (no "
                             "parameter or input requires grad, or grad mode is off)")
        loss = loss_fn(output) if loss_fn is not None else _sum_of(output)
        sources = [p for p in inner.parameters() if p.requires_grad]
        sources += [t for t in _tensors_in((args, kwargs)) if t.requires_grad]
        torch.autograd.grad(loss, sources, allow_unused=True)  # runs the engine's backward
    return AuditReport([_row(d) for d in observer.rows()])


def _row(d):
    return AuditRow(node=d["node"], op_type=d["op_type"], graph=d["graph"], rel_error=d["rel_error"],
                    reason=d["reason"], worst_output=d["worst_output"], normalization=d["normalization"],
                    output_shapes=tuple(tuple(s) for s in d["output_shapes"]), domain=d["domain"],
                    rounding_steps=d["rounding_steps"], computed_in=d["computed_in"])


@contextlib.contextmanager
def _state_kept(module):
    """Parameters, buffers, gradients and torch's RNG come back as they were; only what changed is
    written back, so untouched tensors keep their version counters."""
    rng = torch.get_rng_state()
    tensors = list(module.parameters()) + list(module.buffers())
    values = [t.detach().clone() for t in tensors]
    grads = [(p, p.grad, None if p.grad is None else p.grad.detach().clone()) for p in module.parameters()]
    try:
        yield
    finally:
        with torch.no_grad():
            for t, v in zip(tensors, values):
                if not torch.equal(t, v):
                    t.copy_(v)
            for p, grad, value in grads:
                if p.grad is not grad:
                    p.grad = grad
                if grad is not None and not torch.equal(grad, value):
                    grad.copy_(value)
        torch.set_rng_state(rng)


def _tensors_in(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _tensors_in(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _tensors_in(v)


def _sum_of(output):
    terms = [t.sum() for t in _tensors_in(output) if t.is_floating_point() and t.requires_grad]
    if not terms:
        raise ValueError("onnxtrain.audit: the module's output holds no tensor that requires grad; give loss_fn")
    return torch.stack(terms).sum()


def _format_error(e):
    return "none" if e is None else f"{e:.2e}"


def _format_steps(steps):
    return "-" if steps is None else f"{steps:.2g}"


def _aligned(rows):
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
