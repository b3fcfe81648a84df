"""Fused optimizers: drop-in replacements for torch.optim.SGD, Adam and AdamW.

They take the same arguments and keep the same param_groups and state (state_dict loads into
either), but run the whole update of every parameter as one multi-threaded C++ pass instead
of several PyTorch ops per parameter. The arithmetic follows torch.optim (1.13) operation by
operation. Parameters that are not dense float32 CPU tensors are updated by torch.optim's own
code (logged once)."""
import torch

from . import _C
from ._logging import logger


def _fusable(p):
    g = p.grad
    return (p.dtype == torch.float32 and p.device.type == "cpu" and p.is_contiguous() and not g.is_sparse
            and g.dtype == torch.float32 and g.is_contiguous() and g.shape == p.shape)


class _Fused:
    """Splits a group's parameters into those the fused kernel takes and the rest, and runs the
    kernel on the first. Each optimizer says how to prepare its state (`_prepare`), and names its
    C++ step (`_kernel`, gradients from param.grad) and update (`_update`, gradients from a whole
    step in the engine: onnxtrain.TrainStep)."""

    _warned = False
    _base = None

    def _split(self, group):
        fused, other = [], []
        for p in group["params"]:
            if p.grad is None:
                continue
            (fused if _fusable(p) else other).append(p)
        if other and not _Fused._warned:
            _Fused._warned = True
            logger.warning("onnxtrain.optim: %d parameters are not dense contiguous float32 CPU tensors; "
                           "torch.optim updates those", len(other))
        return fused, other

    def _torch_step(self, base, group, params):
        """torch.optim's own update for `params` of `group` only."""
        saved_groups, saved_params = self.param_groups, group["params"]
        self.param_groups, group["params"] = [group], params
        try:
            base.step(self)
        finally:
            self.param_groups, group["params"] = saved_groups, saved_params

    @torch.no_grad()
    def step(self, closure=None):
        loss = _closure_loss(closure)
        for group in self.param_groups:
            params, other = self._split(group)
            if other:
                self._torch_step(self._base, group, other)
            if params:
                state_args, _ = self._prepare(group, params)
                self._kernel([p.data_ptr() for p in params], [p.grad.data_ptr() for p in params],
                             [p.numel() for p in params], *state_args)
        return loss

    def _update_for(self, group, params, grad_index):
        """The engine-side update of `params` (dense float32, see `_fusable`), whose gradients will
        be the whole step's wrt gradients at `grad_index`; and a function that takes back the
        state this created or advanced, for a step that fails before the update runs."""
        state_args, undo = self._prepare(group, params)
        return self._update([p.data_ptr() for p in params], grad_index, [p.numel() for p in params],
                            *state_args), undo


def _closure_loss(closure):
    if closure is None:
        return None
    with torch.enable_grad():
        return closure()


class SGD(_Fused, torch.optim.SGD):
    __doc__ = "Fused torch.optim.SGD (momentum, dampening, nesterov, weight decay, maximize).\n\n" + \
        (torch.optim.SGD.__doc__ or "")

    _base = torch.optim.SGD
    _kernel = staticmethod(_C.sgd_step)
    _update = staticmethod(_C.sgd_update)

    def _prepare(self, group, params):
        momentum = group["momentum"]
        bufs, first, created = [], [], []
        if momentum != 0:
            for p in params:
                state = self.state[p]
                buf = state.get("momentum_buffer")
                first.append(buf is None)
                if buf is None:
                    buf = state["momentum_buffer"] = torch.empty_like(p, memory_format=torch.contiguous_format)
                    created.append(state)
                bufs.append(buf.data_ptr())

        def undo():
            for state in created:
                del state["momentum_buffer"]

        return (bufs, first, group["lr"], momentum, group["dampening"], group["weight_decay"], group["nesterov"],
                group.get("maximize", False)), undo


class _AdamStep(_Fused):
    """The fused step shared by Adam and AdamW (which decays weights before the update)."""

    _decoupled = False
    _kernel = staticmethod(_C.adam_step)
    _update = staticmethod(_C.adam_update)

    def _prepare(self, group, params):
        amsgrad = group["amsgrad"]
        exp_avg, exp_avg_sq, max_sq, steps, created, advanced = [], [], [], [], [], []
        for p in params:
            state = self.state[p]
            if not state:
                state["step"] = torch.tensor(0.0)
                state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                if amsgrad:
                    state["max_exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                created.append(state)
            state["step"] += 1
            advanced.append(state)
            steps.append(state["step"].item())
            exp_avg.append(state["exp_avg"].data_ptr())
            exp_avg_sq.append(state["exp_avg_sq"].data_ptr())
            if amsgrad:
                max_sq.append(state["max_exp_avg_sq"].data_ptr())

        def undo():
            for state in advanced:
                state["step"] -= 1
            for state in created:
                state.clear()

        beta1, beta2 = group["betas"]
        return (exp_avg, exp_avg_sq, max_sq, steps, group["lr"], beta1, beta2, group["eps"], group["weight_decay"],
                amsgrad, group.get("maximize", False), self._decoupled), undo


class Adam(_AdamStep, torch.optim.Adam):
    __doc__ = "Fused torch.optim.Adam (weight decay, amsgrad, maximize).\n\n" + (torch.optim.Adam.__doc__ or "")
    _base = torch.optim.Adam


class AdamW(_AdamStep, torch.optim.AdamW):
    __doc__ = "Fused torch.optim.AdamW (decoupled weight decay).\n\n" + (torch.optim.AdamW.__doc__ or "")
    _decoupled = True
    _base = torch.optim.AdamW
