"""chunk, split and unbind over dims whose size changes between calls: the engine returns the
pieces eager returns, never fewer or more. How many pieces there are depends on the size at run
time (4 rows chunk into 2 pieces, 16 into 6, 6 and 4), so an export that no longer fits is
exported again (SplitGuard, src/ops/tensor/split_guard.cc)."""
import copy
import onnx
import pytest
import torch
import torch.nn as nn
from onnx import helper

import onnxtrain
from onnxtrain import _C
from conftest import assert_close, assert_engine_ran


class Pieces(nn.Module):
    """Cuts a linear layer's output; every piece gets its own weight in the result, so a lost or
    extra piece changes outputs and gradients."""

    def __init__(self, cut, features=6):
        super().__init__()
        self.fc = nn.Linear(4, features)
        self.cut = cut

    def forward(self, x):
        h = self.fc(x) if x.dim() == 2 else self.fc(x.transpose(1, 2)).transpose(1, 2)
        return tuple(p * (i + 1) for i, p in enumerate(self.cut(h)))


CUTS = {
    "chunk3_dim0": lambda h: h.chunk(3, dim=0),
    "torch_chunk3_dim0": lambda h: torch.chunk(h, 3, 0),
    "split4_dim0": lambda h: h.split(4, dim=0),
    "torch_split4_dim0": lambda h: torch.split(h, 4),
    "unbind_dim0": lambda h: h.unbind(0),
    "iterate_dim0": lambda h: tuple(h),
    "chunk3_dim2": lambda h: h.chunk(3, dim=2),
    "split2_dim_minus1": lambda h: h.split(2, dim=-1),
    "unbind_dim2": lambda h: torch.unbind(h, 2),
}

# (rows, then the dynamic non-batch length for the 3-d cases): sizes that divide evenly, sizes that
# do not, sizes that change the number of pieces, and back to an earlier size.
ROWS = [18, 16, 4, 18, 7, 1, 16]
LENGTHS = [6, 5, 4, 9, 6, 2]


def run_and_compare(cut, inputs):
    module = Pieces(cut)
    model, ref = onnxtrain.ORTModule(module), copy.deepcopy(module)
    for data in inputs:
        ours_in, ref_in = data.clone().requires_grad_(), data.clone().requires_grad_()
        ours, theirs = model(ours_in), ref(ref_in)
        assert len(ours) == len(theirs), f"input {tuple(data.shape)}: {len(ours)} pieces, eager {len(theirs)}"
        for k, (a, b) in enumerate(zip(ours, theirs)):
            assert_engine_ran(a)
            assert_close(a, b, f"input {tuple(data.shape)} piece {k}")
        weights = [torch.linspace(-1, 1, p.numel()).reshape(p.shape) for p in theirs]
        loss = sum((p * w).sum() for p, w in zip(ours, weights))
        ref_loss = sum((p * w).sum() for p, w in zip(theirs, weights))
        loss.backward()
        ref_loss.backward()
        assert_close(ours_in.grad, ref_in.grad, f"input {tuple(data.shape)} input gradient")
        for (name, p), q in zip(module.named_parameters(), ref.parameters()):
            assert_close(p.grad, q.grad, f"input {tuple(data.shape)} {name}.grad")
            p.grad, q.grad = None, None
    return model


@pytest.mark.parametrize("name", [n for n in CUTS if n.endswith("dim0")])
def test_pieces_over_the_batch_dim(name):
    g = torch.Generator().manual_seed(0)
    run_and_compare(CUTS[name], [torch.randn(rows, 4, generator=g) for rows in ROWS])


@pytest.mark.parametrize("name", [n for n in CUTS if not n.endswith("dim0")])
def test_pieces_over_a_dynamic_inner_dim(name):
    """The cut dim is a sequence length of the input (batch, features, length): dim 2 of h."""
    g = torch.Generator().manual_seed(1)
    module = run_and_compare(CUTS[name], [torch.randn(2, 4, n, generator=g) for n in LENGTHS])
    assert module.engine_runs == len(LENGTHS)


def test_alternating_sizes_reuse_their_exports():
    """A full batch and a last, smaller one alternate over epochs: each keeps its own export."""
    g = torch.Generator().manual_seed(2)
    model = run_and_compare(CUTS["split4_dim0"], [torch.randn(rows, 4, generator=g) for rows in [8, 6, 8, 6, 8, 6]])
    # The TorchScript capture: 8 rows, 6 rows, and possibly the cut-down trace's. torch.export's
    # graph splits symbolically, and both sizes make 2 pieces: one export serves them.
    assert 1 <= len(model._graphs) <= 3
    if onnxtrain.capture.backend_name() == "torchscript":
        assert len(model._graphs) >= 2


def test_same_number_of_chunks_needs_no_new_export():
    """chunk's slices follow the size: 18 and 16 rows both make 3 chunks (6, 6, 6 and 6, 6, 4)."""
    g = torch.Generator().manual_seed(3)
    model = run_and_compare(CUTS["chunk3_dim0"], [torch.randn(rows, 4, generator=g) for rows in [18, 16, 17, 18]])
    assert len(model._graphs) == 1


# ---- the engine's SplitGuard against torch's own rule, size by size ----

def guard_model(kind, parameter, pieces):
    node = helper.make_node("SplitGuard", ["x"], ["y"], domain="ai.onnxtrain", kind=kind, axis=1,
                            parameter=parameter)
    # Built by hand: make_attribute cannot tell the type of an empty list.
    node.attribute.append(onnx.AttributeProto(name="pieces", type=onnx.AttributeProto.INTS, ints=pieces))
    graph = helper.make_graph([node], "guard", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, None])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, None])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnxtrain", 1)])
    return model.SerializeToString()


def torch_pieces(kind, size, parameter):
    t = torch.empty(2, size)
    cut = {"chunk": lambda: t.chunk(parameter, 1), "split": lambda: t.split(parameter, 1),
           "unbind": lambda: t.unbind(1)}[kind]()
    return [1] * size if kind == "unbind" else [p.shape[1] for p in cut]


@pytest.mark.parametrize("kind,parameter", [("chunk", 1), ("chunk", 3), ("chunk", 4), ("split", 1), ("split", 3),
                                            ("unbind", 0)])
def test_guard_accepts_exactly_the_sizes_that_give_the_exported_pieces(kind, parameter):
    for exported_size in (0, 1, 5, 7):
        exported = torch_pieces(kind, exported_size, parameter)
        session = _C.InferenceSession(guard_model(kind, parameter, exported))
        for size in range(0, 13):
            now = torch_pieces(kind, size, parameter)
            fits = len(now) == len(exported) if kind == "chunk" else now == exported
            data = torch.arange(2.0 * size).reshape(2, size)
            if fits:
                (y,) = onnxtrain._engine.from_capsules(*session.run(onnxtrain._engine.to_capsules([data])))
                assert torch.equal(y, data)
            else:
                with pytest.raises(_C.ExportMismatchError, match=rf"SplitGuard.*gives {len(now)} pieces"):
                    session.run(onnxtrain._engine.to_capsules([data]))


def test_guard_with_a_huge_chunk_count_refuses_without_allocating_the_pieces():
    """An empty dim chunks into `chunks` empty pieces: a hostile count is compared, never built."""
    session = _C.InferenceSession(guard_model("chunk", 2**62, [1]))
    with pytest.raises(_C.ExportMismatchError, match=f"gives {2**62} pieces;"):
        session.run(onnxtrain._engine.to_capsules([torch.empty(2, 0)]))
