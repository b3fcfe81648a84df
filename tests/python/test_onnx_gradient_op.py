"""ONNX's Gradient op (ai.onnx.preview.training) through the engine, against torch.autograd.grad.

A model built with onnx.helper carries a Gradient node; the engine expands it into backward nodes
before running, and its outputs must be the gradients PyTorch computes for the same function.
"""
import onnx
import pytest
import torch
from onnx import TensorProto, helper

import onnxtrain
from onnxtrain import _engine
from conftest import assert_close

TRAINING = "ai.onnx.preview.training"
ELEM = {torch.float32: TensorProto.FLOAT, torch.float64: TensorProto.DOUBLE}


def make_model(nodes, inputs, outputs):
    graph = helper.make_graph(nodes, "gradient_op", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(TRAINING, 1)])
    onnx.checker.check_model(model)
    return model


def run(model, feeds):
    session = onnxtrain._C.InferenceSession(model.SerializeToString(), False, -1)
    capsules, bools = session.run(_engine.to_capsules(list(feeds)), 0)
    return _engine.from_capsules(capsules, bools)


def value(name, dtype, shape):
    return helper.make_tensor_value_info(name, ELEM[dtype], shape)


def gradient(inputs, outputs, xs, y, zs=None, name="grad"):
    kwargs = {"zs": zs} if zs else {}
    return helper.make_node("Gradient", inputs, outputs, name=name, domain=TRAINING, xs=xs, y=y, **kwargs)


def silu_tanh_nodes():
    """y = sum(tanh(x @ w + b) * sigmoid(x @ w + b))"""
    return [
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("Add", ["h", "b"], ["s"]),
        helper.make_node("Tanh", ["s"], ["t"]),
        helper.make_node("Sigmoid", ["s"], ["g"]),
        helper.make_node("Mul", ["t", "g"], ["p"]),
        helper.make_node("ReduceSum", ["p"], ["y"], keepdims=0),
    ]


def silu_tanh_torch(x, w, b):
    s = x @ w + b
    return (torch.tanh(s) * torch.sigmoid(s)).sum()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_gradient_node_outputs_match_torch_autograd_grad(dtype):
    torch.manual_seed(0)
    x, w, b = torch.randn(5, 3, dtype=dtype), torch.randn(3, 4, dtype=dtype), torch.randn(4, dtype=dtype)
    nodes = silu_tanh_nodes() + [gradient(["x", "w", "b"], ["dx", "dw"], xs=["x", "w"], zs=["b"], y="y")]
    model = make_model(nodes, [value("x", dtype, [5, 3]), value("w", dtype, [3, 4]), value("b", dtype, [4])],
                       [value("y", dtype, []), value("dx", dtype, [5, 3]), value("dw", dtype, [3, 4])])
    y, dx, dw = run(model, [x, w, b])

    xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
    y_ref = silu_tanh_torch(xr, wr, b)
    dx_ref, dw_ref = torch.autograd.grad(y_ref, [xr, wr])
    assert dx.dtype == dtype and dw.dtype == dtype
    assert_close(y, y_ref.detach(), "y")
    assert_close(dx, dx_ref, "dy/dx")
    assert_close(dw, dw_ref, "dy/dw")
    # The test can fail: the gradient is not the value itself, nor zero.
    assert not torch.allclose(dw, torch.zeros_like(dw))


def test_gradient_with_respect_to_an_intermediate_value_at_another_point():
    """xs names the intermediate s; the node's input s1 is the point where the gradient is taken."""
    torch.manual_seed(1)
    dtype = torch.float32
    x, w, b, s1 = torch.randn(2, 3), torch.randn(3, 4), torch.randn(4), torch.randn(2, 4)
    nodes = silu_tanh_nodes() + [gradient(["s1"], ["ds"], xs=["s"], y="y")]
    model = make_model(nodes, [value("x", dtype, [2, 3]), value("w", dtype, [3, 4]), value("b", dtype, [4]),
                               value("s1", dtype, [2, 4])],
                       [value("y", dtype, []), value("ds", dtype, [2, 4])])
    y, ds = run(model, [x, w, b, s1])

    sr = s1.clone().requires_grad_()
    (ds_ref,) = torch.autograd.grad((torch.tanh(sr) * torch.sigmoid(sr)).sum(), [sr])
    assert_close(ds, ds_ref, "dy/ds at s1")
    assert_close(y, silu_tanh_torch(x, w, b), "y")


def test_non_scalar_y_matches_grad_outputs_of_ones():
    torch.manual_seed(2)
    dtype = torch.float64
    a, c = torch.randn(3, 4, dtype=dtype), torch.randn(4, dtype=dtype)
    nodes = [helper.make_node("Mul", ["a", "a"], ["a2"]), helper.make_node("Div", ["a2", "c"], ["y"]),
             gradient(["a", "c"], ["da", "dc"], xs=["a", "c"], y="y")]
    model = make_model(nodes, [value("a", dtype, [3, 4]), value("c", dtype, [4])],
                       [value("da", dtype, [3, 4]), value("dc", dtype, [4])])
    da, dc = run(model, [a, c])

    ar, cr = a.clone().requires_grad_(), c.clone().requires_grad_()
    y_ref = ar * ar / cr
    da_ref, dc_ref = torch.autograd.grad(y_ref, [ar, cr], grad_outputs=torch.ones_like(y_ref))
    assert_close(da, da_ref, "da")
    assert_close(dc, dc_ref, "dc (summed over the broadcast rows)")


def test_a_missing_xs_name_is_refused_naming_the_node():
    dtype = torch.float32
    nodes = silu_tanh_nodes() + [gradient(["x"], ["dx"], xs=["not_a_value"], y="y", name="my_gradient")]
    model = make_model(nodes, [value("x", dtype, [2, 3]), value("w", dtype, [3, 4]), value("b", dtype, [4])],
                       [value("dx", dtype, [2, 3])])
    with pytest.raises(onnxtrain.EngineError) as info:
        onnxtrain._C.InferenceSession(model.SerializeToString(), False, -1)
    message = str(info.value)
    assert "Gradient node 'my_gradient'" in message and "'not_a_value'" in message, message
