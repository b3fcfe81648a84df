"""Nodes with as many outputs as their inputs call for, written through torch's dynamo exporter.

The exporter gives a node as many outputs as its ONNX schema declares, and a PythonOp has as many
as its Function, a checkpoint marker as many as its segment's tensors. So a translation writes one
single-output stub node per output (write), and merge() joins each group's stubs into the node
they stand for, where the group's first stub was.
"""
import itertools
import os

import onnx
from onnx import helper

DOMAIN = "ai.onnxtrain"
STUB = "MultiOutputPart"
_DECLARED = []


def _declare():
    """onnxscript writes only ops whose schema ONNX knows: the stub is declared to this process's
    onnx once (variadic inputs of any tensor type, one output)."""
    if _DECLARED:
        return
    from onnx import defs

    schema = defs.OpSchema
    types = [f"tensor({t})" for t in ("float", "double", "float16", "bfloat16", "int8", "int16", "int32", "int64",
                                      "uint8", "bool")]
    if not defs.has(STUB, DOMAIN):
        defs.register_schema(schema(
            STUB, DOMAIN, 1, "One output of a multi-output node, joined into it after the export.",
            inputs=[schema.FormalParameter("inputs", "T", "", param_option=schema.FormalParameterOption.Variadic,
                                           is_homogeneous=False, min_arity=0)],
            outputs=[schema.FormalParameter("output", "U", "")],
            type_constraints=[("T", types, ""), ("U", types, "")],
            attributes=[schema.Attribute("group", schema.AttrType.STRING, "", required=True),
                        schema.Attribute("index", schema.AttrType.INT, "", required=True)]))
    _DECLARED.append(True)


def write(tensors, group, count):
    """In a translation: `count` stubs over `tensors`, standing for the outputs of `group`'s node."""
    import onnxscript

    _declare()
    engine = onnxscript.values.Opset(DOMAIN, 1)
    return [getattr(engine, STUB)(*tensors, group=group, index=k) for k in range(count)]


_engine_ids = itertools.count()
_ENGINE_NODES = {}  # group -> merge's description, for the engine nodes of the export in progress


def engine_node(op_type, tensors, count=1, **attributes):
    """In a translation: a node of the engine's domain, whose schema this process's onnx does not
    know (so onnxscript cannot write it): its outputs, one value or a list of `count`."""
    group = f"engine-{os.getpid()}-{next(_engine_ids)}"
    _ENGINE_NODES[group] = (op_type, attributes, count, 0)
    outputs = write(tensors, group, count)
    return outputs[0] if count == 1 else outputs


def describe_engine_node(group):
    """merge's description of an engine_node group, once; None for another group."""
    return _ENGINE_NODES.pop(group, None)


def _attr(node, name):
    return next(helper.get_attribute_value(a) for a in node.attribute if a.name == name)


def merge(model, fresh, describe):
    """Joins the stubs of each group into one node. describe(group) -> (op_type, attributes,
    number of outputs, extra outputs after them that nothing reads)."""
    parts = {}
    for node in model.graph.node:
        if node.domain == DOMAIN and node.op_type == STUB:
            group = _attr(node, "group").decode()
            parts.setdefault(group, {})[_attr(node, "index")] = node
    merged = []
    for node in model.graph.node:
        if not (node.domain == DOMAIN and node.op_type == STUB):
            merged.append(node)
            continue
        group = _attr(node, "group").decode()
        if group not in parts:
            continue  # joined where the group's first stub was
        by_index = parts.pop(group)
        op_type, attributes, count, extra = describe(group)
        outputs = [by_index[k].output[0] if k in by_index else fresh(f"{group}_unused{k}") for k in range(count)]
        outputs += [fresh(f"{group}_extra{k}") for k in range(extra)]
        merged.append(helper.make_node(op_type, list(node.input), outputs, name=fresh(f"{op_type}_{group}"),
                                       domain=DOMAIN, **attributes))
    del model.graph.node[:]
    model.graph.node.extend(merged)
    if any(n.domain == DOMAIN for n in model.graph.node) and not any(o.domain == DOMAIN for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid(DOMAIN, 1))


__all__ = ["describe_engine_node", "engine_node", "merge", "write", "onnx"]
