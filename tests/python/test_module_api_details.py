"""ORTModule behaves like the module it wraps, in the details ONNX Runtime's ORTModule API tests
check: forward's signature, state_dict names when nested, attributes set through the wrapper,
string arguments, DebugOptions validation, and a cross-entropy whose ignore_index is traced."""
import copy
import inspect
import pathlib
import pickle
import sys
import warnings

import pytest
import torch
import torch.nn as nn

import onnxtrain
from conftest import assert_close, assert_engine_ran


def x(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


@pytest.fixture
def exports(monkeypatch):
    """Counts the exports ORTModule runs."""
    ortmodule = sys.modules["onnxtrain._engine_calls"]
    calls = []
    real = ortmodule.export

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(ortmodule, "export", counting)
    return calls


# ---- forward's signature ----

class Signatures(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor, bias=None, *rest, scale: float = 2.0, **extra) -> torch.Tensor:
        """Documented forward."""
        out = self.fc(x) * scale
        if bias is not None:
            out = out + bias
        for r in rest:
            out = out + r
        for value in extra.values():
            out = out - value
        return out


def test_forward_has_the_wrapped_modules_signature_and_calls_still_work():
    net = Signatures()
    model = onnxtrain.ORTModule(copy.deepcopy(net))
    assert inspect.signature(model.forward) == inspect.signature(net.forward)
    assert model.forward.__doc__ == net.forward.__doc__
    for clone in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
        assert inspect.signature(clone.forward) == inspect.signature(net.forward)
    a, b = x(5, 4), x(5, 3, seed=1)
    calls = [((a,), {}), ((a, b), {}), ((a,), {"bias": b}), ((a, b, b), {"scale": 0.5}), ((a,), {"other": b})]
    for args, kwargs in calls:
        out = model(*args, **kwargs)
        assert_engine_ran(out)
        assert_close(out, net(*args, **kwargs), f"call with {len(args)} args and keywords {sorted(kwargs)}")


def test_a_call_the_forward_cannot_take_raises_type_error_as_in_eager():
    class Plain(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 3)

        def forward(self, x, y=None):
            return self.fc(x)

    model = onnxtrain.ORTModule(Plain())
    for args, kwargs in [((x(2, 4),), {"z": 1}), ((), {}), ((x(2, 4), None, None), {})]:
        with pytest.raises(TypeError):
            Plain()(*args, **kwargs)
        with pytest.raises(TypeError, match=r"Plain\.forward\(\)"):
            model(*args, **kwargs)
    assert model.fallback_reason is None


# ---- state_dict names, top level and nested ----

class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 6)
        self.bn = nn.BatchNorm1d(6)
        self.fc2 = nn.Linear(6, 3)

    def forward(self, x):
        return self.fc2(torch.relu(self.bn(self.fc1(x))))


class Outer(nn.Module):
    def __init__(self, encoder):
        super().__init__()
        self.encoder = encoder
        self.head = nn.Linear(3, 2)

    def forward(self, x):
        return self.head(self.encoder(x))


class Deeper(nn.Module):
    def __init__(self, encoder):
        super().__init__()
        self.blocks = nn.ModuleList([Outer(encoder)])

    def forward(self, x):
        return self.blocks[0](x)


def names(module):
    return {
        "state_dict": list(module.state_dict()),
        "named_parameters": [n for n, _ in module.named_parameters()],
        "named_buffers": [n for n, _ in module.named_buffers()],
        "named_modules": [n for n, _ in module.named_modules()],
        "parameters": len(list(module.parameters())),
        "buffers": len(list(module.buffers())),
    }


@pytest.mark.parametrize("make", [lambda e: e, Outer, Deeper], ids=["top_level", "nested", "deeper"])
def test_names_are_the_plain_modules(make):
    torch.manual_seed(0)
    plain = make(Encoder())
    wrapped = make(onnxtrain.ORTModule(Encoder()))
    assert names(wrapped) == names(plain)
    assert not any("_original_module" in n for n in wrapped.state_dict())


@pytest.mark.parametrize("make", [lambda e: e, Outer, Deeper], ids=["top_level", "nested", "deeper"])
def test_state_dicts_move_between_plain_and_wrapped_models(make):
    torch.manual_seed(0)
    plain = make(Encoder())
    wrapped = make(onnxtrain.ORTModule(Encoder()))
    batch = x(5, 4)
    wrapped(batch).sum().backward()  # running statistics move, so the buffers differ from plain's
    assert wrapped.load_state_dict(plain.state_dict(), strict=True) == plain.load_state_dict(plain.state_dict())
    for (name, a), b in zip(wrapped.state_dict().items(), plain.state_dict().values()):
        assert torch.equal(a, b), name
    wrapped.eval()
    plain.eval()
    out = wrapped(batch)
    assert_close(out, plain(batch), "output after loading the plain model's state_dict")
    if isinstance(wrapped, onnxtrain.ORTModule):
        assert_engine_ran(out)
    other = make(Encoder()).eval()
    other.load_state_dict(wrapped.state_dict(), strict=True)  # and back into a plain model
    wrapped.load_state_dict(wrapped.state_dict(), strict=True)  # and into itself
    assert_close(other(batch), plain(batch), "plain model after loading the wrapped model's state_dict")


def test_load_errors_name_the_plain_keys():
    torch.manual_seed(0)
    plain, wrapped = Outer(Encoder()), Outer(onnxtrain.ORTModule(Encoder()))
    broken = plain.state_dict()
    del broken["encoder.fc1.weight"]
    broken["encoder.extra"] = torch.zeros(1)
    broken["encoder.fc2.bias"] = torch.zeros(7)
    messages = []
    for model in (plain, wrapped):
        with pytest.raises(RuntimeError) as error:
            model.load_state_dict(broken)
        messages.append(str(error.value))
    assert messages[0] == messages[1]
    assert "encoder.fc1.weight" in messages[1] and "_original_module" not in messages[1]
    del broken["encoder.fc2.bias"]  # strict=False still reports the keys, with the same names
    reports = [m.load_state_dict(broken, strict=False) for m in (plain, wrapped)]
    assert reports[0] == reports[1]
    assert reports[1].missing_keys == ["encoder.fc1.weight", "encoder.fc2.bias"]


# ---- attributes set through the wrapper ----

class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.scale = 2.0
        self.shift = True

    def forward(self, x):
        out = self.fc(x) * self.scale
        return out + 1.0 if self.shift else out


def test_new_attributes_go_to_the_wrapped_module():
    net = Scaled()
    model = onnxtrain.ORTModule(net)
    model.new_attribute = 1
    assert net.new_attribute == 1 and model.new_attribute == 1
    assert "new_attribute" not in model.__dict__
    net.other = "x"
    assert model.other == "x"
    del model.new_attribute
    assert not hasattr(net, "new_attribute")
    runs = model.engine_runs
    model(x(2, 4))
    assert model.engine_runs == runs + 1 and "engine_runs" not in vars(net)  # the wrapper's own stay its own
    model.head = nn.Linear(3, 3)  # a submodule set through the wrapper is registered on the wrapped module
    assert "head.weight" in net.state_dict() and "head.weight" in model.state_dict()


@pytest.mark.parametrize("through", ["wrapper", "wrapped module"])
def test_changing_an_attribute_the_forward_reads_exports_again(through, exports):
    net = Scaled()
    ref = copy.deepcopy(net)
    model = onnxtrain.ORTModule(net)
    target = model if through == "wrapper" else net
    batch = x(5, 4)
    changes = [("scale", 2.0), ("scale", 0.5), ("shift", False), ("scale", -3.0), ("shift", True)]
    for step, (name, value) in enumerate(changes):
        setattr(target, name, value)
        setattr(ref, name, value)
        out = model(batch)
        expected = ref(batch)
        assert_engine_ran(out)
        assert_close(out, expected, f"output after setting {name}={value}")
        out.sum().backward()
        expected.sum().backward()
        assert_close(net.fc.weight.grad, ref.fc.weight.grad, f"weight grad after setting {name}={value}")
    assert len(exports) == len(changes)  # the first call's, then one per change


def test_unchanged_modules_and_mode_switches_reuse_their_graphs(exports):
    net = Scaled()
    model = onnxtrain.ORTModule(net)
    for training in [True, False, True, False]:
        model.train(training)
        net.scale = float("2.0")  # an equal value, a new object: no new export
        model(x(3, 4))
    assert len(exports) == 2


def test_submodule_changes_made_on_the_wrapped_module_are_seen():
    torch.manual_seed(0)
    net = Outer(Encoder())
    ref = copy.deepcopy(net)
    model = onnxtrain.ORTModule(net)
    batch = x(6, 4)
    assert_close(model(batch), ref(batch), "first call")
    for m in (net, ref):
        m.encoder.bn.eval()  # a submodule in eval mode while the root trains
    assert_close(model(batch), ref(batch), "batch norm switched to its running statistics")
    replacement = nn.Linear(3, 2)
    net.head = replacement
    ref.head = copy.deepcopy(replacement)
    assert_close(model(batch), ref(batch), "after replacing a submodule")


# ---- string arguments ----

class Contract(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x, equation):
        h = self.fc(x)
        return torch.einsum(equation, h, h)


def test_strings_warn_once_and_each_value_keys_its_own_export(exports):
    net = Contract()
    model = onnxtrain.ORTModule(copy.deepcopy(net))
    batch = x(3, 4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = model(batch, "ij,ij->i")
        second = model(batch, "ij,kj->ik")
        again = model(batch, "ij,ij->i")
    messages = [str(w.message) for w in caught if "str" in str(w.message)]
    assert len(messages) == 1, messages
    assert "argument 1" in messages[0] and "distinct string value exports" in messages[0]
    assert first.shape == (3,) and second.shape == (3, 3)
    for out, equation in [(first, "ij,ij->i"), (second, "ij,kj->ik"), (again, "ij,ij->i")]:
        assert_engine_ran(out)
        assert_close(out, net(batch, equation), equation)
    assert len(exports) == 2
    with warnings.catch_warnings(record=True) as caught:  # another module warns for itself
        warnings.simplefilter("always")
        onnxtrain.ORTModule(Contract())(batch, equation="ij,ij->i")
    assert any("keyword argument 'equation'" in str(w.message) for w in caught)


# ---- DebugOptions ----

BAD_OPTIONS = [
    ({"log_level": "INFO"}, TypeError, "log_level"),
    ({"log_level": 1}, TypeError, "log_level"),
    ({"save_onnx": "yes"}, TypeError, "save_onnx"),
    ({"onnx_prefix": 23}, TypeError, "onnx_prefix"),
    ({"onnx_prefix": "a/b"}, ValueError, "onnx_prefix"),
    ({"save_onnx": True}, ValueError, "onnx_prefix"),
    ({"save_path": 5}, TypeError, "save_path"),
    ({"save_path": "/no/such/directory"}, ValueError, "save_path"),
    ({"save_onnx": True, "onnx_prefix": "m", "save_path": "/no/such/directory"}, ValueError, "save_path"),
    ({"check_finite": 1}, TypeError, "check_finite"),
    ({"profile_path": 1.5}, TypeError, "profile_path"),
    ({"profile_path": "/no/such/directory/trace.json"}, ValueError, "profile_path"),
    ({"optimization_level": -1}, ValueError, "optimization_level"),
    ({"optimization_level": "1"}, TypeError, "optimization_level"),
    ({"plan_cache_mb": -1}, ValueError, "plan_cache_mb"),
    ({"plan_cache_mb": 1.5}, TypeError, "plan_cache_mb"),
    ({"buffer_cache_mb": -4}, ValueError, "buffer_cache_mb"),
    ({"buffer_cache_mb": True}, TypeError, "buffer_cache_mb"),
    ({"max_cached_graphs": 0}, ValueError, "max_cached_graphs"),
    ({"max_cached_graphs": 2.0}, TypeError, "max_cached_graphs"),
    ({"max_cached_graphs": None}, TypeError, "max_cached_graphs"),
    ({"memory_optimization": "fast"}, ValueError, "memory_optimization"),
    ({"memory_optimization": 1}, TypeError, "memory_optimization"),
    ({"eager_warmup": 1}, TypeError, "eager_warmup"),
    ({"eager_warmup": "off"}, TypeError, "eager_warmup"),
]


@pytest.mark.parametrize("options,error,field", BAD_OPTIONS,
                         ids=[f"{i}-{case[2]}" for i, case in enumerate(BAD_OPTIONS)])
def test_debug_options_refuse_bad_values_naming_the_field(options, error, field):
    with pytest.raises(error, match=field):
        onnxtrain.DebugOptions(**options)


def test_every_debug_option_is_checked_also_when_set_later(tmp_path):
    import dataclasses

    fields = {f.name for f in dataclasses.fields(onnxtrain.DebugOptions)}
    assert fields == {options_field for _, _, options_field in BAD_OPTIONS}
    good = onnxtrain.DebugOptions(log_level=onnxtrain.LogLevel.ERROR, save_onnx=True, onnx_prefix="m",
                                  save_path=pathlib.Path(tmp_path), profile_path="", optimization_level=0,
                                  plan_cache_mb=None, buffer_cache_mb=0, max_cached_graphs=1)
    assert good.save_path == str(tmp_path)
    with pytest.raises(TypeError, match="onnx_prefix"):
        good.onnx_prefix = 23
    with pytest.raises(TypeError, match="debug_options"):
        onnxtrain.ORTModule(nn.Linear(2, 2), debug_options={"log_level": onnxtrain.LogLevel.INFO})


# ---- cross-entropy with an ignore_index taken from a traced size ----

class IgnoreFromSize(nn.Module):
    def __init__(self, reduction, weighted, smoothing, offset):
        super().__init__()
        self.fc = nn.Linear(4, 5)
        self.register_buffer("class_weight", torch.linspace(0.5, 2.0, 5) if weighted else None)
        self.reduction, self.smoothing, self.offset = reduction, smoothing, offset

    def forward(self, x, target):
        out = self.fc(x)
        loss = nn.CrossEntropyLoss(weight=self.class_weight, ignore_index=out.size(1) - self.offset,
                                   reduction=self.reduction, label_smoothing=self.smoothing)
        return loss(out, target)


@pytest.mark.parametrize("reduction,weighted,smoothing,offset", [
    ("mean", False, 0.0, 0), ("mean", True, 0.0, 1), ("sum", True, 0.0, 0), ("none", False, 0.0, 1),
    ("mean", False, 0.1, 1), ("mean", True, 0.2, 1)])
def test_cross_entropy_with_a_traced_ignore_index_matches_eager(reduction, weighted, smoothing, offset):
    torch.manual_seed(0)
    net = IgnoreFromSize(reduction, weighted, smoothing, offset)
    ref = copy.deepcopy(net)
    model = onnxtrain.ORTModule(net)
    ignored = 5 - offset  # out.size(1) - offset: a class index, or one past the last
    for seed, target in enumerate([torch.tensor([0, ignored, 3, ignored, 1, 4 - offset]),
                                   torch.tensor([ignored, 2, 0, 1])]):
        inputs = x(len(target), 4, seed=seed).requires_grad_()
        ref_inputs = inputs.detach().clone().requires_grad_()
        loss, expected = model(inputs, target), ref(ref_inputs, target)
        assert_engine_ran(loss)
        assert_close(loss, expected, "loss")
        loss.sum().backward()
        expected.sum().backward()
        assert_close(inputs.grad, ref_inputs.grad, "input grad")
        assert_close(net.fc.weight.grad, ref.fc.weight.grad, "weight grad")
        assert_close(net.fc.bias.grad, ref.fc.bias.grad, "bias grad")
