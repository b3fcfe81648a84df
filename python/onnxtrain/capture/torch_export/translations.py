"""ATen-to-ONNX functions that replace onnxscript's where its export differs from eager PyTorch.

onnxscript's training-mode batch norm (aten::_native_batch_norm_legit_functional) forces its
inference branch: it normalizes with the running statistics and leaves them unchanged, so a
training step would be silently wrong. Ours writes BatchNormalization in training mode, which
onnx_rewrites then turns into the engine's BatchNormTraining (PyTorch's running-variance update)
with the new statistics as graph outputs. Its squeeze of a dynamic dim fails for every size but
1, where torch.export traced it as no squeeze (_squeezed). detach, gelu, silu, mish, hardtanh and
relu6 become the engine's own ops, as capture/engine_ops.py says why. The losses and the integer and
extremum ops and attention have modules of their own (translations_losses.py,
translations_integers.py, translations_attention.py).
"""
import torch
from onnxscript import opset18 as op

from .. import engine_ops


def _channels_like(x, value):
    """A [C] tensor of `value` for the channels of x (statistics that no buffer holds)."""
    return op.Expand(op.CastLike(op.Constant(value_float=value), x), op.Shape(x, start=1, end=2))


def _batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps):
    if weight is None:
        weight = _channels_like(x, 1.0)
    if bias is None:
        bias = _channels_like(x, 0.0)
    if not training:
        norm = op.BatchNormalization(x, weight, bias, running_mean, running_var, epsilon=eps, training_mode=0)
        inv_std = op.Div(op.CastLike(op.Constant(value_float=1.0), running_var),
                         op.Sqrt(op.Add(running_var, op.CastLike(op.Constant(value_float=eps), running_var))))
        return norm, op.Identity(running_mean), inv_std, op.Identity(running_mean), op.Identity(running_var)
    # ONNX's momentum weighs the old statistics, PyTorch's the batch's.
    norm, new_mean, new_var = op.BatchNormalization(x, weight, bias, running_mean, running_var, epsilon=eps,
                                                    momentum=1.0 - momentum, training_mode=1)
    # The batch's own statistics, as aten returns them (modules never read them: dead code then).
    axes = op.Constant(value_ints=[d for d in range(len(x.shape)) if d != 1])
    batch_mean = op.ReduceMean(x, axes, keepdims=1)
    centered = op.Sub(x, batch_mean)
    batch_var = op.ReduceMean(op.Mul(centered, centered), axes, keepdims=0)
    inv_std = op.Reciprocal(op.Sqrt(op.Add(batch_var, op.CastLike(op.Constant(value_float=eps), batch_var))))
    return norm, op.ReduceMean(x, axes, keepdims=0), inv_std, new_mean, new_var


def batch_norm_functional(x, weight=None, bias=None, running_mean=None, running_var=None, training=False,
                          momentum=0.9, eps=1e-05):
    if running_mean is None:
        running_mean = _channels_like(x, 0.0)
    if running_var is None:
        running_var = _channels_like(x, 1.0)
    return _batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps)


def batch_norm_no_stats(x, weight=None, bias=None, training=True, momentum=0.1, eps=1e-05):
    """track_running_stats=False: the batch's statistics in both modes, nothing to keep."""
    norm, save_mean, save_inv_std, _, _ = _batch_norm(x, weight, bias, _channels_like(x, 0.0), _channels_like(x, 1.0),
                                                       True, momentum, eps)
    return norm, save_mean, save_inv_std


def _squeezed(x, dims):
    """squeeze's dims that are 1 in the graph. torch.export keeps dims of size 1 fixed at 1 and
    traces every dynamic dim as not 1, so squeeze leaves those; onnxscript's Squeeze of a dynamic
    dim fails at run time for every size but 1."""
    rank = len(x.shape)
    return [d % rank for d in dims if isinstance(x.shape[d % rank], int) and x.shape[d % rank] == 1]


def _squeeze(x, dims):
    axes = _squeezed(x, dims)
    return op.Squeeze(x, op.Constant(value_ints=axes)) if axes else op.Identity(x)


def squeeze_dim(x, dim):
    return _squeeze(x, [dim])


def squeeze_dims(x, dim):
    return _squeeze(x, list(dim))


def squeeze_all(x):
    return _squeeze(x, list(range(len(x.shape))))


def _engine_translation(op):
    """The translation of an ATen op that becomes an engine op (capture/engine_ops.py), with the
    ATen op's signature and annotations, which the exporter reads to pass the attributes."""
    from . import stubs

    def translation(x, *args, **kwargs):
        return stubs.engine_node(op.op_type, [x],
                                 **engine_ops.attributes(op, args, kwargs, lambda value, type_, _: type_(value)))

    translation.__signature__ = engine_ops.signature(op)
    translation.__annotations__ = {name: type_ for name, type_, _ in op.attributes}
    translation.__name__ = translation.__qualname__ = f"engine_{op.op_type}"
    return translation


def group_norm(x, num_groups: int, weight=None, bias=None, eps: float = 1e-05, cudnn_enabled: bool = True):
    """group_norm as the TorchScript exporter writes it (whose NaN propagation the suite checks
    against eager): each group's values normalized by InstanceNormalization over [N, groups, rest],
    then the per-channel weight and bias."""
    grouped = op.Reshape(x, op.Constant(value_ints=[0, num_groups, -1]))
    ones = op.Expand(op.CastLike(op.Constant(value_float=1.0), x), op.Constant(value_ints=[num_groups]))
    zeros = op.Expand(op.CastLike(op.Constant(value_float=0.0), x), op.Constant(value_ints=[num_groups]))
    out = op.Reshape(op.InstanceNormalization(grouped, ones, zeros, epsilon=eps), op.Shape(x))
    per_channel = op.Constant(value_ints=list(range(1, len(x.shape) - 1)))
    if weight is not None:
        out = op.Mul(out, op.Unsqueeze(weight, per_channel) if len(x.shape) > 2 else weight)
    if bias is not None:
        out = op.Add(out, op.Unsqueeze(bias, per_channel) if len(x.shape) > 2 else bias)
    return out


def decomposed():
    """ATen ops whose translation the exporter's registry must not hold (they decompose)."""
    from . import translations_losses

    return translations_losses.decomposed()


def table():
    """The custom_translation_table for torch.onnx.export."""
    from . import checkpoints, translations_attention, translations_integers, translations_losses
    from .functions import python_function, python_op_translation

    aten = torch.ops.aten
    return {
        **checkpoints.translations(),
        **translations_losses.table(),
        **translations_integers.table(),
        **translations_attention.table(),
        python_function._opoverload: python_op_translation,
        aten._native_batch_norm_legit_functional.default: batch_norm_functional,
        aten._native_batch_norm_legit.no_stats: batch_norm_no_stats,
        aten.squeeze.dim: squeeze_dim,
        aten.squeeze.dims: squeeze_dims,
        aten.squeeze.default: squeeze_all,
        aten.group_norm.default: group_norm,
        **{getattr(aten, name).default: _engine_translation(op) for name, op in engine_ops.ENGINE_OPS.items()},
    }


def detach_no_grad_blocks(program):
    """torch.export keeps a torch.no_grad() block of the forward as a call of
    wrap_with_set_grad_enabled(False, block, inputs); the exporter inlines it, and the engine would
    differentiate through it. Each of the block's results is detached (StopGradient) where it is read."""
    graph = program.graph_module.graph
    changed = False
    for node in list(graph.nodes):
        if node.op != "call_function" or getattr(node.target, "__name__", "") != "wrap_with_set_grad_enabled" \
                or node.args[0] is not False:
            continue
        for result in list(node.users):
            with graph.inserting_after(result):
                detached = graph.call_function(torch.ops.aten.detach.default, (result,))
            result.replace_all_uses_with(detached, delete_user_cb=lambda user: user is not detached)
            detached.meta = dict(result.meta)
            changed = True
    if changed:
        program.graph_module.recompile()


def materialize_contiguous(program):
    """x.contiguous() becomes an explicit copy (clone in that memory format). The exporter's
    decomposition drops a contiguous() that the traced strides show to be a no-op, and its later
    type-promotion pass re-runs the graph on fake kernels whose strides differ: a view after it
    then fails (T5 under SDPA on torch 2.15: "Cannot view a tensor with shape ... and strides").
    A clone is a no-op in ONNX, so the graph the engine gets is the same."""
    for module in program.graph_module.modules():
        graph = getattr(module, "graph", None)
        if not isinstance(graph, torch.fx.Graph):
            continue
        changed = False
        for node in graph.nodes:
            if node.op == "call_function" and node.target is torch.ops.aten.contiguous.default:
                node.target = torch.ops.aten.clone.default
                node.kwargs = {"memory_format": node.kwargs.get("memory_format", torch.contiguous_format)}
                changed = True
        if changed:
            module.recompile()
