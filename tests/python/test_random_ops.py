"""RandomUniform/Normal(-Like) and Multinomial run in the engine, drawn from its counter-based
generator seeded from torch's RNG (torch.manual_seed makes them repeatable), with their
attributes honoured; the draws are constants to autodiff, as in eager."""
import math

import onnx
import pytest
import torch
from onnx import TensorProto, helper

import onnxtrain
from onnxtrain import _engine
from conftest import assert_close, assert_engine_ran

N = 200_000


class Noise(torch.nn.Module):
    def __init__(self, draw):
        super().__init__()
        self.draw = draw

    def forward(self, x):
        return x + self.draw(x)


def engine_draws(draw, shape=(N,), dtype=torch.float32, seed=0):
    torch.manual_seed(seed)
    model = onnxtrain.ORTModule(Noise(draw))
    x = torch.zeros(shape, dtype=dtype, requires_grad=dtype.is_floating_point)
    out = model(x)
    assert_engine_ran(out)
    return out.detach()


def assert_moments(values, mean, var, what):
    values = values.double()
    # Tolerances of about 6 standard errors of the mean and of the variance at N draws.
    assert abs(values.mean().item() - mean) < 6 * math.sqrt(var / values.numel()), f"{what}: mean {values.mean()}"
    assert abs(values.var().item() - var) < 6 * var * math.sqrt(2.0 / values.numel()) + 1e-3 * var, \
        f"{what}: variance {values.var()}"


def test_rand_like_is_uniform_on_the_unit_interval():
    u = engine_draws(torch.rand_like)
    assert u.min() >= 0 and u.max() < 1
    assert_moments(u, 0.5, 1 / 12, "rand_like")
    # Deciles: each holds a tenth of the draws.
    counts = torch.histc(u, bins=10, min=0, max=1)
    assert (counts - N / 10).abs().max() < 6 * math.sqrt(N / 10)


def test_randn_like_is_standard_normal():
    z = engine_draws(torch.randn_like)
    assert_moments(z, 0.0, 1.0, "randn_like")
    # Tails: P(|z| > 2) = 4.55%.
    tail = (z.abs() > 2).double().mean().item()
    assert abs(tail - 0.0455) < 0.003


def test_rand_and_randn_of_a_static_shape_and_dtype():
    u = engine_draws(lambda x: torch.rand(x.shape[0], dtype=torch.float64), dtype=torch.float64)
    assert u.dtype == torch.float64
    assert_moments(u, 0.5, 1 / 12, "rand float64")
    z = engine_draws(lambda x: torch.randn(400, 500), shape=(400, 500))
    assert z.shape == (400, 500)
    assert_moments(z, 0.0, 1.0, "randn")


def test_uniform_in_place_and_normal_with_mean_and_std():
    u = engine_draws(lambda x: torch.empty_like(x).uniform_(-2, 3))
    assert u.min() >= -2 and u.max() < 3
    assert_moments(u, 0.5, 25 / 12, "uniform_(-2, 3)")
    z = engine_draws(lambda x: torch.normal(x + 1.5, 2.0))
    assert_moments(z - 0, 1.5, 4.0, "normal(1.5, 2)")


@pytest.mark.parametrize("draw", [torch.rand_like, torch.randn_like], ids=["rand_like", "randn_like"])
def test_seeding_follows_torch(draw):
    a = engine_draws(draw, shape=(1000,), seed=3)
    b = engine_draws(draw, shape=(1000,), seed=3)
    c = engine_draws(draw, shape=(1000,), seed=4)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    # Successive calls draw fresh values, and independent streams per element.
    torch.manual_seed(3)
    model = onnxtrain.ORTModule(Noise(draw))
    x = torch.zeros(1000)
    first, second = model(x), model(x)
    assert not torch.equal(first, second)
    assert abs(torch.corrcoef(torch.stack([first, second]))[0, 1].item()) < 0.15


def test_gradient_flows_through_x_plus_noise_not_into_the_noise():
    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(8, 8)

        def forward(self, x):
            noise = torch.randn_like(x)
            h = self.linear(x) + noise * 0.1
            return h.pow(2).sum(), noise

    torch.manual_seed(0)
    eager = Model()
    model = onnxtrain.ORTModule(Model())
    model.module.load_state_dict(eager.state_dict())
    x = torch.randn(16, 8, requires_grad=True)
    x_eager = x.detach().clone().requires_grad_()
    loss, noise = model(x)
    assert_engine_ran(loss)
    assert not noise.requires_grad  # a draw is a constant, as torch.randn_like's output
    loss.backward()
    # Eager with the engine's noise: the same function of x and the parameters.
    h = eager.linear(x_eager) + noise * 0.1
    h.pow(2).sum().backward()
    assert_close(x.grad, x_eager.grad, "dx")
    assert_close(model.module.linear.weight.grad, eager.linear.weight.grad, "dW")
    assert_close(model.module.linear.bias.grad, eager.linear.bias.grad, "db")


def test_bernoulli_of_probabilities_trains_in_the_engine():
    # torch.bernoulli(p) exports as RandomUniformLike(p) < p (or onnxtrain's Bernoulli).
    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(4, 4)

        def forward(self, x):
            h = self.linear(x)
            mask = torch.bernoulli(torch.sigmoid(h).detach())
            return h * mask, mask

    torch.manual_seed(0)
    model = onnxtrain.ORTModule(Model())
    x = torch.randn(50_000, 4)
    out, mask = model(x)
    assert_engine_ran(out)
    p = torch.sigmoid(model.module.linear(x)).detach()
    assert set(mask.unique().tolist()) <= {0.0, 1.0}
    assert abs(mask.mean().item() - p.mean().item()) < 0.005
    out.sum().backward()
    # d(sum h * mask)/d bias = column sums of the mask
    assert_close(model.module.linear.bias.grad, mask.sum(0), "bias gradient")


def multinomial_draws(probs, n, replacement, seed=0):
    class Sample(torch.nn.Module):
        def forward(self, p):
            return torch.multinomial(p, n, replacement=replacement)

    torch.manual_seed(seed)
    model = onnxtrain.ORTModule(Sample())
    out = model(probs)
    return out


def test_multinomial_with_replacement_follows_the_probabilities():
    probs = torch.tensor([[0.1, 0.2, 0.0, 0.7], [4.0, 1.0, 3.0, 2.0]])  # unnormalized rows too
    samples = multinomial_draws(probs, 50_000, True)
    assert samples.dtype == torch.int64 and samples.shape == (2, 50_000)
    for row in range(2):
        freq = torch.bincount(samples[row], minlength=4).double() / samples.shape[1]
        expected = probs[row].double() / probs[row].sum()
        assert (freq - expected).abs().max() < 0.01, (row, freq)
    assert not (samples[0] == 2).any()  # probability zero is never drawn
    one_d = multinomial_draws(torch.tensor([0.5, 0.5]), 7, True)
    assert one_d.shape == (7,)


def test_multinomial_without_replacement_draws_distinct_classes_in_proportion():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05]).repeat(40_000, 1)
    samples = multinomial_draws(probs, 2, False)
    assert samples.shape == (40_000, 2)
    assert (samples[:, 0] != samples[:, 1]).all()
    # First draws follow p; P(second = j) = sum_i p_i p_j / (1 - p_i).
    first = torch.bincount(samples[:, 0], minlength=4).double() / 40_000
    assert (first - probs[0].double()).abs().max() < 0.01
    p = probs[0].double()
    second_expected = torch.stack([sum(p[i] * p[j] / (1 - p[i]) for i in range(4) if i != j) for j in range(4)])
    second = torch.bincount(samples[:, 1], minlength=4).double() / 40_000
    assert (second - second_expected).abs().max() < 0.01
    again = multinomial_draws(probs, 2, False)
    assert torch.equal(samples, again)
    assert not torch.equal(samples, multinomial_draws(probs, 2, False, seed=1))


def run_node(node, inputs, outputs, seed, feeds=()):
    graph = helper.make_graph([node], "g", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    session = onnxtrain._C.InferenceSession(model.SerializeToString(), False, -1)
    capsules, bools = session.run(_engine.to_capsules(list(feeds)), seed)
    return _engine.from_capsules(capsules, bools)[0]


def out_info(elem, shape):
    return helper.make_tensor_value_info("y", elem, shape)


@pytest.mark.parametrize("elem, dtype", [(TensorProto.FLOAT, torch.float32), (TensorProto.DOUBLE, torch.float64),
                                         (TensorProto.FLOAT16, torch.float16)])
def test_attributes_dtype_shape_mean_scale_low_high(elem, dtype):
    normal = helper.make_node("RandomNormal", [], ["y"], dtype=elem, shape=[300, 400], mean=-1.0, scale=3.0)
    z = run_node(normal, [], [out_info(elem, [300, 400])], seed=1)
    assert z.dtype == dtype and z.shape == (300, 400)
    assert_moments(z, -1.0, 9.0, "RandomNormal")
    uniform = helper.make_node("RandomUniform", [], ["y"], dtype=elem, shape=[N], low=5.0, high=7.0)
    u = run_node(uniform, [], [out_info(elem, [N])], seed=1)
    assert u.dtype == dtype and u.min() >= 5 and u.max() <= 7
    assert_moments(u, 6.0, 4 / 12, "RandomUniform")
    if dtype != torch.float16:
        assert u.max() < 7


def test_like_forms_take_the_input_type_unless_dtype_says_otherwise():
    x = helper.make_tensor_value_info("x", TensorProto.DOUBLE, [1000])
    same = helper.make_node("RandomUniformLike", ["x"], ["y"])
    assert run_node(same, [x], [out_info(TensorProto.DOUBLE, [1000])], 1, [torch.zeros(1000, dtype=torch.float64)]) \
        .dtype == torch.float64
    other = helper.make_node("RandomNormalLike", ["x"], ["y"], dtype=TensorProto.FLOAT)
    assert run_node(other, [x], [out_info(TensorProto.FLOAT, [1000])], 1, [torch.zeros(1000, dtype=torch.float64)]) \
        .dtype == torch.float32


def test_the_seed_attribute_varies_the_stream_and_run_seeds_still_count():
    def draw(seed_attr, run_seed):
        kwargs = {} if seed_attr is None else {"seed": seed_attr}
        node = helper.make_node("RandomUniform", [], ["y"], shape=[100], **kwargs)
        return run_node(node, [], [out_info(TensorProto.FLOAT, [100])], run_seed)

    assert torch.equal(draw(5.0, 1), draw(5.0, 1))
    assert not torch.equal(draw(5.0, 1), draw(6.0, 1))
    assert not torch.equal(draw(5.0, 1), draw(None, 1))
    assert not torch.equal(draw(5.0, 1), draw(5.0, 2))


def test_multinomial_node_int32_and_sample_size():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 5])
    node = helper.make_node("Multinomial", ["x"], ["y"], sample_size=1000)
    logits = torch.log(torch.tensor([[1.0, 0, 0, 0, 0], [0, 0, 0, 0, 1], [1, 1, 1, 1, 1]]))
    y = run_node(node, [x], [out_info(TensorProto.INT32, [3, 1000])], 1, [logits])
    assert y.dtype == torch.int32 and y.shape == (3, 1000)
    assert (y[0] == 0).all() and (y[1] == 4).all()
    assert set(y[2].tolist()) == {0, 1, 2, 3, 4}
