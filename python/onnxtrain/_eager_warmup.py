"""The eager warm-up: a call structure's first calls run in eager PyTorch while its capture goes on
beside them, and the module switches to the engine at the first call after its graphs are ready.

A capture blocks the user's loop for seconds (the export, the gradient graph, the plan), while
eager PyTorch would have run those first steps already. So on a call the engine has no graphs
for, ORTModule forks the export (as it always does) without waiting for it, and runs the call
eagerly; a thread reads the child's answer and builds the engine's graphs (the C++ build releases
the GIL). Every later call of that structure asks whether they are ready; the first that finds
them runs on the engine. Both paths read and write the same parameters, buffers and .grad, so the
optimizer state and BatchNorm statistics carry over exactly; only the rounding differs, as between
any two kernels.

The switch happens at a call boundary, the only place where the module is not in the middle of a
forward. Under torch.distributed, every rank switches at the same call: the ranks agree with one
all_reduce per warm-up call. A capture that failed raises at the switch, exactly as a blocking one
would have (or falls back to PyTorch, loudly, where the fallback policy allows).

ONNXTRAIN_EAGER_WARMUP=0 or DebugOptions(eager_warmup=False) turns it off: every capture blocks
the call that needs it, as before. onnxtrain.audit always captures blocking (it audits the
engine's run of that very call).
"""
import atexit
import collections
import contextlib
import ctypes
import os
import threading
import time
import weakref

import torch

from ._logging import logger

# Process-wide counters (onnxtrain.statistics()): calls that ran eagerly while their capture went on,
# switches to the engine, and captures that ran beside eager calls.
STATISTICS = collections.Counter()

EAGER = object()  # before_call's answer: run this call in eager PyTorch

_blocking = threading.local()
_UNFINISHED = weakref.WeakSet()  # jobs whose child or thread may still run


def enabled(option):
    """Whether the warm-up is on: DebugOptions.eager_warmup, else ONNXTRAIN_EAGER_WARMUP (default on)."""
    if option is not None:
        return option
    value = os.environ.get("ONNXTRAIN_EAGER_WARMUP", "1").strip().lower()
    if value in ("0", "false", "no", "off"):
        return False
    if value in ("", "1", "true", "yes", "on"):
        return True
    raise ValueError(f"ONNXTRAIN_EAGER_WARMUP takes 1 or 0, got {value!r}")


@contextlib.contextmanager
def captures_block():
    """Inside, a call that needs a capture waits for it (a pending one, or a new blocking one)."""
    previous = getattr(_blocking, "on", False)
    _blocking.on = True
    try:
        yield
    finally:
        _blocking.on = previous


class WarmupJob:
    """One call structure's capture in the background: the export (a capture.BackgroundExport, or
    None when the export cache had it) and then the engine's graphs, built on a thread by
    `build(exported, export_seconds) -> (graphs, params)`."""

    def __init__(self, key, export, build, cached=None):
        self.key = key
        self.state = None  # the module's ModuleState, taken after the eager call that started the job
        self.started = time.perf_counter()
        self.export_seconds = 0.0
        self._export = export
        self._build = build
        self.exported = cached
        self.from_cache = cached is not None
        self.error = None
        self.in_process = False  # the child could not export: the switch exports in this process
        self.built = None  # (graphs, params), when the thread built them
        self._thread = None
        _UNFINISHED.add(self)
        if cached is not None:
            self._start_build()

    def _start_build(self):
        # Neither this thread nor the export's child runs at a lower priority: with every core busy
        # with the eager steps (2 threads on 2 cores), a niced capture starved, and resnet50 was
        # still on eager PyTorch at its 20th step, slower than eager alone (34.8 s against 26.6).
        def build():
            try:
                self.built = self._build(self.exported, self.export_seconds)
            except Exception as e:  # noqa: BLE001 - the switch builds again and raises it there
                logger.debug("onnxtrain: building the graphs beside the eager calls failed (%s); the switch "
                             "builds them again", e)

        self._thread = threading.Thread(target=build, name="onnxtrain-build", daemon=True)
        self._thread.start()

    def _export_pending(self):
        return self._export is not None and self.exported is None and self.error is None and not self.in_process

    def poll(self):
        """True once the switch can take the job (graphs ready, or an outcome to report); never blocks."""
        if self._export_pending():
            if not self._export.poll():
                return False
            self.export_seconds = time.perf_counter() - self.started
            self.exported, self.error, self.in_process = self._export.exported, self._export.error, \
                self._export.in_process
            if self.exported is not None:
                self._start_build()
        return self._thread is None or not self._thread.is_alive()

    def wait(self):
        while self._export_pending():
            self._export.wait()
            self.poll()
        if self._thread is not None:
            self._thread.join()

    def cancel(self, join=False):
        """Stops the export (its child is killed); with `join`, also waits for the build thread,
        which cannot be stopped inside the engine."""
        if self._export_pending():
            self._export.cancel()
            self.in_process = True
        if join and self._thread is not None:
            self._thread.join()


@atexit.register
def _finish_unfinished_jobs():
    # No export child may outlive the process, and no build thread may be inside the engine while
    # the interpreter shuts down.
    for job in list(_UNFINISHED):
        job.cancel(join=True)


def return_freed_memory():
    """Hands the memory the eager calls freed back to the system (glibc's malloc_trim). glibc keeps
    freed blocks of the sizes it has seen freed in its heap, so without this the eager steps' peak
    would stay resident beside the engine's own memory, which comes from mappings of its own."""
    try:
        libc = ctypes.CDLL(None)
        trim = libc.malloc_trim
    except (OSError, AttributeError):  # not glibc
        return
    trim.argtypes = [ctypes.c_size_t]
    trim(0)


def _all_ranks_ready(ready):
    """Under torch.distributed, whether every rank's capture is ready (one all_reduce)."""
    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return ready
    flag = torch.tensor([1 if ready else 0], dtype=torch.int32)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    return bool(flag.item())


class _CoreForTheCapture:
    """While a capture runs beside eager calls whose threads fill every core, the eager calls run
    with one thread fewer: OpenMP's threads wait for each other at every barrier, and one that
    shares its core with the capture holds them all up (resnet50 at 2 threads on 2 cores: the
    first step took 5.4 s against eager's 1.7). torch's setting comes back afterwards, unless the
    user changed it meanwhile."""

    def __init__(self):
        self.lent = None  # (the user's thread count, the one during the capture)

    def take(self):
        threads = torch.get_num_threads()
        try:
            cores = len(os.sched_getaffinity(0))
        except AttributeError:
            cores = os.cpu_count() or 1
        if self.lent is None and threads > 1 and threads >= cores:
            self.lent = (threads, threads - 1)
            torch.set_num_threads(threads - 1)
            logger.info("onnxtrain: the eager calls run on %d of torch's %d threads while the capture takes a core",
                        threads - 1, threads)

    def give_back(self):
        if self.lent is not None:
            threads, during = self.lent
            self.lent = None
            if torch.get_num_threads() == during:
                torch.set_num_threads(threads)


class EagerWarmup:
    """An ORTModule's capture in progress: at most one at a time, for one call structure."""

    def __init__(self):
        self.job = None
        self.finished = []  # jobs of another call structure that finished, for the owner to keep
        self._core = _CoreForTheCapture()

    def before_call(self, key, has_graphs, start_job):
        """For a call whose graphs key is `key`: None (the engine runs it: its graphs exist, or a
        blocking capture makes them), EAGER (it runs eagerly while its capture goes on), or the
        finished WarmupJob of this call (the switch)."""
        if has_graphs:
            return None
        job = self.job
        if getattr(_blocking, "on", False):
            if job is not None and job.key == key:
                self.job = None
                self._core.give_back()
                job.wait()
                return job
            return None
        if job is not None and job.key != key:
            if not job.poll():
                return EAGER  # one capture at a time: this structure's starts when that one is done
            self.finished.append(job)
            self.job = job = None
            self._core.give_back()
        if job is None:
            self.job = start_job()
            if self.job is None:  # it cannot run beside the calls (no fork): a blocking capture
                return None
            STATISTICS["background_captures"] += 1
            self._core.take()
            return EAGER
        if not _all_ranks_ready(job.poll()):
            return EAGER
        self.job = None
        self._core.give_back()
        STATISTICS["switches"] += 1
        return job

    def forget(self):
        """Drops the capture in progress (the module changed, so its export is stale)."""
        if self.job is not None:
            self.job.cancel()
        self.job = None
        self.finished.clear()
        self._core.give_back()
