"""What this capture does not record, refused while torch.export traces so that the front end's
fallback (the TorchScript capture) exports the module instead, saying why.

- A custom torch.autograd.Function: torch.export would trace its forward inline, and the engine
  would differentiate that instead of running the user's backward, a silently different gradient.
  The TorchScript capture records it as a PythonOp node that calls the user's backward.
- torch.utils.checkpoint: torch.export traces the segment inline, so the engine would keep its
  activations instead of recomputing them; the TorchScript capture marks the segment.
"""
import contextlib

import torch

from ..._python_op import qualified_name
from ..torchscript.checkpoint import replaced_checkpoint


class NotCapturable(RuntimeError):
    """A construct the torch.export capture cannot record as eager runs it."""


def _is_torch_own(cls):
    return (cls.__module__ or "").startswith("torch.")


@contextlib.contextmanager
def refused_constructs():
    base = torch.autograd.Function
    had_own = "apply" in base.__dict__
    original = base.__dict__["apply"] if had_own else torch._C._FunctionBase.__dict__["apply"]

    def apply(cls, *args, **kwargs):
        if not _is_torch_own(cls):
            raise NotCapturable(f"the custom autograd.Function {qualified_name(cls)} would be traced inline, "
                                "ignoring its backward")
        return original.__get__(None, cls)(*args, **kwargs)

    def checkpoint(untouched, function, *args, **kwargs):
        raise NotCapturable(f"torch.utils.checkpoint of {getattr(function, '__qualname__', function)!s} would be "
                            "traced inline, without recomputation")

    base.apply = classmethod(apply)
    try:
        with replaced_checkpoint(checkpoint):
            yield
    finally:
        if had_own:
            base.apply = original
        else:
            del base.apply
