"""Graph capture: how a module called on its inputs becomes the ONNX graph the engine trains.

One interface, one module per backend. A backend is a module with
  NAME                  its name, as ONNXTRAIN_CAPTURE names it;
  unavailable_reason()  None, or why this torch cannot use it;
  export_once(module, tensors, input_schema, training) -> Exported
                        one trace of `module` on the flat inputs (see common.FlatModule).
What every backend shares (the Exported result, its errors, the driver that traces a cut-down batch
first in a forked child) is in common.py; the front end calls export() below, or BackgroundExport
where the module's calls go on during the export (the eager warm-up), and nothing else.

The torch.export backend (torch 2.6 and later, with onnxscript) is the default wherever torch has
it; elsewhere (torch 1.13 to 2.5) the TorchScript backend is. By default (ONNXTRAIN_CAPTURE unset or
auto), a module the torch.export backend cannot capture (a data-dependent branch, an op whose ONNX
differs from eager, an in-place custom Function) is exported by the TorchScript backend instead,
with a warning and a log line that name the reason. A backend that ONNXTRAIN_CAPTURE names never
falls back: ONNXTRAIN_CAPTURE=torch_export turns the fallback off.
"""
import collections
import logging
import os
import signal
import threading
import warnings

from . import common, torch_export, torchscript
from .common import TRACE_BATCH, BufferUpdates, Exported, ExportError, InputDtypeError, diagnose_input_dtypes

BACKENDS = {torchscript.NAME: torchscript, torch_export.NAME: torch_export}
# (module class, reason) of every export the torch.export capture handed to TorchScript in this
# process, most recent last (bounded): what the test suite's summary reports.
FALLBACKS = collections.deque(maxlen=10000)
TORCH_EXPORT_IS_DEFAULT = True  # where torch has it; TorchScript elsewhere
_EXPORTED_BEFORE = set()  # names of the backends this process has exported with
logger = logging.getLogger("onnxtrain")


def _chosen():
    """(backend, whether the user chose it): ONNXTRAIN_CAPTURE's, or the default."""
    name = os.environ.get("ONNXTRAIN_CAPTURE", "")
    if not name or name == "auto":
        if (TORCH_EXPORT_IS_DEFAULT or name == "auto") and torch_export.unavailable_reason() is None:
            return torch_export, False
        return torchscript, False
    chosen = BACKENDS.get(name)
    if chosen is None:
        raise ValueError(f"ONNXTRAIN_CAPTURE={name!r} names no capture backend; valid: auto, "
                         f"{', '.join(sorted(BACKENDS))}")
    why = chosen.unavailable_reason()
    if why is not None:
        raise ValueError(f"ONNXTRAIN_CAPTURE={name!r}: {why}")
    return chosen, True


def backend():
    """The backend ONNXTRAIN_CAPTURE names, or the default."""
    return _chosen()[0]


def backend_name():
    return backend().NAME


def _prepare_for(chosen):
    if hasattr(chosen, "prepare") and chosen.NAME in _EXPORTED_BEFORE:
        # From the second export on, in this process, so that each later forked export reuses it.
        # The first export's child prepares for itself: a module exported once (the common case)
        # never adds the exporter's tables (about 1 s and 40 MB on torch 2.x) to this process.
        chosen.prepare()
    _EXPORTED_BEFORE.add(chosen.NAME)


def _announce_fallback(module, reason):
    message = (f"onnxtrain: the torch.export capture cannot export {type(module).__name__}, so the TorchScript "
               f"exporter (deprecated in torch 2.x) exports it instead: {reason}")
    warnings.warn(message, RuntimeWarning, stacklevel=5)
    logger.warning(message)
    FALLBACKS.append((type(module).__name__, reason))


def _falls_back(backend, explicit):
    """Whether a failed export by `backend` is tried again by TorchScript."""
    return not explicit and backend is not torchscript


def _failed_twice(error, first_failure):
    return ExportError(f"{error} (the torch.export capture had failed first: {first_failure})")


def export(module, tensors, input_schema, training, full_trace=False):
    """Exports `module` called on the inputs (tensors, input_schema) with the chosen backend."""
    chosen, explicit = _chosen()
    _prepare_for(chosen)
    try:
        return common.export(chosen.export_once, module, tensors, input_schema, training, full_trace)
    except ExportError as e:
        if not _falls_back(chosen, explicit):
            raise
        reason = str(e)
    _announce_fallback(module, reason)
    try:
        exported = common.export(torchscript.export_once, module, tensors, input_schema, training, full_trace)
    except ExportError as e:
        raise _failed_twice(e, reason) from None
    exported.capture_fallback = reason
    return exported


class BackgroundExport:
    """export() for a caller that goes on running the module meanwhile (the eager warm-up).

    Each attempt, the chosen backend's and then TorchScript's where export() would fall back to it,
    runs in a child that poll() forks: the caller calls poll() between the module's calls, where the
    child's copy of the module is one the caller's code would see. A thread reads each child's
    answer. Once poll() returns True, exactly one of `exported`, `error` (an ExportError) or
    `in_process` (the child could not export: the caller exports itself, as export() would) is set.
    """

    def __init__(self, module, tensors, input_schema, training):
        self._module = module
        self._args = (module, tensors, input_schema, training)
        self._chosen, self._explicit = _chosen()
        self._first_failure = None
        self.exported = self.error = None
        self.in_process = False
        self._start(self._chosen)

    def _start(self, backend):
        _prepare_for(backend)
        self._backend = backend
        pending = common.start_export_in_child(backend.export_once, *self._args)
        self._answer = None
        if pending is None:
            self._thread = None
            self.in_process = True
            return

        self._pid = pending.pid

        def read_answer():
            try:
                self._answer = ("ok", pending.wait())
            except ExportError as e:
                self._answer = ("error", e)

        self._thread = threading.Thread(target=read_answer, name="onnxtrain-export", daemon=True)
        self._thread.start()

    def poll(self):
        """True once the export has finished (see the class); never blocks."""
        if self._thread is None:
            return True
        if self._thread.is_alive():
            return False
        self._thread = None
        kind, value = self._answer
        if kind == "ok":
            if value is None:
                self.in_process = True
            else:
                if self._first_failure is not None:
                    value.capture_fallback = self._first_failure
                self.exported = value
            return True
        if self._first_failure is not None:
            self.error = _failed_twice(value, self._first_failure)
            return True
        if not _falls_back(self._backend, self._explicit):
            self.error = value
            return True
        self._first_failure = str(value)
        _announce_fallback(self._module, self._first_failure)
        self._start(torchscript)
        return self._thread is None

    def wait(self):
        """Blocks until poll() would return True."""
        while not self.poll():
            self._thread.join()

    def cancel(self):
        """Stops the export in progress, if any (its child is killed): nobody will take its result."""
        if self._thread is not None and self._thread.is_alive():
            try:
                os.kill(self._pid, signal.SIGKILL)
            except OSError:
                pass
            self._thread.join()
        self._thread = None
        self.in_process = True  # nothing to take


__all__ = ["TRACE_BATCH", "BackgroundExport", "BufferUpdates", "ExportError", "Exported", "InputDtypeError", "backend", "backend_name",
           "diagnose_input_dtypes", "export"]
