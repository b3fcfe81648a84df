"""Rewrites of an exported ONNX graph where ONNX semantics differ from PyTorch's (both capture
backends: their graphs name the module's tensors module.<path>).

- Training-mode BatchNormalization: ONNX updates running_var with the biased batch variance and
  does not make the new statistics graph outputs. It becomes ai.onnxtrain::BatchNormTraining
  (PyTorch's semantics), whose new statistics are extra graph outputs that the front end copies
  into the module's buffers after each training-mode forward. (The C++ API's artifacts make the
  same substitution for the BatchNorm statistics they keep as state: src/api/model_state.h.)
- Embedding with padding_idx exports as a plain Gather, which would give the padding row a
  gradient. It becomes ai.onnxtrain::Embedding, whose gradient skips that row.
- torch.onnx.export of a module in eval mode merges parameters and buffers that hold equal
  values (a fresh BatchNorm's running_var equals its weight, two zero biases equal each other):
  one becomes Identity(other), so the gradients of both would land on one. Each gets its own
  graph input again; a parameter shared by two modules is fed twice, and autograd sums the two
  gradients into it, as eager does.
- ONNX's Reshape reads a 0 in the target shape as "keep this dim", PyTorch's reshape as an empty
  dim. torch writes the "keep" zeros only into constant shapes; a shape computed at run time
  (from Shape) holds real sizes, so those Reshapes get allowzero=1 and empty batches work.
"""
import copy

import onnx
import torch

from .common import BufferUpdates

DOMAIN = "ai.onnxtrain"
PREFIX = "module."  # graph inputs that are parameters or buffers are named module.<path>


def _module_path(name, suffix):
    if name.startswith(PREFIX) and name.endswith(suffix):
        return name[len(PREFIX):-len(suffix)]
    return None


def _attr(node, name, default):
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def _rewrite_batchnorm(model, module, node, updates, fresh):
    path = _module_path(node.input[3], ".running_mean")
    bn = module.get_submodule(path) if path is not None else None
    if bn is not None and getattr(bn, "momentum", 0.1) is None:
        raise ValueError(f"BatchNorm {path!r} uses momentum=None (a cumulative average), which onnxtrain "
                         "does not support")
    node.domain = DOMAIN
    node.op_type = "BatchNormTraining"
    kept = [a for a in node.attribute if a.name in ("epsilon", "momentum")]
    del node.attribute[:]
    node.attribute.extend(kept)
    outputs = list(node.output) + [""] * (3 - len(node.output))
    outputs = [o or fresh(f"{node.name}_out{i}") for i, o in enumerate(outputs)]
    outputs += [fresh(f"{node.name}_saved_mean"), fresh(f"{node.name}_saved_inv_std")]
    del node.output[:]
    node.output.extend(outputs)
    if bn is None:
        return  # statistics are not module buffers (track_running_stats=False): nothing to write back
    for out, buffer in ((outputs[1], "running_mean"), (outputs[2], "running_var")):
        updates.outputs.append((len(model.graph.output), f"{path}.{buffer}"))
        model.graph.output.append(onnx.helper.make_tensor_value_info(out, onnx.TensorProto.FLOAT, None))
    updates.batchnorm_paths.append(path)


def _rewrite_embedding(module, node):
    path = _module_path(node.input[0], ".weight")
    if path is None or _attr(node, "axis", 0) != 0:
        return
    embedding = module.get_submodule(path)
    if not isinstance(embedding, torch.nn.Embedding) or embedding.padding_idx is None:
        return
    padding = embedding.padding_idx % embedding.num_embeddings
    node.domain = DOMAIN
    node.op_type = "Embedding"
    del node.attribute[:]
    node.attribute.append(onnx.helper.make_attribute("padding_idx", padding))


def is_module_tensor(module, path):
    owner_path, _, name = path.rpartition(".")
    try:
        owner = module.get_submodule(owner_path) if owner_path else module
    except AttributeError:
        return False
    return name in owner._parameters or name in owner._buffers


def _undo_initializer_deduplication(model, module):
    inputs = {i.name: i for i in model.graph.input}
    for node in list(model.graph.node):
        if node.op_type != "Identity" or node.domain not in ("", "ai.onnx") or len(node.input) != 1:
            continue
        source, target = node.input[0], node.output[0]
        if source not in inputs or not source.startswith(PREFIX) or not target.startswith(PREFIX):
            continue
        if not is_module_tensor(module, target[len(PREFIX):]):
            continue
        separate = copy.deepcopy(inputs[source])
        separate.name = target
        model.graph.input.append(separate)
        inputs[target] = separate
        model.graph.node.remove(node)


def _reshape_computed_shapes_literally(model):
    constant = {i.name for i in model.graph.initializer}
    constant |= {o for n in model.graph.node if n.op_type == "Constant" for o in n.output}
    for node in model.graph.node:
        if node.op_type == "Reshape" and node.domain in ("", "ai.onnx") and len(node.input) > 1 \
                and node.input[1] not in constant:
            del node.attribute[:]
            node.attribute.append(onnx.helper.make_attribute("allowzero", 1))


def fresh_names(model):
    """A function that returns a name no value of `model`'s graph has yet, from a base name."""
    used = {v for n in model.graph.node for v in list(n.input) + list(n.output)}
    used |= {i.name for i in model.graph.input}

    def fresh(base):
        name, k = base, 0
        while name in used:
            k += 1
            name = f"{base}_{k}"
        used.add(name)
        return name

    return fresh


def adapt_to_pytorch(model, module):
    """Rewrites `model` in place; returns the BufferUpdates the front end must apply."""
    _undo_initializer_deduplication(model, module)
    _reshape_computed_shapes_literally(model)
    fresh = fresh_names(model)

    updates = BufferUpdates()
    rewritten = False
    for node in model.graph.node:
        if node.domain in ("", "ai.onnx"):
            if node.op_type == "BatchNormalization" and _attr(node, "training_mode", 0) == 1:
                _rewrite_batchnorm(model, module, node, updates, fresh)
                rewritten = True
            elif node.op_type == "Gather":
                _rewrite_embedding(module, node)
                rewritten = rewritten or node.domain == DOMAIN
    if rewritten and not any(op.domain == DOMAIN for op in model.opset_import):
        model.opset_import.append(onnx.helper.make_opsetid(DOMAIN, 1))
    return updates
