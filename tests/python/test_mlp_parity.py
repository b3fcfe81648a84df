"""MLPs trained through onnxtrain match PyTorch eager step for step."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import onnxtrain
from conftest import assert_close, assert_engine_ran, torch_export_capture


def make_mlp(activation=nn.ReLU):
    return nn.Sequential(nn.Linear(64, 48), activation(), nn.Linear(48, 32), activation(), nn.Linear(32, 10))


def train_side_by_side(net, batches, steps=10, lr=0.1, momentum=0.0, input_grad=True):
    ref = copy.deepcopy(net)
    model = onnxtrain.ORTModule(net)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=lr, momentum=momentum)
    for step in range(steps):
        x, y = batches(step)
        x1 = x.clone().requires_grad_(input_grad)
        x2 = x.clone().requires_grad_(input_grad)
        out = model(x1)
        ref_out = ref(x2)
        assert_engine_ran(out)
        assert_close(out, ref_out, f"step {step} output")
        loss = F.cross_entropy(out, y)
        ref_loss = F.cross_entropy(ref_out, y)
        assert_close(loss, ref_loss, f"step {step} loss")
        opt.zero_grad()
        ref_opt.zero_grad()
        loss.backward()
        ref_loss.backward()
        for (name, p), q in zip(net.named_parameters(), ref.parameters()):
            assert_close(p.grad, q.grad, f"step {step} grad of {name}")
        if input_grad:
            assert_close(x1.grad, x2.grad, f"step {step} input grad")
        opt.step()
        ref_opt.step()
        for (name, p), q in zip(net.named_parameters(), ref.parameters()):
            assert_close(p, q, f"step {step} {name} after the update")
    return model


def fixed_batches(batch=16, features=64):
    gen = torch.Generator().manual_seed(0)
    data = [(torch.randn(batch, features, generator=gen), torch.randint(0, 10, (batch,), generator=gen))
            for _ in range(10)]
    return lambda step: data[step]


@pytest.mark.parametrize("activation", [nn.ReLU, nn.Sigmoid, nn.Tanh])
def test_ten_sgd_steps_match_pytorch(activation):
    torch.manual_seed(1)
    train_side_by_side(make_mlp(activation), fixed_batches())


def test_momentum_sgd_matches_pytorch():
    torch.manual_seed(2)
    train_side_by_side(make_mlp(), fixed_batches(), momentum=0.9, input_grad=False)


def test_batch_size_changes_between_steps():
    torch.manual_seed(3)
    gen = torch.Generator().manual_seed(5)
    sizes = [16, 3, 16, 40, 1, 7, 16, 3, 64, 2]
    data = [(torch.randn(n, 64, generator=gen), torch.randint(0, 10, (n,), generator=gen)) for n in sizes]
    model = train_side_by_side(make_mlp(), lambda step: data[step])
    # One export served every batch size (torch.export: every size but 1, which has its own).
    assert len(model._graphs) == (2 if torch_export_capture() else 1)


def test_three_dimensional_input_uses_matmul_path():
    torch.manual_seed(4)
    net = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 8))
    ref = copy.deepcopy(net)
    model = onnxtrain.ORTModule(net)
    x = torch.randn(4, 5, 8, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    out = model(x)
    assert_engine_ran(out)
    (out * out).sum().backward()
    (ref(x_ref) ** 2).sum().backward()
    assert_close(x.grad, x_ref.grad, "input grad")
    for p, q in zip(net.parameters(), ref.parameters()):
        assert_close(p.grad, q.grad, "param grad")


class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(12, 20)
        self.head_a = nn.Linear(20, 3)
        self.head_b = nn.Linear(20, 5)

    def forward(self, x):
        h = torch.relu(self.body(x))
        return self.head_a(h), torch.sigmoid(self.head_b(h)) * 2 - 1


def test_multiple_outputs_and_one_unused_gradient():
    torch.manual_seed(5)
    net = TwoHeads()
    ref = copy.deepcopy(net)
    model = onnxtrain.ORTModule(net)
    x = torch.randn(6, 12)
    a, b = model(x)
    ra, rb = ref(x)
    assert_engine_ran(a)
    assert_close(a, ra, "output a")
    assert_close(b, rb, "output b")
    # Only the first output feeds the loss: the second output's gradient is zero.
    a.pow(2).sum().backward()
    ra.pow(2).sum().backward()
    for (name, p), q in zip(net.named_parameters(), ref.parameters()):
        if q.grad is None:
            assert p.grad is None or torch.count_nonzero(p.grad) == 0, name
        else:
            assert_close(p.grad, q.grad, name)


def test_gradients_accumulate_across_backward_calls():
    torch.manual_seed(6)
    net = make_mlp()
    ref = copy.deepcopy(net)
    model = onnxtrain.ORTModule(net)
    for seed in range(3):  # no zero_grad: .grad accumulates as in PyTorch
        x = torch.randn(8, 64, generator=torch.Generator().manual_seed(seed))
        model(x).sum().backward()
        ref(x).sum().backward()
    for p, q in zip(net.parameters(), ref.parameters()):
        assert_close(p.grad, q.grad, "accumulated grad")
