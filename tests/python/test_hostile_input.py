"""Hostile input: sizes that overflow, inputs of the wrong dtype, and export-cache entries that are
malicious, damaged or edited, or a cache directory that cannot be used. Each gets a clear error or
goes on correctly; none crashes the process or runs code."""
import logging
import os
import pickle
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn as nn

import onnxtrain
from onnxtrain import _cache, _io

PACKAGE_DIR = os.path.dirname(os.path.dirname(onnxtrain.__file__))


def run_python(code, env=None, timeout=120):
    full_env = dict(os.environ, PYTHONPATH=PACKAGE_DIR, **(env or {}))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full_env, capture_output=True,
                          text=True, timeout=timeout)


# ---- sizes that overflow int64 ----

@pytest.mark.parametrize("then", [".transpose(0, 2).contiguous()", ".sum()", ""])
def test_reshape_whose_size_overflows_is_an_error_naming_the_node(then):
    # 7 * 0x6DB6DB6DB6DB6DB7 wraps around to a small number: it once passed the size check, and
    # then read wild memory, freed a buffer twice, or gave a scalar with no error.
    done = run_python("""
        import torch, torch.nn as nn, onnxtrain

        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.l = nn.Linear(6, 6)

            def forward(self, x, a, b):
                return self.l(x).reshape(a, b, -1)THEN

        m = onnxtrain.ORTModule(M())
        with torch.no_grad():
            m(torch.randn(3, 5, 6), 3, 5)  # exported with Python ints as graph inputs
            try:  # new values run the same graph: torch's tracer never sees them
                m(torch.randn(3, 5, 6), 7, 0x6DB6DB6DB6DB6DB7)
            except onnxtrain.EngineError as e:
                print("ERROR", e)
            else:
                print("NO ERROR")
        print("ALIVE")
    """.replace("THEN", then), env={"ONNXTRAIN_FALLBACK": "0"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ALIVE" in done.stdout
    error = [line for line in done.stdout.splitlines() if line.startswith("ERROR")]
    assert error, done.stdout + done.stderr
    assert "Reshape" in error[0] and ("overflow" in error[0] or "exceeds" in error[0]), error[0]


@pytest.mark.parametrize("name, op", [("conv_rank_mismatch", "Conv"), ("conv_transpose_rank2_x", "ConvTranspose"),
                                      ("conv_transpose_rank2_w", "ConvTranspose"),
                                      ("convinteger_rank_mismatch", "ConvInteger"),
                                      ("qlinearconv_rank_mismatch", "QLinearConv"),
                                      ("layer_norm_rank0", "LayerNormalization")])
def test_models_that_crashed_onnx_shape_inference_are_refused_naming_the_node(name, op):
    path = os.path.join(os.path.dirname(__file__), "..", "fuzz", "regressions", name + ".onnx")
    with open(path, "rb") as f:
        data = f.read()
    for build in (lambda: onnxtrain._C.InferenceSession(data, False, -1),
                  lambda: onnxtrain._C.TrainingSession(data, [])):
        with pytest.raises(onnxtrain.EngineError) as info:  # once a segfault inside libonnx
            build()
        assert op in str(info.value), str(info.value)


# ---- inputs of the wrong dtype ----

@pytest.mark.parametrize("dtype", [torch.float64, torch.int64, torch.float16])
def test_an_input_of_the_wrong_dtype_names_the_input_and_the_expected_dtype(dtype, monkeypatch):
    monkeypatch.setenv("ONNXTRAIN_FALLBACK", "1")  # raised even though fallback is allowed: eager raises too
    model = onnxtrain.ORTModule(nn.Sequential(nn.Linear(4, 3), nn.ReLU()))
    x = torch.ones(2, 4).to(dtype)
    with pytest.raises(onnxtrain.InputDtypeError) as info:
        model(x)
    message = str(info.value)
    assert "argument 0 is " + str(dtype).replace("torch.", "") in message, message
    assert "expects float32" in message, message
    assert model.fallback_reason is None
    assert model(torch.ones(2, 4)).shape == (2, 3)  # the right dtype still runs in the engine
    assert model.engine_runs == 1


def test_a_keyword_input_of_the_wrong_dtype_is_named_by_its_keyword():
    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.l = nn.Linear(4, 3)

        def forward(self, x, *, scale):
            return self.l(x * scale)

    with pytest.raises(onnxtrain.InputDtypeError, match=r"keyword argument 'scale' is float64"):
        onnxtrain.ORTModule(Scaled())(torch.ones(2, 4), scale=torch.ones(2, 4, dtype=torch.float64))


def test_an_integer_input_that_eager_accepts_is_not_blamed_for_an_export_failure(monkeypatch):
    # An index input differs from the parameters' dtype by design; the export fails for another
    # reason (an op torch 1.13 cannot export), and the fallback policy applies as before.
    monkeypatch.setenv("ONNXTRAIN_FALLBACK", "1")

    class Spectral(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(10, 4)

        def forward(self, idx):
            return torch.fft.fft(self.emb(idx)).real

    module = Spectral()
    model = onnxtrain.ORTModule(module)
    idx = torch.tensor([[1, 2, 3]])
    with pytest.warns(RuntimeWarning, match="falling back to PyTorch"):
        out = model(idx)
    assert "fft" in model.fallback_reason
    torch.testing.assert_close(out, module(idx), rtol=0, atol=0)


# ---- the export cache ----

def model_and_input():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)), torch.randn(3, 4)


def entries(directory):
    return sorted(p for p in os.listdir(directory) if p.endswith(".onnxexport"))


def exports_of(module, x, monkeypatch):
    """Output and the number of exports for one call of a fresh ORTModule."""
    from onnxtrain import _engine_calls as ortmodule

    calls = []
    real = ortmodule.export

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(ortmodule, "export", counting)
    out = onnxtrain.ORTModule(module)(x)
    monkeypatch.setattr(ortmodule, "export", real)
    return out, len(calls)


def test_cache_entries_are_plain_data_and_a_new_module_loads_them(tmp_path, monkeypatch):
    monkeypatch.setenv("ONNXTRAIN_CACHE_DIR", str(tmp_path))
    module, x = model_and_input()
    first, n = exports_of(module, x, monkeypatch)
    assert n == 1 and len(entries(tmp_path)) == 1
    data = (tmp_path / entries(tmp_path)[0]).read_bytes()
    assert data.startswith(b"onnxtrain-export-cache ") and b"pickle" not in data
    second, n = exports_of(module, x, monkeypatch)
    assert n == 0
    torch.testing.assert_close(second, first, rtol=0, atol=0)


def test_a_malicious_pickle_in_the_cache_runs_no_code(tmp_path, monkeypatch):
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    monkeypatch.setenv("ONNXTRAIN_CACHE_DIR", str(tmp_path / "cache"))
    module, x = model_and_input()
    key = _cache.key(module, True, ((("T", 0),), ()), _io.call_signature([x]))
    os.makedirs(tmp_path / "cache")
    for suffix in (".onnxexport", ".export"):  # today's entry name and the pickle era's
        (tmp_path / "cache" / (key + suffix)).write_bytes(pickle.dumps(Payload()))
    out, n = exports_of(module, x, monkeypatch)
    assert not marker.exists(), "loading the cache ran code"
    assert n == 1  # the entry was refused and the module exported again
    torch.testing.assert_close(out, module(x), rtol=1e-5, atol=1e-6)
    assert (tmp_path / "cache" / (key + ".onnxexport")).read_bytes().startswith(b"onnxtrain-export-cache ")


def test_a_damaged_entry_is_discarded_and_written_again(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("ONNXTRAIN_CACHE_DIR", str(tmp_path))
    module, x = model_and_input()
    exports_of(module, x, monkeypatch)
    path = tmp_path / entries(tmp_path)[0]
    data = bytearray(path.read_bytes())
    for bit in range(4):  # four flipped bits, as a bad disk or sync would leave
        data[len(data) // 2 + 17 * bit] ^= 1 << bit
    path.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="onnxtrain"):
        out, n = exports_of(module, x, monkeypatch)
    assert n == 1 and any("discarding cache entry" in r.getMessage() for r in caplog.records)
    torch.testing.assert_close(out, module(x), rtol=1e-5, atol=1e-6)
    again, n = exports_of(module, x, monkeypatch)  # rewritten: loads from now on
    assert n == 0
    torch.testing.assert_close(again, out, rtol=0, atol=0)


def test_an_entry_with_edited_onnx_bytes_is_detected(tmp_path, monkeypatch):
    import onnx

    monkeypatch.setenv("ONNXTRAIN_CACHE_DIR", str(tmp_path))
    module, x = model_and_input()
    exports_of(module, x, monkeypatch)
    path = tmp_path / entries(tmp_path)[0]
    data = path.read_bytes()
    newline = data.index(b"\n")
    meta_len = int(data[:newline].split(b" ")[3])
    model = onnx.load_from_string(data[newline + 1 + meta_len:])
    relus = [n for n in model.graph.node if n.op_type == "Relu"]
    assert relus
    for n in relus:
        n.op_type = "Abs"  # a valid model that computes something else
    path.write_bytes(data[:newline + 1 + meta_len] + model.SerializeToString())
    out, n = exports_of(module, x, monkeypatch)
    assert n == 1
    torch.testing.assert_close(out, module(x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("where", ["a file", "under a file", "unwritable parent"])
def test_an_unusable_cache_directory_warns_once_and_training_goes_on(where, tmp_path, monkeypatch, caplog):
    if where == "a file":
        target = tmp_path / "cache"
        target.write_text("not a directory")
    elif where == "under a file":
        (tmp_path / "file").write_text("x")
        target = tmp_path / "file" / "cache"
    else:
        target = "/sys/onnxtrain-cache"  # not even root may create it
    monkeypatch.setenv("ONNXTRAIN_CACHE_DIR", str(target))
    module, x = model_and_input()
    reference = module(x)
    with caplog.at_level(logging.WARNING, logger="onnxtrain"):
        for _ in range(2):
            model = onnxtrain.ORTModule(module)
            out = model(x)
            out.sum().backward()
            torch.testing.assert_close(out, reference, rtol=1e-5, atol=1e-6)
            assert model.engine_runs == 1
    warnings = [r.getMessage() for r in caplog.records if "cannot be used" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert str(target) in warnings[0]


# ---- ORTModule's graph cache ----

def test_graphs_per_python_number_are_bounded_and_stay_right():
    class Baked(nn.Module):
        def __init__(self):
            super().__init__()
            self.l = nn.Linear(4, 4)

        def forward(self, x, n):
            return self.l(x).reshape(-1)[: int(n)]  # the trace bakes n in: one graph per value

    module = Baked()
    model = onnxtrain.ORTModule(module, onnxtrain.DebugOptions(max_cached_graphs=3))
    x = torch.randn(2, 4)
    for n in list(range(1, 9)) + [1, 2]:
        torch.testing.assert_close(model(x, n), module(x, n), rtol=1e-5, atol=1e-6)
        assert len(model._graphs) <= 3
    assert model.fallback_reason is None
