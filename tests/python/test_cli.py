"""The `onnxtrain` command-line tool (src/cli/), run as a subprocess: each subcommand, each error
(one line on stderr, non-zero exit), parity with PyTorch eager after 3 epochs of SGD-momentum and
AdamW, and a bit-exact --resume. ONNXTRAIN_CLI names the binary (default: build/onnxtrain)."""
import json
import os
import subprocess

import numpy as np
import onnx
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from conftest import export_onnx_file
from onnx import numpy_helper

REPO = os.path.join(os.path.dirname(__file__), "..", "..")
CLI = os.environ.get("ONNXTRAIN_CLI", os.path.join(REPO, "build", "onnxtrain"))
PARITY_RTOL, PARITY_ATOL = 1e-5, 1e-6
N_TRAIN, N_FEATURES, N_CLASSES, BATCH = 96, 8, 4, 16


@pytest.fixture(scope="module", autouse=True)
def cli_binary():
    if not os.access(CLI, os.X_OK):
        pytest.fail(f"the onnxtrain CLI is not built at {CLI} (build the onnxtrain_cli target, or set ONNXTRAIN_CLI)")


def run(*args, check=True):
    result = subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, timeout=300)
    if check and result.returncode != 0:
        raise AssertionError(f"onnxtrain {' '.join(map(str, args))} failed ({result.returncode}):\n{result.stderr}")
    return result


def run_failing(*args, expect, status=None):
    """Runs a command that must fail: a non-zero exit and exactly one line on stderr naming `expect`."""
    result = run(*args, check=False)
    assert result.returncode != 0, f"onnxtrain {' '.join(map(str, args))} succeeded:\n{result.stdout}"
    if status is not None:
        assert result.returncode == status, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got:\n{result.stderr}"
    assert lines[0].startswith("onnxtrain: error: "), lines[0]
    assert expect.lower() in lines[0].lower(), f"{expect!r} not in: {lines[0]}"
    return lines[0]


def make_mlp(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(N_FEATURES, 16), nn.ReLU(), nn.Linear(16, N_CLASSES))


def export(model, path, n_features=N_FEATURES):
    export_onnx_file(model, torch.zeros(2, n_features), str(path), export_params=True, input_names=["x"],
                      output_names=["out"], dynamic_axes={"x": {0: "N"}, "out": {0: "N"}},
                      do_constant_folding=False, opset_version=14)
    return path


def make_data(n=N_TRAIN, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, N_FEATURES, generator=g)
    y = (x[:, :N_CLASSES] * torch.arange(1, N_CLASSES + 1)).argmax(dim=1)
    return x, y


def save_npz(path, x, y, compressed=False, **extra):
    (np.savez_compressed if compressed else np.savez)(path, x=np.asarray(x), y=np.asarray(y), **extra)
    return path


def onnx_weights(path):
    return {t.name: numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer}


def state_of(model):
    return {k: v.detach().numpy() for k, v in model.state_dict().items()}


@pytest.fixture
def setup(tmp_path):
    """A torch MLP, its ONNX export, training data and a copy of its initial weights."""
    model = make_mlp()
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    onnx_path = export(model, tmp_path / "mlp.onnx")
    x, y = make_data()
    data = save_npz(tmp_path / "train.npz", x.numpy(), y.numpy())
    return dict(tmp=tmp_path, onnx=onnx_path, data=data, x=x, y=y, initial=initial)


def train_eager(initial, x, y, optimizer, lr, epochs, orders=None, **hyper):
    model = make_mlp()
    model.load_state_dict(initial)
    if optimizer == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=hyper.get("momentum", 0.9),
                              weight_decay=hyper.get("weight_decay", 0.0))
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=hyper.get("weight_decay", 0.0))
    for epoch in range(epochs):
        order = orders[epoch] if orders is not None else list(range(len(x)))
        for first in range(0, len(x), BATCH):
            idx = torch.tensor(order[first:first + BATCH])
            loss = F.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    return state_of(model)


def assert_weights_match(exported, expected):
    assert set(expected) <= set(exported), f"exported initializers {sorted(exported)} lack {sorted(expected)}"
    for name, value in expected.items():
        np.testing.assert_allclose(exported[name], value, rtol=PARITY_RTOL, atol=PARITY_ATOL, err_msg=name)


def splitmix_orders(seed, n, epochs):
    """The CLI's --shuffle order (src/cli/data.h): splitmix64, Fisher-Yates from the end, j = r % (i + 1)."""
    mask = (1 << 64) - 1
    state = seed
    orders = []
    for _ in range(epochs):
        order = list(range(n))
        for i in range(n - 1, 0, -1):
            state = (state + 0x9E3779B97F4A7C15) & mask
            z = state
            z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
            z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
            z ^= z >> 31
            j = z % (i + 1)
            order[i], order[j] = order[j], order[i]
        orders.append(order)
    return orders


# --- each subcommand ------------------------------------------------------------------------------

def test_help_lists_the_subcommands():
    result = run("--help")
    for sub in ("artifacts", "train", "eval", "export", "audit"):
        assert sub in result.stdout
    assert "--resume" in run("train", "--help").stdout


def test_artifacts_writes_the_models_and_checkpoint(setup):
    out = setup["tmp"] / "art"
    result = run("artifacts", setup["onnx"], "--out", out, "--loss", "cross_entropy", "--optimizer", "sgd")
    assert str(out) in result.stdout
    for name in ("training_model.onnx", "eval_model.onnx", "optimizer_model.onnx", "checkpoint"):
        assert (out / name).exists(), name
    for name in ("training_model.onnx", "eval_model.onnx", "optimizer_model.onnx"):
        onnx.checker.check_model(onnx.load(str(out / name)))


def test_train_eval_export(setup):
    out = setup["tmp"] / "art"
    run("artifacts", setup["onnx"], "--out", out, "--optimizer", "adamw", "--lr", "0.01")
    before = json.loads(run("eval", out, "--data", setup["data"], "--json").stdout)
    result = run("train", out, "--data", setup["data"], "--epochs", 2, "--batch-size", BATCH, "--threads", 1)
    assert "epoch 1/2: mean loss" in result.stdout and "epoch 2/2: mean loss" in result.stdout
    bar = result.stderr.splitlines()
    assert len(bar) == 2 and bar[0].startswith("epoch 1/2 [") and "examples/s" in bar[0] and "loss" in bar[0], bar
    assert (out / "trained_checkpoint").exists()

    text = run("eval", out, "--data", setup["data"]).stdout
    assert "loss " in text and "accuracy " in text
    after = json.loads(run("eval", out, "--data", setup["data"], "--json").stdout)
    assert after["examples"] == N_TRAIN and 0 <= after["accuracy"] <= 1
    assert after["loss"] < before["loss"]

    # The exported model passes the checker and computes what the engine evaluated.
    trained = setup["tmp"] / "trained.onnx"
    run("export", out, "--out", trained)
    onnx.checker.check_model(onnx.load(str(trained)))
    weights = onnx_weights(trained)
    model = make_mlp()
    model.load_state_dict({k: torch.from_numpy(weights[k].copy()) for k in model.state_dict()})
    with torch.no_grad():
        logits = model(setup["x"])
    assert F.cross_entropy(logits, setup["y"]).item() == pytest.approx(after["loss"], rel=1e-5)
    accuracy = (logits.argmax(dim=1) == setup["y"]).float().mean().item()
    assert accuracy == pytest.approx(after["accuracy"], abs=1e-6)  # torch averages in float32


def test_eval_before_training_reads_the_initial_checkpoint(setup):
    out = setup["tmp"] / "art"
    run("artifacts", setup["onnx"], "--out", out)
    evaluated = json.loads(run("eval", out, "--data", setup["data"], "--batch-size", 40, "--json").stdout)
    model = make_mlp()
    model.load_state_dict(setup["initial"])
    with torch.no_grad():
        expected = F.cross_entropy(model(setup["x"]), setup["y"]).item()
    assert evaluated["loss"] == pytest.approx(expected, rel=1e-5)  # batches of 40, 40, 16, weighted


def test_mse_regression_has_no_accuracy(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(N_FEATURES, 8), nn.Tanh(), nn.Linear(8, 2))
    onnx_path = export(model, tmp_path / "reg.onnx")
    x, _ = make_data()
    y = torch.stack([x[:, 0] - x[:, 1], x[:, 2] * 0.5], dim=1)
    data = save_npz(tmp_path / "reg.npz", x.numpy(), y.numpy())
    out = tmp_path / "art"
    run("artifacts", onnx_path, "--out", out, "--loss", "mse", "--optimizer", "sgd", "--lr", "0.05")
    before = json.loads(run("eval", out, "--data", data, "--json").stdout)
    run("train", out, "--data", data, "--epochs", 3, "--threads", 1)
    after = json.loads(run("eval", out, "--data", data, "--json").stdout)
    assert after["accuracy"] is None and "accuracy" not in run("eval", out, "--data", data).stdout
    assert after["loss"] < before["loss"]


def test_frozen_parameters_do_not_change(setup):
    out = setup["tmp"] / "art"
    run("artifacts", setup["onnx"], "--out", out, "--frozen", "0.weight", "0.bias", "--optimizer", "sgd", "--lr", "0.1")
    run("train", out, "--data", setup["data"], "--threads", 1)
    run("export", out, "--out", setup["tmp"] / "t.onnx")
    weights = onnx_weights(setup["tmp"] / "t.onnx")
    np.testing.assert_array_equal(weights["0.weight"], setup["initial"]["0.weight"].numpy())
    np.testing.assert_array_equal(weights["0.bias"], setup["initial"]["0.bias"].numpy())
    assert not np.array_equal(weights["2.weight"], setup["initial"]["2.weight"].numpy())


def test_npz_dtypes_and_compression_feed_the_same_arrays(setup):
    """float64 x and int32 y in a deflated .npz train exactly as float32 / int64 in a stored one."""
    wide = save_npz(setup["tmp"] / "wide.npz", setup["x"].numpy().astype(np.float64),
                    setup["y"].numpy().astype(np.int32), compressed=True)
    exported = []
    for i, data in enumerate((setup["data"], wide)):
        out = setup["tmp"] / f"art{i}"
        run("artifacts", setup["onnx"], "--out", out, "--optimizer", "sgd", "--lr", "0.1")
        run("train", out, "--data", data, "--threads", 1)
        run("export", out, "--out", setup["tmp"] / f"t{i}.onnx")
        exported.append(onnx_weights(setup["tmp"] / f"t{i}.onnx"))
    for name in exported[0]:
        np.testing.assert_array_equal(exported[0][name], exported[1][name], err_msg=name)


# --- parity with PyTorch eager and bit-exact resume -----------------------------------------------

@pytest.mark.parametrize("optimizer,lr,hyper", [
    ("sgd", 0.1, {"momentum": 0.9}),
    ("sgd", 0.05, {"momentum": 0.5, "weight_decay": 0.01}),
    ("adamw", 0.01, {"weight_decay": 0.01}),
])
def test_three_epochs_match_pytorch_eager(setup, optimizer, lr, hyper):
    out = setup["tmp"] / "art"
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in hyper.items()]
    run("artifacts", setup["onnx"], "--out", out, "--optimizer", optimizer, "--lr", lr, *flags)
    run("train", out, "--data", setup["data"], "--epochs", 3, "--batch-size", BATCH, "--threads", 1)
    run("export", out, "--out", setup["tmp"] / "trained.onnx")
    expected = train_eager(setup["initial"], setup["x"], setup["y"], optimizer, lr, 3, **hyper)
    assert_weights_match(onnx_weights(setup["tmp"] / "trained.onnx"), expected)


def test_shuffled_epochs_match_pytorch_in_the_same_order(setup):
    out = setup["tmp"] / "art"
    run("artifacts", setup["onnx"], "--out", out, "--optimizer", "sgd", "--lr", 0.1)
    run("train", out, "--data", setup["data"], "--epochs", 3, "--batch-size", BATCH, "--shuffle", "--seed", 7,
        "--threads", 1)
    run("export", out, "--out", setup["tmp"] / "trained.onnx")
    orders = splitmix_orders(7, N_TRAIN, 3)
    assert orders[0] != list(range(N_TRAIN)) and orders[0] != orders[1]
    expected = train_eager(setup["initial"], setup["x"], setup["y"], "sgd", 0.1, 3, orders=orders)
    assert_weights_match(onnx_weights(setup["tmp"] / "trained.onnx"), expected)


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_resume_is_bit_exact(setup, optimizer):
    """3 epochs in one run == 2 epochs, then --resume for 1, bit for bit (shuffled, so the data
    order's RNG state must travel in the checkpoint)."""
    exported = []
    for name, runs in (("straight", [["--epochs", 3]]), ("resumed", [["--epochs", 2], ["--epochs", 1, "--resume"]])):
        out = setup["tmp"] / name
        run("artifacts", setup["onnx"], "--out", out, "--optimizer", optimizer, "--lr", 0.01)
        for extra in runs:
            result = run("train", out, "--data", setup["data"], "--batch-size", 24, "--shuffle", "--seed", 5,
                         "--threads", 1, *extra)
        assert "epoch 3/3" in result.stdout, result.stdout
        run("export", out, "--out", setup["tmp"] / f"{name}.onnx")
        exported.append(onnx_weights(setup["tmp"] / f"{name}.onnx"))
    for name in exported[0]:
        assert exported[0][name].tobytes() == exported[1][name].tobytes(), name
    initial = onnx_weights(setup["onnx"])
    assert any(not np.array_equal(exported[0][name], initial[name]) for name in initial)  # it trained


# --- errors: one line, non-zero exit ----------------------------------------------------------------

@pytest.fixture
def artifacts(setup):
    out = setup["tmp"] / "art"
    run("artifacts", setup["onnx"], "--out", out)
    return out


def test_error_missing_model_file(tmp_path):
    run_failing("artifacts", tmp_path / "nope.onnx", "--out", tmp_path / "a", expect="nope.onnx does not exist")


def test_error_model_file_is_not_onnx(tmp_path):
    (tmp_path / "bad.onnx").write_bytes(b"not a protobuf at all \x00\xff")
    run_failing("artifacts", tmp_path / "bad.onnx", "--out", tmp_path / "a", expect="bad.onnx")


def test_error_unknown_parameter_name(setup):
    line = run_failing("artifacts", setup["onnx"], "--out", setup["tmp"] / "a", "--frozen", "fc9.weight",
                       expect="unknown parameter 'fc9.weight'")
    assert "0.weight" in line  # it lists the model's parameters
    run_failing("artifacts", setup["onnx"], "--out", setup["tmp"] / "a", "--trainable", "nope", expect="'nope'")


def test_error_frozen_and_trainable_together(setup):
    run_failing("artifacts", setup["onnx"], "--out", setup["tmp"] / "a", "--frozen", "0.weight", "--trainable",
                "2.weight", expect="not both")


@pytest.mark.parametrize("args,expect", [
    (["artifacts", "m.onnx", "--out", "a", "--loss", "hinge"], "hinge"),
    (["artifacts", "m.onnx", "--out", "a", "--optimizer", "lbfgs"], "lbfgs"),
    (["artifacts", "m.onnx"], "--out"),
    (["train", "dir"], "--data"),
    (["train", "dir", "--data", "d.npz", "--epochs", "three"], "three"),
    (["train", "dir", "--data", "d.npz", "--bogus"], "--bogus"),
    (["fly"], "fly"),
    ([], "subcommand"),
])
def test_error_bad_command_line(args, expect):
    run_failing(*args, expect=expect, status=2)


def test_error_missing_artifacts_dir(tmp_path, setup):
    for sub in (["train"], ["eval"]):
        run_failing(*sub, tmp_path / "none", "--data", setup["data"], expect="artifacts directory")
    run_failing("export", tmp_path / "none", "--out", tmp_path / "t.onnx", expect="artifacts directory")


def test_error_missing_data_file(artifacts, tmp_path):
    run_failing("train", artifacts, "--data", tmp_path / "missing.npz", expect="missing.npz does not exist")
    run_failing("eval", artifacts, "--data", tmp_path / "missing.npz", expect="missing.npz does not exist")


def test_error_missing_x_or_y(artifacts, setup):
    x = setup["x"].numpy()
    np.savez(setup["tmp"] / "no_y.npz", x=x, labels=setup["y"].numpy())
    line = run_failing("train", artifacts, "--data", setup["tmp"] / "no_y.npz", expect="no array 'y'")
    assert "labels" in line
    np.savez(setup["tmp"] / "no_x.npz", y=setup["y"].numpy())
    run_failing("eval", artifacts, "--data", setup["tmp"] / "no_x.npz", expect="no array 'x'")


def test_error_wrong_shape(artifacts, setup):
    save_npz(setup["tmp"] / "wide.npz", np.zeros((10, N_FEATURES + 3), np.float32), np.zeros(10, np.int64))
    run_failing("train", artifacts, "--data", setup["tmp"] / "wide.npz", expect="x")
    save_npz(setup["tmp"] / "short.npz", np.zeros((10, N_FEATURES), np.float32), np.zeros(9, np.int64))
    run_failing("train", artifacts, "--data", setup["tmp"] / "short.npz", expect="x has 10 examples")


def test_error_wrong_target_type(artifacts, setup):
    save_npz(setup["tmp"] / "float_y.npz", setup["x"].numpy(), setup["y"].numpy().astype(np.float32))
    run_failing("train", artifacts, "--data", setup["tmp"] / "float_y.npz", expect="y")


@pytest.mark.parametrize("kind,expect", [
    ("fortran", "fortran order"),
    ("big_endian", "big-endian"),
    ("float16", "'<f2'"),
    ("complex", "'<c8'"),
    ("not_zip", "not a readable .npz"),
    ("not_npy", "not a .npy array"),
    ("truncated", "data bytes"),
])
def test_error_unreadable_npz(artifacts, setup, kind, expect):
    path = setup["tmp"] / f"{kind}.npz"
    x, y = setup["x"].numpy(), setup["y"].numpy()
    if kind == "fortran":
        save_npz(path, np.asfortranarray(x), y)
    elif kind == "big_endian":
        save_npz(path, x.astype(">f4"), y)
    elif kind == "float16":
        save_npz(path, x.astype(np.float16), y)
    elif kind == "complex":
        save_npz(path, x.astype(np.complex64), y)
    elif kind == "not_zip":
        path.write_bytes(b"definitely not a zip file")
    else:
        import zipfile
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("y.npy", _npy_bytes(y))
            z.writestr("x.npy", b"garbage" if kind == "not_npy" else _npy_bytes(x)[:-8])
    run_failing("train", artifacts, "--data", path, expect=expect)


def _npy_bytes(array):
    import io
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def test_error_resume_without_checkpoint(artifacts, setup):
    run_failing("train", artifacts, "--data", setup["data"], "--resume", expect="no checkpoint to resume")


def test_error_bad_values(artifacts, setup):
    run_failing("train", artifacts, "--data", setup["data"], "--batch-size", 0, expect="--batch-size")
    run_failing("train", artifacts, "--data", setup["data"], "--epochs", 0, expect="--epochs")
    run_failing("eval", artifacts, "--data", setup["data"], "--checkpoint", setup["tmp"] / "none",
                expect="checkpoint")
    run_failing("train", artifacts, "--data", setup["data"], "--drop-last", "--batch-size", 1000, expect="no batch")


def test_audit_prints_the_worst_nodes_and_writes_every_node_as_json(setup):
    art = setup["tmp"] / "art"
    run("artifacts", setup["onnx"], "--out", art, "--optimizer", "sgd")
    before = (art / "checkpoint").read_bytes()
    report = setup["tmp"] / "audit.json"
    result = run("audit", art, "--data", setup["data"], "--batch-size", 8, "--top", 3, "--json", report)
    lines = result.stdout.splitlines()
    assert "compared with their float64 twin" in lines[0], result.stdout
    assert lines[1].split()[:3] == ["rel_error", "op_type", "node"], result.stdout
    assert len(lines) == 2 + 3, result.stdout  # --top 3, and every node of an MLP has a twin
    rows = json.loads(report.read_text())
    ops = {r["op_type"] for r in rows}
    assert {"Gemm", "Relu"} <= ops, ops
    assert all(r["rel_error"] is not None and r["rel_error"] < 1e-5 for r in rows), rows
    assert max(r["rel_error"] for r in rows) == pytest.approx(float(lines[2].split()[0]), rel=0.01)
    assert (art / "checkpoint").read_bytes() == before  # the audit trains nothing
    assert not (art / "trained_checkpoint").exists()


def test_audit_errors_are_one_line(setup):
    run_failing("audit", setup["tmp"] / "missing", "--data", setup["data"], expect="does not exist")
    art = setup["tmp"] / "art"
    run("artifacts", setup["onnx"], "--out", art)
    run_failing("audit", art, "--data", setup["data"], "--batch-size", 0, expect="--batch-size")
