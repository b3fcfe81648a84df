"""The wrapped module's API passes through ORTModule unchanged."""
import copy
import inspect
import io
import pickle

import torch
import torch.nn as nn

import onnxtrain
from conftest import assert_close, assert_engine_ran


def x(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(5, 8), nn.BatchNorm1d(8), nn.ReLU())
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        return self.head(self.body(x))

    def predict(self, x):
        # A user method that calls self(...): it must go through the engine.
        return torch.softmax(self(x), dim=1) + self(x)


def test_state_dict_keys_and_loading():
    net = Net()
    model = onnxtrain.ORTModule(net)
    assert list(model.state_dict().keys()) == list(net.state_dict().keys())
    assert [n for n, _ in model.named_parameters()] == [n for n, _ in net.named_parameters()]
    assert [n for n, _ in model.named_buffers()] == [n for n, _ in net.named_buffers()]
    assert len(list(model.parameters())) == len(list(net.parameters()))
    assert len(list(model.buffers())) == len(list(net.buffers()))
    model(x(4, 5))
    other = Net()
    model.load_state_dict(other.state_dict())
    model.eval()
    other.eval()
    assert_close(model(x(3, 5, seed=1)), other(x(3, 5, seed=1)), "output after load_state_dict")


def test_to_and_register_buffer_pass_through():
    net = Net()
    model = onnxtrain.ORTModule(net)
    model(x(4, 5))
    model.to(torch.float64)
    assert net.head.weight.dtype == torch.float64
    out = model(x(4, 5).double())
    assert out.dtype == torch.float64
    assert_engine_ran(out)
    model.register_buffer("extra", torch.ones(3))
    assert "extra" in dict(net.named_buffers())
    assert "extra" in model.state_dict()


def test_user_method_calling_self_runs_in_the_engine():
    net = Net()
    ref = copy.deepcopy(net)
    model = onnxtrain.ORTModule(net)
    runs = model.engine_runs
    probs = model.predict(x(4, 5))
    assert model.engine_runs == runs + 2
    assert_close(probs, ref.predict(x(4, 5)), "predict")


def test_pickle_and_deepcopy_mid_training_resume_with_parity():
    torch.manual_seed(0)
    net = Net()
    ref = copy.deepcopy(net)
    model = onnxtrain.ORTModule(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)

    def step(m, o, seed):
        loss = m(x(6, 5, seed=seed)).pow(2).mean()
        o.zero_grad()
        loss.backward()
        o.step()
        return loss

    for s in range(2):
        step(model, opt, s)
        step(ref, ref_opt, s)
    copied = copy.deepcopy(model)
    buffer = io.BytesIO()
    torch.save(model, buffer)  # pickles the wrapper
    buffer.seek(0)
    # A whole module, not weights: torch 2.6+ loads weights only unless told otherwise.
    unpickled = torch.load(buffer, **({"weights_only": False} if "weights_only" in inspect.signature(torch.load).parameters else {}))
    unpickled2 = pickle.loads(pickle.dumps(model))
    for clone in (copied, unpickled, unpickled2):
        clone_ref = copy.deepcopy(ref)
        clone_opt = torch.optim.SGD(clone.parameters(), lr=0.1, momentum=0.9)
        clone_opt.load_state_dict(opt.state_dict())
        clone_ref_opt = torch.optim.SGD(clone_ref.parameters(), lr=0.1, momentum=0.9)
        clone_ref_opt.load_state_dict(ref_opt.state_dict())
        for s in range(2, 4):
            a = step(clone, clone_opt, s)
            b = step(clone_ref, clone_ref_opt, s)
            assert_close(a, b, "loss after resuming")
        for p, q in zip(clone.parameters(), clone_ref.parameters()):
            assert_close(p, q, "parameters after resuming")
        assert clone.engine_runs == 2


def test_reassigned_batchnorm_buffers_keep_receiving_updates():
    # Running statistics are written back into whatever tensor the module holds now, also after
    # the user replaced it.
    torch.manual_seed(0)
    ref = Net()
    model = onnxtrain.ORTModule(copy.deepcopy(ref))
    for step in range(4):
        if step == 2:
            for m in (ref, model.module):
                m.body[1].running_mean = torch.full((8,), 0.5)
                m.body[1].running_var = torch.full((8,), 2.0)
        batch = x(6, 5, seed=step)
        ref(batch).sum().backward()
        out = model(batch)
        assert_engine_ran(out)
        out.sum().backward()
        for name, buffer in ref.named_buffers():
            assert_close(model.module.get_buffer(name), buffer)
