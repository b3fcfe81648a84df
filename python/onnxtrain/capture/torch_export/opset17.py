"""Brings the dynamo exporter's opset-18 graph to opset 17 and IR version 8, what the engine reads
(Debian's ONNX 1.12 defines nothing later). torch's exporter writes opset 18 whatever it is asked,
and ONNX's version converter fails on its graphs (axes computed by nodes). Opset 18 changed few
ops; each is rewritten to its opset-17 form or refused by name."""
import onnx
import onnx.numpy_helper
from onnx import helper

from ..common import ExportError
from ..onnx_rewrites import fresh_names

# Opset 18 moved their axes from an attribute to an optional input.
_AXES_TO_ATTRIBUTE = {"ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean",
                      "ReduceMin", "ReduceProd", "ReduceSumSquare"}
# Introduced in opset 18, with a twin of the same semantics in the engine's domain.
_ENGINE_TWINS = {"BitwiseAnd", "BitwiseNot", "BitwiseOr", "BitwiseXor"}
ENGINE_DOMAIN = "ai.onnxtrain"
# Introduced in opset 18: no opset-17 form.
_NEW_IN_18 = {"CenterCropPad", "Col2Im", "GroupNormalization", "Mish", "OptionalGetElement", "OptionalHasElement"}
# Attributes opset 18 added, at values that mean the opset-17 behaviour.
_NEUTRAL_ATTRIBUTES = {"Resize": {"antialias": 0, "keep_aspect_ratio_policy": b"stretch"}, "LpPool": {"ceil_mode": 0}}


class _Constants:
    """Values of Constant nodes and initializers, for inputs that must become attributes."""

    # Ops the exporter puts between a constant and the input that needs it (Reshape(axes, [-1])).
    _PASS_THROUGH = {"Identity", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Cast"}

    def __init__(self, graph, outer=None):
        self.values = dict(outer.values) if outer else {}
        self.producers = dict(outer.producers) if outer else {}
        self.values.update({t.name: onnx.numpy_helper.to_array(t) for t in graph.initializer
                            if t.data_location == 0 and (t.raw_data or t.int64_data or t.int32_data)})
        self.producers.update({o: n for n in graph.node for o in n.output})
        for node in graph.node:
            if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and len(node.output) == 1:
                attr = node.attribute[0]
                if attr.name == "value":
                    self.values[node.output[0]] = onnx.numpy_helper.to_array(attr.t)
                elif attr.name == "value_ints":
                    self.values[node.output[0]] = list(attr.ints)
                elif attr.name == "value_int":
                    self.values[node.output[0]] = [attr.i]

    def ints(self, name, depth=0):
        """The integers `name` holds when it is a constant, or a reshape of one; else None."""
        import numpy as np

        if name in self.values:
            return [int(v) for v in np.asarray(self.values[name]).reshape(-1)]
        node = self.producers.get(name)
        if node is None or depth > 8 or node.domain not in ("", "ai.onnx"):
            return None
        if node.op_type in self._PASS_THROUGH and node.input:
            return self.ints(node.input[0], depth + 1)
        if node.op_type == "Concat":
            parts = [self.ints(i, depth + 1) for i in node.input]
            return None if any(p is None for p in parts) else [v for p in parts for v in p]
        return None


def _refuse(node, why):
    raise ExportError(f"the torch.export capture wrote {node.op_type} node '{node.name}' {why}; the engine reads "
                      "opset 17, which has no equivalent (ONNXTRAIN_CAPTURE=torchscript uses the TorchScript exporter)")


def _attribute(node, name):
    for a in node.attribute:
        if a.name == name:
            return a
    return None


def _downgrade_node(node, constants, new_nodes, fresh):
    op = node.op_type
    if op in _ENGINE_TWINS and node.domain in ("", "ai.onnx"):
        node.domain = ENGINE_DOMAIN
        return
    if op in _NEW_IN_18:
        _refuse(node, "(an op introduced in opset 18)")
    if op in _AXES_TO_ATTRIBUTE and len(node.input) > 1 and node.input[1]:
        axes = constants.ints(node.input[1])
        if axes is None:
            _refuse(node, f"with axes computed at run time ('{node.input[1]}')")
        del node.input[1:]
        if axes:
            node.attribute.append(helper.make_attribute("axes", axes))
    if op in _AXES_TO_ATTRIBUTE:
        noop = _attribute(node, "noop_with_empty_axes")
        if noop is not None:
            if noop.i and _attribute(node, "axes") is None:
                _refuse(node, "with noop_with_empty_axes=1 and no axes")
            node.attribute.remove(noop)
    elif op == "Split":
        _downgrade_split(node, new_nodes, fresh)
    elif op == "Pad" and len(node.input) > 3 and node.input[3]:
        _refuse(node, "with an axes input")
    elif op in ("ScatterElements", "ScatterND"):
        reduction = _attribute(node, "reduction")
        if reduction is not None and reduction.s in (b"max", b"min"):
            _refuse(node, f"with reduction={reduction.s.decode()}")
    elif op in _NEUTRAL_ATTRIBUTES:
        for name, neutral in _NEUTRAL_ATTRIBUTES[op].items():
            a = _attribute(node, name)
            if a is None:
                continue
            if helper.get_attribute_value(a) != neutral:
                _refuse(node, f"with {name}={helper.get_attribute_value(a)!r}")
            node.attribute.remove(a)
        if op == "Resize" and _attribute(node, "axes") is not None:
            _refuse(node, "with an axes attribute")


def _downgrade_split(node, new_nodes, fresh):
    """Split-18's num_outputs allows a shorter last piece (torch.chunk); opset 17 needs the sizes."""
    count = _attribute(node, "num_outputs")
    if count is None:
        return
    node.attribute.remove(count)
    pieces = count.i
    axis = _attribute(node, "axis")
    axis = axis.i if axis is not None else 0
    # sizes = [ceil(d / n)] * (n - 1) + [d - (n - 1) * ceil(d / n)], from the dim at run time.
    names = {k: fresh(f"{node.name}_{k}") for k in ("shape", "dim", "n", "n1", "piece", "rest", "last", "ones",
                                                   "front", "sizes", "axisidx")}
    int64 = onnx.TensorProto.INT64

    def const(name, values):
        new_nodes.append(helper.make_node("Constant", [], [name], value=helper.make_tensor(name, int64, [len(values)],
                                                                                         values)))

    const(names["axisidx"], [axis])
    const(names["n"], [pieces])
    const(names["n1"], [pieces - 1])
    const(names["ones"], [1] * (pieces - 1) if pieces > 1 else [1])
    new_nodes.append(helper.make_node("Shape", [node.input[0]], [names["shape"]]))
    new_nodes.append(helper.make_node("Gather", [names["shape"], names["axisidx"]], [names["dim"]], axis=0))
    # ceil(d / n) = (d + n - 1) / n in integers
    new_nodes.append(helper.make_node("Add", [names["dim"], names["n1"]], [names["rest"]]))
    new_nodes.append(helper.make_node("Div", [names["rest"], names["n"]], [names["piece"]]))
    new_nodes.append(helper.make_node("Mul", [names["piece"], names["n1"]], [names["front"]]))
    new_nodes.append(helper.make_node("Sub", [names["dim"], names["front"]], [names["last"]]))
    if pieces > 1:
        front = fresh(f"{node.name}_front_sizes")
        new_nodes.append(helper.make_node("Mul", [names["ones"], names["piece"]], [front]))
        new_nodes.append(helper.make_node("Concat", [front, names["last"]], [names["sizes"]], axis=0))
    else:
        new_nodes.append(helper.make_node("Identity", [names["last"]], [names["sizes"]]))
    del node.input[1:]
    node.input.append(names["sizes"])


def _downgrade_graph(graph, outer_constants, fresh):
    constants = _Constants(graph, outer_constants)
    rewritten = []
    for node in graph.node:
        for a in node.attribute:  # If/Loop/Scan bodies read the same opset
            for body in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                _downgrade_graph(body, constants, fresh)
        if node.domain in ("", "ai.onnx"):
            added = []
            _downgrade_node(node, constants, added, fresh)
            rewritten.extend(added)
        rewritten.append(node)
    del graph.node[:]
    graph.node.extend(rewritten)


def to_opset17(model):
    """Rewrites `model` (opset 18, from the dynamo exporter) in place to opset 17, IR version 8."""
    versions = [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")]
    if versions and versions[0] > 18:
        raise ExportError(f"the torch.export capture wrote opset {versions[0]}; onnxtrain reads up to 17 and "
                          "converts 18")
    if model.functions:
        # onnxscript writes some ATen ops as local functions (aten_amax): inlined, they are
        # plain opset-18 nodes like the rest.
        from onnx import inliner

        inlined = inliner.inline_local_functions(model)
        model.CopyFrom(inlined)
    if model.functions:
        names = ", ".join(sorted(f"{f.domain}::{f.name}" for f in model.functions))
        raise ExportError(f"the torch.export capture wrote ONNX functions ({names}), which the engine does not run")
    fresh = fresh_names(model)

    _downgrade_graph(model.graph, _Constants(model.graph), fresh)
    used_domains = {n.domain for n in _all_nodes(model.graph)} | {"", "ai.onnx"}
    imports = [(o.domain, o.version) for o in model.opset_import
               if o.domain in used_domains and o.domain not in ("", "ai.onnx")]
    if ENGINE_DOMAIN in used_domains and all(domain != ENGINE_DOMAIN for domain, _ in imports):
        imports.append((ENGINE_DOMAIN, 1))  # the engine twins written above
    # Always imported: a graph without nodes (an identity) gets no opset from the exporter.
    imports.insert(0, ("", 17))
    del model.opset_import[:]
    model.opset_import.extend(helper.make_opsetid(domain, version) for domain, version in imports)
    model.ir_version = 8


def _all_nodes(graph):
    for node in graph.node:
        yield node
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from _all_nodes(a.g)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for g in a.graphs:
                    yield from _all_nodes(g)
