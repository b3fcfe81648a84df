"""Per-kernel profiles as Chrome-trace JSON (open in chrome://tracing or https://ui.perfetto.dev).

    with onnxtrain.profiler.profile("trace.json"):
        train_a_few_steps()

ONNXTRAIN_PROFILE=<path> (or DebugOptions(profile_path=...)) profiles the whole process; the file is
written at exit. Each event is one kernel: its op type, node name, input shapes and duration, in
the categories forward, backward and inference."""
import atexit
import contextlib

from . import _C


def start(path):
    _C.profiler_start(str(path))


def stop():
    """Writes the trace; returns the number of kernel events."""
    return _C.profiler_stop()


@contextlib.contextmanager
def profile(path):
    start(path)
    try:
        yield
    finally:
        stop()


@atexit.register
def _flush_at_exit():
    if _C.profiler_enabled():
        stop()
