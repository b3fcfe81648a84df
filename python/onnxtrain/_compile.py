"""torch.compile beside ORTModule, either way round.

- torch.compile(ORTModule(m)): the engine runs the whole module. Dynamo cannot trace into it (an
  export, a C++ engine, an autograd.Function over it), so ORTModule's forward is opaque to
  torch.compile (torch.compiler.disable): the compiled wrapper calls it as it is, at parity with
  ORTModule alone, and torch.compile compiles nothing of it.
- ORTModule(torch.compile(m)): ORTModule captures and trains the module's own code; torch.compile's
  wrapper (OptimizedModule) is set aside, with a warning that says so, since its compiled kernels
  would never run: the engine runs the graph instead.
"""
import warnings

import torch


def opaque_to_torch_compile(function):
    """`function`, marked so that torch.compile calls it without tracing into it (torch 2.x)."""
    disable = getattr(getattr(torch, "compiler", None), "disable", None)
    return disable(function) if disable is not None else function


def compiled_module_type():
    """torch.compile's module wrapper class, or None on a torch without it."""
    try:
        from torch._dynamo.eval_frame import OptimizedModule
    except ImportError:
        return None
    return OptimizedModule


def unwrap_compiled(module):
    """The module torch.compile wrapped, with a warning; any other module as it is."""
    optimized = compiled_module_type()
    if optimized is None or not isinstance(module, optimized):
        return module
    inner = module._orig_mod
    warnings.warn(
        f"onnxtrain: ORTModule was given torch.compile({type(inner).__name__}); it trains {type(inner).__name__} "
        "itself with onnxtrain's engine, so torch.compile's compiled code does not run. Its parameters are "
        "the same tensors; state_dict keys are the module's own, without torch.compile's '_orig_mod.' prefix. "
        "To compile around onnxtrain, write torch.compile(ORTModule(module)).", UserWarning, stacklevel=3)
    return inner
