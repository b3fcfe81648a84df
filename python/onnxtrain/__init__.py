"""onnxtrain: train PyTorch models through a C++ engine. Wrap a module with ORTModule and keep
the rest of the training loop."""
from . import _C, _eager_warmup, optim, profiler
from .capture import ExportError, InputDtypeError
from ._options import DebugOptions, LogLevel
from .ortmodule import ORTModule
from .train_step import TrainStep
# After the submodule's import, so that onnxtrain.audit names the function, not the module.
from .audit import AuditReport, AuditRow, audit  # noqa: E402

EngineError = _C.EngineError
UnsupportedError = _C.UnsupportedError
set_num_threads = _C.set_num_threads


def statistics():
    """Process-wide counts of the eager warm-up (see ORTModule): `eager_warmup_calls` (calls that ran in
    eager PyTorch while their capture went on), `background_captures` (captures started beside eager
    calls) and `switches` (captures the engine took over from eager PyTorch)."""
    counts = dict.fromkeys(("eager_warmup_calls", "background_captures", "switches"), 0)
    counts.update(_eager_warmup.STATISTICS)
    return counts



get_num_threads = _C.get_num_threads

__all__ = ["ORTModule", "TrainStep", "DebugOptions", "LogLevel", "ExportError", "InputDtypeError", "EngineError", "UnsupportedError",
           "set_num_threads", "get_num_threads", "statistics", "audit", "AuditReport", "AuditRow"]
