"""torch.compile beside ORTModule (torch 2.x): torch.compile(ORTModule(m)) runs the engine with
the module opaque to torch.compile; ORTModule(torch.compile(m)) trains the module's own code and
says that torch.compile's code does not run. Both at parity with eager over several steps."""
import copy
import warnings

import pytest
import torch

import onnxtrain
from conftest import assert_close, assert_engine_ran

pytestmark = pytest.mark.skipif(not hasattr(torch, "compile"), reason="torch.compile is torch 2.x")


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))


def _train_side_by_side(model, inner, ref, steps=3):
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    for step in range(steps):
        x = torch.randn(4 + step, 8)
        out, ref_out = model(x), ref(x)
        assert_close(out, ref_out, f"step {step} output")
        out.square().sum().backward()
        ref_out.square().sum().backward()
        for (name, p), q in zip(inner.named_parameters(), ref.parameters()):
            assert_close(p.grad, q.grad, f"step {step} {name}.grad")
        opt.step()
        ref_opt.step()
        opt.zero_grad()
        ref_opt.zero_grad()
    for p, q in zip(inner.parameters(), ref.parameters()):
        assert_close(p, q, "parameters after training")


def test_compile_around_ortmodule_runs_the_engine():
    module = _model()
    ref = copy.deepcopy(module)
    wrapped = onnxtrain.ORTModule(module)
    compiled = torch.compile(wrapped)
    assert_engine_ran(compiled(torch.randn(2, 8)))
    wrapped.engine_runs = 0
    _train_side_by_side(compiled, module, ref)
    assert wrapped.engine_runs == 3


def test_ortmodule_of_a_compiled_module_trains_the_module_itself_and_says_so():
    module = _model()
    ref = copy.deepcopy(module)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        wrapped = onnxtrain.ORTModule(torch.compile(module))
    assert any("torch.compile's compiled code does not run" in str(w.message) for w in caught)
    assert wrapped.module is module
    assert list(wrapped.state_dict()) == list(ref.state_dict())
    _train_side_by_side(wrapped, module, ref)
    assert wrapped.engine_runs == 3
