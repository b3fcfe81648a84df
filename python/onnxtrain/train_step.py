"""onnxtrain.TrainStep: a whole training step (forward, backward and the optimizer's update) in
one call into the engine.

On a small model most of a step is the fixed cost around the kernels: PyTorch's autograd node,
its backward engine, the gradients' accumulation and the optimizer's Python loop. This path skips
all of them, and leaves the parameters, param.grad, buffers and optimizer state as the four lines
of a plain step would.
"""
import weakref

import torch

from . import _C, _engine, _io
from . import optim as _optim
from ._logging import logger
from .ortmodule import ORTModule


def _fusable(p):
    return p.dtype == torch.float32 and p.device.type == "cpu" and p.is_contiguous() and not p.is_sparse


from torch.nn.modules import module as _nn_module  # noqa: E402 - its global hooks
from torch.optim import optimizer as _optimizer_module  # noqa: E402 - torch 2.x keeps global step hooks here


def _has_optimizer_hooks(optimizer):
    return bool(getattr(optimizer, "_optimizer_step_pre_hooks", None)
                or getattr(optimizer, "_optimizer_step_post_hooks", None)
                or getattr(_optimizer_module, "_global_optimizer_pre_hooks", None)
                or getattr(_optimizer_module, "_global_optimizer_post_hooks", None))


def _has_module_hooks(module):
    return bool(module._forward_hooks or module._forward_pre_hooks or module._backward_hooks
                or getattr(module, "_backward_pre_hooks", None))


def _has_global_module_hooks():
    return bool(_nn_module._global_forward_hooks or _nn_module._global_forward_pre_hooks
                or _nn_module._global_backward_hooks or getattr(_nn_module, "_global_backward_pre_hooks", None))


def _has_tensor_hooks(t):
    return bool(t._backward_hooks or getattr(t, "_post_accumulate_grad_hooks", None))


class _LossPlan:
    """What one training run's whole step needs that does not change between steps."""

    def __init__(self, run, loss):
        self.loss_grads = [torch.ones_like(loss, memory_format=torch.contiguous_format) if pos == 0 else None
                           for pos in run.differentiable_positions]
        has_grad = run.session.wrt_has_grad
        # The wrt gradients the loss reaches; the others stay None, as after loss.backward().
        self.reached = [k for k, deps in enumerate(run.wrt_output_positions) if 0 in deps and has_grad[k]]

    def capsules(self):
        return [None if g is None else _engine._to_dlpack(g) for g in self.loss_grads]  # a capsule is read once


class TrainStep:
    """`loss = step(*args, **kwargs)` does what

        optimizer.zero_grad(set_to_none=True)
        loss = model(*args, **kwargs)
        loss.backward()
        optimizer.step()

    does, and returns the loss (detached): afterwards the parameters, param.grad, buffers
    (BatchNorm statistics) and the optimizer's state are as those lines leave them. Forward,
    backward and the optimizer's update run as one call into the engine.

    `model` is an ORTModule whose forward returns the loss (a one-element tensor); `optimizer` is
    onnxtrain.optim's SGD, Adam or AdamW. Learning-rate schedulers and changes to param_groups take
    effect at the next step, as usual.

    A step that the one call cannot reproduce exactly runs as the four lines instead, through the
    same engine (logged once per reason): the first step of each export (it proves the graph and
    learns the loss's shape); module, tensor or optimizer hooks; an input that carries
    autograd history from outside the model; a parameter the fused update does not take (not a
    dense float32 CPU tensor); and a call the model has not run before with these sizes.
    """

    def __init__(self, model, optimizer):
        if not isinstance(model, ORTModule):
            raise TypeError(f"TrainStep(model, optimizer) takes an onnxtrain.ORTModule, got {type(model).__name__}")
        if not isinstance(optimizer, _optim._Fused):
            raise TypeError("TrainStep runs the optimizer's update in the engine, which needs onnxtrain.optim's SGD, "
                            f"Adam or AdamW; got {type(optimizer).__module__}.{type(optimizer).__name__}")
        self.model = model
        self.optimizer = optimizer
        self._plans = weakref.WeakKeyDictionary()  # TrainingRun -> _LossPlan; dies with the run
        self._told = set()
        self.whole_steps = 0  # steps served by one engine call: tests use it to prove the path ran

    def __call__(self, *args, **kwargs):
        why = self._why_not_whole()
        ready = None if why else self.model._calls.ready_graphs(args, kwargs)
        if ready is None:
            return self._four_lines(args, kwargs, why or "the first step of this export, or of these sizes")
        graphs, params, tensors = ready
        feeds = self.model._calls.feeds(graphs, params, tensors)
        if any(t.grad_fn is not None for t in feeds):
            return self._four_lines(args, kwargs, "an input carries autograd history from outside the model")
        run = graphs.training_run(tuple(t.requires_grad and t.is_floating_point() for t in feeds))
        plan = self._plans.get(run)
        if plan is None:
            return self._four_lines(args, kwargs, "the first step of this export, or of these sizes")
        updates = self._updates(run, plan, feeds)
        if isinstance(updates, str):
            return self._four_lines(args, kwargs, updates)
        updates, undos, updated = updates
        for group in self.optimizer.param_groups:  # zero_grad(set_to_none=True); the updated get theirs below
            for p in group["params"]:
                p.grad = None
        seed = _engine.draw_seed() if graphs.has_randomness else 0
        try:
            capsules, bools, grad_capsules = run.session.train_step(_engine.to_capsules(feeds), seed, plan.capsules(),
                                                                    updates)
        except BaseException as e:
            for undo in undos:
                undo()
            if isinstance(e, _C.EngineError) and not isinstance(e, _C.UnsupportedError):
                # A size this export may not hold: ORTModule's own call knows how to retry it.
                return self._four_lines(args, kwargs, f"the engine refused the whole step ({e})")
            raise
        self._set_grads(run, plan, feeds, _engine.from_capsules(grad_capsules, []), updated)
        if hasattr(self.optimizer, "_step_count"):  # what torch.optim's step counts for LR schedulers
            self.optimizer._step_count += 1
        self.model._calls.engine_runs += 1
        self.whole_steps += 1
        outputs = graphs.apply_buffer_updates(self.model._original_module, _engine.from_capsules(capsules, bools))
        return _io.unflatten_outputs(graphs.exported.output_schema, list(outputs), (args, kwargs))

    def _why_not_whole(self):
        model = self.model
        if model.fallback_reason is not None:
            return "the model runs in PyTorch"
        if not torch.is_grad_enabled():
            return "gradients are disabled"
        if _has_global_module_hooks() or _has_module_hooks(model) or _has_module_hooks(model._original_module):
            return "the model has hooks"
        if _has_optimizer_hooks(self.optimizer):
            return "the optimizer has step hooks"
        if getattr(_engine._audit, "observer", None) is not None:
            return "an onnxtrain.audit is in progress"
        return None

    def _updates(self, run, plan, feeds):
        """The engine-side updates of every param_group, or why there can be none."""
        wrt = [feeds[pos] for pos in run.wrt_positions]
        index_of = {id(wrt[k]): k for k in plan.reached}
        if any(_has_tensor_hooks(t) for t in wrt):
            return "a parameter has a gradient hook"
        chosen = []
        for group in self.optimizer.param_groups:
            params = [p for p in group["params"] if id(p) in index_of]
            if not all(_fusable(p) for p in params):
                return "a parameter is not a dense float32 CPU tensor"
            chosen.append((group, params))
        updates, undos, updated = [], [], set()
        for group, params in chosen:
            if params:
                update, undo = self.optimizer._update_for(group, params, [index_of[id(p)] for p in params])
                updates.append(update)
                undos.append(undo)
                updated.update(id(p) for p in params)
        return updates, undos, updated

    @staticmethod
    @torch.no_grad()
    def _set_grads(run, plan, feeds, grads, updated):
        for k in plan.reached:
            t, g = feeds[run.wrt_positions[k]], grads[k]
            if id(t) in updated or t.grad is None:
                t.grad = g
            else:  # a leaf outside the optimizer accumulates its gradient, as backward does
                t.grad += g

    def _four_lines(self, args, kwargs, why):
        if why not in self._told:
            self._told.add(why)
            logger.info("onnxtrain.TrainStep: a step runs as zero_grad, forward, backward and step (%s)", why)
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.model(*args, **kwargs)
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            raise TypeError("TrainStep needs the model's forward to return the loss, a one-element tensor; "
                            f"{type(self.model.module).__name__} returned "
                            + (f"a tensor of shape {tuple(loss.shape)}" if isinstance(loss, torch.Tensor)
                               else f"a {type(loss).__name__}"))
        loss.backward()
        self.optimizer.step()
        self._learn(args, kwargs, loss)
        return loss.detach()

    def _learn(self, args, kwargs, loss):
        """After a step of the four lines: what the next one needs to run whole."""
        if self._why_not_whole() is not None or loss.grad_fn is None:
            return
        ready = self.model._calls.ready_graphs(args, kwargs)
        if ready is None:
            return
        graphs, params, tensors = ready
        if graphs.exported.output_schema != ("T", 0):
            return
        feeds = self.model._calls.feeds(graphs, params, tensors)
        run = graphs._runs.get(tuple(t.requires_grad and t.is_floating_point() for t in feeds))
        if run is not None and 0 in run.differentiable_positions:
            self._plans[run] = _LossPlan(run, loss.detach())
