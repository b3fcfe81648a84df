"""The bridge between torch tensors and the C++ sessions of one exported graph."""
import os
import threading
import time

import torch

from . import _C, _options, _python_op
from ._logging import logger



# torch's own converters: torch.utils.dlpack's wrappers add a Python call each, and a capsule
# records no autograd history, so no detach() is needed (per step and tensor, about 1 us saved).
_to_dlpack = torch._C._to_dlpack
_from_dlpack = torch._C._from_dlpack


def to_capsules(tensors):
    # torch 1.13's DLPack cannot carry bool: it travels as uint8 and the engine reads it as bool.
    return [_to_dlpack(t) if t.dtype != torch.bool else _to_dlpack(t.detach().view(torch.uint8)) for t in tensors]


def from_capsules(capsules, bool_positions):
    out = [None if c is None else _from_dlpack(c) for c in capsules]
    for i in bool_positions:  # torch 1.13's DLPack has no bool: it arrives as uint8
        out[i] = out[i].view(torch.bool)
    return out


# The AuditObserver of an onnxtrain.audit call in progress on this thread (None: no audit): the
# training forward hands it to the engine, which then judges every node of that call.
_audit = threading.local()


def set_audit_observer(observer):
    _audit.observer = observer


def draw_seed():
    """A seed from torch's default generator, so torch.manual_seed makes runs repeatable."""
    return int(torch.randint(0, 2**62, (1,)).item())


class TrainingRun:
    """A TrainingSession for one requires_grad pattern, and the maps between its lists and the
    graph's input and output positions."""

    def __init__(self, graphs, requires_grad):
        self.graphs = graphs
        names = graphs.input_names
        wrt = [n for n, r in zip(names, requires_grad) if r]
        start = time.perf_counter()
        user_outputs = graphs.output_names[:graphs.exported.num_user_outputs]
        self.session = _C.TrainingSession(graphs.exported.model_bytes, wrt, user_outputs, graphs.check_finite,
                                          graphs.opt_level, graphs.memory_optimization)
        self.build_seconds = time.perf_counter() - start
        self.wrt_positions = [names.index(n) for n in self.session.wrt]
        outputs = self.session.forward_outputs
        self.differentiable_positions = list(self.session.differentiable_output_positions)
        self.non_differentiable_positions = [
            i for i in range(len(outputs)) if i not in set(self.differentiable_positions)]
        stashed_outputs = {name for name, kind in self.session.stashed if kind == "forward_output"}
        self.stashed_output_positions = [i for i, n in enumerate(outputs) if n in stashed_outputs]
        # Inputs and parameters the backward reads in place: saving them lets autograd raise, as
        # eager does, when one is modified in place between forward and backward.
        stashed_inputs = {name for name, kind in self.session.stashed if kind == "input"}
        self.stashed_input_positions = [i for i, n in enumerate(names) if n in stashed_inputs]
        # Per gradient: the differentiable outputs (positions among forward outputs) it depends
        # on. When none of them receives a gradient, the gradient is None, as in eager.
        self.wrt_output_positions = [[self.differentiable_positions[k] for k in deps]
                                     for deps in self.session.wrt_output_dependencies]
        self.first_run = True

    def forward(self, tensors):
        seed = draw_seed() if self.graphs.has_randomness else 0
        start = time.perf_counter()
        observer = getattr(_audit, "observer", None)
        capsules, bools, call = self.session.forward(to_capsules(tensors), seed, observer)
        outputs = from_capsules(capsules, bools)
        if self.first_run:
            self.first_run = False
            logger.info("onnxtrain: first training forward of %s took %.1f ms; %d bytes saved for backward "
                        "(%d with shared inputs; %d more recomputed in backward instead): %s", self.graphs.name,
                        1e3 * (time.perf_counter() - start), call.stashed_bytes(), call.stashed_bytes(True),
                        call.recomputed_bytes(),
                        ", ".join(f"{e['name']} {e['kind']} {e['bytes']}B" for e in call.stash_report()))
        return outputs, call

    def backward(self, call, output_grads):
        capsules = []
        for pos in self.differentiable_positions:
            g = output_grads[pos]
            capsules.append(None if g is None else _to_dlpack(g.contiguous()))
        grads, bools = self.session.backward(call, capsules)
        grads = from_capsules(grads, bools)
        return [None if all(output_grads[p] is None for p in deps) else g
                for g, deps in zip(grads, self.wrt_output_positions)]


class Graphs:
    """Everything built from one export: the training runs per requires_grad pattern, and the
    forward-only session for no_grad calls."""

    def __init__(self, exported, name, training, debug_options, export_seconds):
        self.exported = exported
        self.name = name
        self.training = training
        self.check_finite = debug_options.check_finite
        level = debug_options.optimization_level
        self.opt_level = -1 if level is None else level
        self.memory_optimization = _options.memory_optimization(debug_options)
        self.debug_options = debug_options
        self.input_names = exported.input_names
        self.output_names = exported.output_names
        self.has_randomness = exported.has_randomness
        self._runs = {}
        self._inference = None
        self._buffer_owners = None  # (module, [(owner, buffer name, output index)], [BatchNorm modules])
        # The custom autograd.Functions of the graph's PythonOp nodes run while these graphs live.
        _python_op.register(exported.python_functions, self)
        self.proven = False  # ran once at full size: a failure now is the caller's, not the trace's
        mode = "train" if training else "eval"
        phases = getattr(exported, "phase_seconds", {})  # none for an export read from the cache
        logger.info("onnxtrain: exported %s in %s mode in %.1f ms%s", name, mode, 1e3 * export_seconds,
                    " (in the exporter: " + ", ".join(f"{k} {1e3 * v:.1f} ms" for k, v in phases.items()) + ")"
                    if phases else "")
        if debug_options.save_onnx:
            with open(self._file_prefix() + "exported.onnx", "wb") as f:
                f.write(exported.model_bytes)

    def _file_prefix(self):
        mode = "train" if self.training else "eval"
        return os.path.join(self.debug_options.save_path or ".", f"{self.debug_options.onnx_prefix}_{mode}_")

    def training_run(self, requires_grad):
        run = self._runs.get(requires_grad)
        if run is None:
            run = TrainingRun(self, requires_grad)
            self._runs[requires_grad] = run
            logger.info("onnxtrain: built the training graph of %s in %.1f ms (%d stashed values)", self.name,
                        1e3 * run.build_seconds, len(run.session.stashed))
            if self.debug_options.save_onnx:
                run.session.save_graphs(self._file_prefix())
        return run

    def apply_buffer_updates(self, module, outputs):
        """Copies new buffer values (BatchNorm running statistics) into the module, as PyTorch's
        training-mode forward does, and returns the module's own outputs."""
        exported = self.exported
        if exported.buffer_updates:
            if self._buffer_owners is None or self._buffer_owners[0] is not module:
                updates = exported.buffer_updates
                # Owners resolved once; the tensors are looked up on every call, since a buffer may
                # be reassigned between steps.
                copies = []
                for index, path in updates.outputs:
                    owner_path, _, name = path.rpartition(".")
                    copies.append((module.get_submodule(owner_path), name, index))
                self._buffer_owners = (module, copies, [module.get_submodule(p) for p in updates.batchnorm_paths])
            _, copies, batchnorms = self._buffer_owners
            with torch.no_grad():
                for owner, attr, index in copies:
                    buffer = owner._buffers.get(attr)
                    if buffer is None:
                        raise RuntimeError(f"onnxtrain: buffer {attr!r} the graph updates disappeared from the module")
                    buffer.copy_(outputs[index])
                for bn in batchnorms:
                    tracked = bn._buffers.get("num_batches_tracked")
                    if tracked is not None:
                        tracked.add_(1)
        return outputs[:exported.num_user_outputs]

    def infer(self, tensors):
        if self._inference is None:
            start = time.perf_counter()
            self._inference = _C.InferenceSession(self.exported.model_bytes, self.check_finite, self.opt_level)
            logger.info("onnxtrain: built the forward-only graph of %s in %.1f ms", self.name,
                        1e3 * (time.perf_counter() - start))
        seed = draw_seed() if self.has_randomness else 0
        capsules, bools = self._inference.run(to_capsules(tensors), seed)
        return from_capsules(capsules, bools)
