"""onnxtrain.audit: one training step with every node checked against its float64 twin
(src/audit/). The interface, a step that leaves the module as it was, and small models whose every
node is within float32 rounding of its twin."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from conftest import assert_engine_ran  # noqa: F401  (puts the package on sys.path first)
import onnxtrain  # noqa: E402

# Normalized per op family (audit_compare.h): float32 rounding of these models is about 1e-7.
TOLERANCE = 1e-5


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 5))


def small_cnn():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(8, 16, 3), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Dropout(0.3), nn.Linear(16 * 3 * 3, 10))


class Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * x * grad


class WithFunction(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 4)

    def forward(self, x):
        return Square.apply(self.fc(x))


def test_report_has_one_row_per_node_and_the_worst_first():
    report = onnxtrain.audit(mlp(), torch.randn(8, 20), loss_fn=lambda out: F.cross_entropy(out, torch.arange(8) % 5))
    assert isinstance(report, onnxtrain.AuditReport)
    assert {r.graph for r in report.rows} == {"forward", "backward"}
    assert {"Gemm", "Relu", "Tanh"} <= {r.op_type for r in report.rows}
    for row in report.rows:
        assert row.node and row.op_type and row.rel_error is not None, row
        assert row.normalization in ("sum_of_terms", "output_scale", "exact", "selected_value"), row
    worst = report.worst(3)
    assert len(worst) == 3
    assert [r.rel_error for r in worst] == sorted((r.rel_error for r in report.rows), reverse=True)[:3]
    assert report.max_rel_error == worst[0].rel_error
    text = str(report)
    assert "rel_error" in text and worst[0].node in text


def test_nodes_without_a_float64_twin_are_rows_with_a_reason():
    report = onnxtrain.audit(WithFunction(), torch.randn(3, 6))
    user_code = [r for r in report.rows if r.op_type in ("PythonOp", "PythonOpGrad")]
    assert {r.graph for r in user_code} == {"forward", "backward"}, report.rows
    for row in user_code:
        assert row.rel_error is None and "user code" in row.reason, row
    assert user_code[0] in report.not_compared
    assert all(r.rel_error is not None for r in report.worst(100))  # worst() skips them
    assert "without a float64 twin" in str(report)


def test_the_module_its_gradients_and_the_rng_are_left_as_they_were():
    model = small_cnn().train()
    model[0].weight.grad = torch.randn_like(model[0].weight)
    grad_object, grad_value = model[0].weight.grad, model[0].weight.grad.clone()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    x = torch.randn(4, 3, 16, 16)
    rng = torch.get_rng_state()
    report = onnxtrain.audit(model, x)
    assert any(r.op_type == "Dropout" for r in report.rows)  # it drew from the RNG
    assert torch.equal(torch.get_rng_state(), rng)
    for k, v in model.state_dict().items():  # parameters, running statistics, num_batches_tracked
        assert torch.equal(v, state[k]), k
    assert model[0].weight.grad is grad_object and torch.equal(grad_object, grad_value)
    assert all(p.grad is None for name, p in model.named_parameters() if not name.startswith("0.weight"))


def test_an_ortmodule_is_audited_as_it_runs_and_keeps_training():
    model = onnxtrain.ORTModule(mlp())
    x = torch.randn(8, 20)
    model(x).sum().backward()  # a step before: the audit reuses the export and its memory plan
    grads = [p.grad.clone() for p in model.parameters()]
    report = onnxtrain.audit(model, x)
    assert report.max_rel_error < TOLERANCE
    assert all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), grads))
    assert model.engine_runs == 2


def test_every_node_of_an_mlp_is_within_float32_rounding():
    report = onnxtrain.audit(mlp(), torch.randn(16, 20), loss_fn=lambda out: F.cross_entropy(out, torch.arange(16) % 5))
    assert not report.not_compared
    assert report.max_rel_error < TOLERANCE, report


def test_every_node_of_a_cnn_with_batchnorm_and_maxpool_is_within_float32_rounding():
    report = onnxtrain.audit(small_cnn(), torch.randn(4, 3, 16, 16),
                             loss_fn=lambda out: F.cross_entropy(out, torch.arange(4)))
    ops = {r.op_type for r in report.rows}
    assert {"Conv", "ConvGradW", "MaxPool", "MaxPoolGrad", "BatchNormGrad"} <= ops, ops
    assert not report.not_compared, report.not_compared
    assert report.max_rel_error < TOLERANCE, report


HALF_TYPES = [torch.bfloat16] + ([torch.float16] if int(torch.__version__.split(".")[0]) >= 2 else [])


@pytest.mark.parametrize("dtype", HALF_TYPES, ids=str)
def test_under_autocast_every_16bit_node_is_within_one_rounding_step_of_its_type(dtype):
    # A 16-bit kernel computes in float32 and rounds once: half a step. Summing or chaining in the
    # 16-bit type itself (a product accumulated in bfloat16) would be many steps off.
    name = str(dtype).replace("torch.", "")
    cases = [(mlp(), torch.randn(16, 20), lambda out: F.cross_entropy(out, torch.arange(16) % 5)),
             (small_cnn(), torch.randn(4, 3, 16, 16), lambda out: F.cross_entropy(out, torch.arange(4)))]
    for model, x, loss_fn in cases:
        with torch.autocast("cpu", dtype=dtype):
            report = onnxtrain.audit(model, x, loss_fn=loss_fn)
        half = [r for r in report.compared if r.computed_in == name]
        assert {"MatMul", "Gemm", "Conv", "ConvGradW"} & {r.op_type for r in half}, report
        assert report.max_rounding_steps(name) <= 1.0, report
        float32 = [r.rel_error for r in report.compared if r.computed_in == "float32"]
        assert float32 and max(float32) < TOLERANCE, report
        assert report.worst(1)[0].rounding_steps == report.max_rounding_steps()


def test_a_call_that_trains_nothing_is_refused():
    model = mlp()
    for p in model.parameters():
        p.requires_grad_(False)
    try:
        onnxtrain.audit(model, torch.randn(2, 20))
    except ValueError as e:
        assert "not a training step" in str(e)
    else:
        raise AssertionError("audit of a call without gradients did not raise")
