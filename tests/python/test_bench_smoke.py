"""A tiny run of the benchmark harness, so that bench/run cannot rot. Timings are not checked."""
import json
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def test_bench_runs_one_model_in_rounds_of_fresh_processes(tmp_path):
    cmd = [sys.executable, os.path.join(ROOT, "bench", "bench.py"), "--models", "demo_mlp", "--steps", "2",
           "--warmup", "2", "--rounds", "1", "--agreement-steps", "3", "--quick", "--out", str(tmp_path),
           "--contenders", "eager-current,onnxtrain-current,onnxtrain-step-current"]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.environ.get("ONNXTRAIN_PYTHONPATH", os.path.join(ROOT, "python"))
    env["ONNXTRAIN_EAGER_WARMUP"] = "1"  # as users run: the timed steps must still be the engine's alone
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((tmp_path / "bench.json").read_text())
    assert report["meta"]["peaks"]["1"] > 0
    (row,) = report["rows"]
    assert row["model"] == "demo_mlp" and row["flops"] > 0 and row["failed"] == {}
    ours = ("onnxtrain-current", "onnxtrain-step-current")
    for key in [f"{c}@{t}" for c in ("eager-current",) + ours for t in (1, 2)]:
        step = row["step"][key]
        assert step["median"] > 0 and step["min"] <= step["median"] <= step["max"], key
        assert row["pct_limit"][key] > 0, key
    ratios = [f"{c}@{t}" for c in ours for t in (1, 2)]
    for key in ratios:
        assert row["ratio"][key]["median"] > 0, key
    assert set(row["ratio"]) == set(ratios)  # the peers get no ratio
    # TrainStep's contender ran its timed steps as one engine call each (its first step proves the graph).
    assert row["evidence"]["onnxtrain-step-current"]["whole_steps"] >= 2
    for c in ("eager-current",) + ours:
        assert row["first"][c] > 0 and row["rss"][c] > 0, c
        for t in (1, 2):
            start = row["start"][f"{c}@{t}"]
            assert start["first"] > 0 and start["second"] > 0 and start["steady"] > 0, (c, t)
    for c in ours:  # the engine's processes forked an export child, whose peak RSS is reported
        assert row["start"][f"{c}@1"]["export_child_rss_mb"] > 0, c
        # Dropout 0 and no BatchNorm: both stay within float32 rounding of the float64 run.
        assert row["loss_diff"][c] < 1e-5, c
    table = (tmp_path / "bench.md").read_text()
    # the step tables at 1 and 2 threads, the first-step table, and the start tables at 1 and 2 threads
    assert table.count("| demo: digits MLP 64-256-128-10 |") == 5 and "Targets missed" in table
    assert (tmp_path / "bench.png").stat().st_size > 1000


def test_a_contender_that_cannot_run_is_a_numbered_failure(tmp_path):
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import bench
    row = dict(model="demo_mlp", title="demo", batch=64, failed={"eager-2.15": "ImportError: no torch"},
               step={"onnxtrain-current@1": dict(median=1e-3, min=1e-3, max=1e-3)}, pct_limit={}, ratio={},
               first={"onnxtrain-current": 0.1}, rss={"onnxtrain-current": 100}, evidence={}, loss_diff={})
    table = bench.markdown([row], dict(date="d", machine="m", peaks={1: 1, 2: 1}, rounds=1,
                                       contenders=["eager-2.15", "onnxtrain-current"]))
    assert "failed [1]" in table and "1. demo, eager-2.15: ImportError: no torch" in table


def test_bench_check_fails_when_a_target_is_missed():
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import bench
    row = dict(model="mlp_small", failed={}, fastest_peer={1: "eager-1.13", 2: "compile-2.15"},
               ratio={"onnxtrain-1.13@1": dict(median=0.95), "onnxtrain-1.13@2": dict(median=0.5)},
               first={"onnxtrain-1.13": 0.2, "eager-1.13": 0.1, "compile-2.15": 3.0},
               rss={"onnxtrain-1.13": 100, "eager-1.13": 200, "compile-2.15": 300},
               loss_diff={"eager-1.13": 1e-3, "onnxtrain-1.13": 2e-3}, agreement_steps=10)
    missed = bench.misses([row])
    assert any("mlp_small onnxtrain-1.13 1t: step 0.95" in m for m in missed), missed
    assert any("first step 0.20 s > 1.5 x eager-1.13's 0.10 s" in m for m in missed), missed
    row["ratio"]["onnxtrain-1.13@1"]["median"] = 0.6
    row["first"]["onnxtrain-1.13"] = 0.15
    assert bench.misses([row]) == []  # losses noisier than eager's, but within its float32 drift
    row["loss_diff"]["onnxtrain-1.13"] = 1e-2
    assert any("mlp_small onnxtrain-1.13: losses 1.0e-02 from float64" in m for m in bench.misses([row]))
    row["loss_diff"]["onnxtrain-1.13"] = 2e-3
    row["rss"]["onnxtrain-1.13"] = 250
    assert any("peak RSS 250 MB > eager-1.13's 200 MB" in m for m in bench.misses([row]))
    row["rss"]["onnxtrain-1.13"] = 100
    row["failed"]["onnxtrain-2.15"] = "RuntimeError: x"
    assert any("mlp_small onnxtrain-2.15: failed" in m for m in bench.misses([row]))


def test_bench_check_judges_the_start_against_eager_on_the_same_torch():
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import bench
    start = {"eager-2.15@1": dict(first=0.5, second=0.3, to_20th=6.0, steady=0.3),
             "onnxtrain-2.15@1": dict(first=0.6, second=0.3, to_20th=5.0, steady=0.25, export_child_rss_mb=300),
             "eager-2.15@2": dict(first=0.4, second=0.2, to_20th=4.0, steady=0.2),
             "onnxtrain-2.15@2": dict(first=0.5, second=0.17, to_20th=3.5, steady=0.15)}
    row = dict(model="resnet", failed={}, fastest_peer={}, ratio={}, first={"eager-2.15": 0.5, "onnxtrain-2.15": 0.6},
               rss={"eager-2.15": 400, "onnxtrain-2.15": 390}, start=start)
    assert bench.misses([row]) == []
    start["onnxtrain-2.15@2"]["to_20th"] = 4.5
    start["onnxtrain-2.15@1"]["second"] = 0.4
    start["onnxtrain-2.15@1"]["export_child_rss_mb"] = 500
    missed = bench.misses([row])
    assert "resnet onnxtrain-2.15 2t: 20th step at 4.50 s > eager's 4.00 s" in missed, missed
    assert "resnet onnxtrain-2.15 1t: second step 0.400 s > 1.2 x its steady 0.250 s" in missed, missed
    assert "resnet onnxtrain-2.15: largest child process's peak RSS 500 MB > eager's 400 MB" in missed, missed
    assert len(missed) == 3, missed


def test_the_memory_tradeoff_report_runs_and_recompute_stashes_less(tmp_path):
    cmd = [sys.executable, os.path.join(ROOT, "bench", "memory_optimization.py"), "--model", "transformer", "--pairs",
           "1", "--warmup", "1", "--steps", "1", "--threads-list", "1", "--out", str(tmp_path)]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.environ.get("ONNXTRAIN_PYTHONPATH", os.path.join(ROOT, "python"))
    env["ONNXTRAIN_EAGER_WARMUP"] = "1"  # as users run: the timed steps must still be the engine's alone
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    (pair,) = json.loads((tmp_path / "report.json").read_text())["results"]["1"]
    assert pair["recompute"]["stashed_bytes"] < pair["none"]["stashed_bytes"]
    assert pair["recompute"]["recomputed_bytes"] > 0 and pair["none"]["recomputed_bytes"] == 0
    assert "| 1 | recompute |" in (tmp_path / "report.md").read_text()


def test_the_readme_table_is_assembled_from_stored_rows_of_this_machine(tmp_path, monkeypatch):
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import bench
    import models
    monkeypatch.setattr(bench, "ROWS_DIR", str(tmp_path))
    names = ["eager-1.13", "onnxtrain-1.13"]
    row = dict(model="cnn", title="the cnn", batch=8, failed={}, step={"eager-1.13@1": dict(median=2e-3, min=2e-3, max=2e-3)},
               pct_limit={}, ratio={"onnxtrain-1.13@1": dict(median=1.5, min=1.4, max=1.6)}, first={}, rss={},
               evidence={}, loss_diff={}, fastest_peer={1: "eager-1.13", 2: "eager-1.13"})
    meta = dict(date="2026-12-03", machine="this box", peaks={1: 100.0, 2: 190.0}, rounds=3, contenders=names)
    bench.store_rows([row], meta)
    other = dict(row, model="demo_mlp", title="the demo")
    bench.store_rows([other], dict(meta, machine="another box"))  # not comparable: listed as missing
    table = bench.assembled_table("this box", names)
    assert "| the cnn | 8 | 2.00 |" in table and "the demo" not in table
    assert "sgemm peak 100 GFLOP/s at 1 thread, 190 at 2" in table
    assert "cnn onnxtrain-1.13 1t: step 1.50 x eager-1.13's" in table  # a target read from the stored row
    missing = table.split("Not yet measured on this machine")[1]
    assert "demo_mlp" in missing and "cnn," not in missing and len(missing.split(", ")) == len(models.ZOO) - 1


def test_the_bfloat16_table_has_its_own_rows_and_the_ratio_to_onnxtrains_own_float32(tmp_path, monkeypatch):
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import bench
    import contenders
    import models
    monkeypatch.setattr(bench, "ROWS_DIR", str(tmp_path / "float32"))
    monkeypatch.setattr(bench, "ROWS_DIR_BF16", str(tmp_path / "bfloat16"))
    names = contenders.BFLOAT16_TABLE
    assert "onnxtrain-2.15" in names and contenders.float32_twin("onnxtrain-bf16-2.15") == "onnxtrain-2.15"
    times = {"eager-bf16-2.15": 1.0, "onnxtrain-bf16-2.15": 0.6, "onnxtrain-2.15": 1.0}
    runs = {c: [dict(times=[t], first=2 * t, rss_mb=100) for _ in range(3)] for c, t in times.items()}
    row = dict(model="bert_base", title="bert", batch=8, failed={}, runs={1: runs, 2: runs}, bfloat16_isa="avx512_bf16")
    bench._summarize(row, None, {}, None)
    del row["runs"]
    assert row["own_float32"]["onnxtrain-bf16-2.15@1"]["median"] == 0.6
    assert row["ratio"]["onnxtrain-bf16-2.15@1"]["median"] == 0.6  # against eager bf16, not float32
    assert "onnxtrain-2.15@1" not in row["ratio"]  # no float32 peer ran
    assert bench.misses([row]) == []
    meta = dict(date="2026-12-07", machine="this box", peaks={1: 100.0, 2: 190.0, "bfloat16": {1: 200.0, 2: 380.0}},
                rounds=3, contenders=names)
    bench.store_rows([json.loads(json.dumps(row))], json.loads(json.dumps(meta)), "bfloat16")
    assert not (tmp_path / "float32").exists()
    table = bench.assembled_table("this box", names, "bfloat16")
    assert "bfloat16 GEMM peak, 200 GFLOP/s at 1 thread and 380 at 2" in table
    assert "**onnxtrain-bf16-2.15 / own float32**" in table and "**0.60 (0.60-0.60)**" in table
    missing = table.split("Not yet measured on this machine")[1]
    assert "bert_base" not in missing and len(missing.split(", ")) == len(models.BFLOAT16_ZOO) - 1
    row["own_float32"]["onnxtrain-bf16-2.15@1"]["median"] = 0.8  # the target on AVX512_BF16: 0.75
    assert any("bert_base onnxtrain-bf16-2.15 1t: step 0.80 x onnxtrain-2.15's > 0.75" in m
               for m in bench.misses([row]))
    row["model"] = "timm_resnet50"  # a convolutional net has no such target
    assert bench.misses([row]) == []


def test_the_bfloat16_section_has_a_table_per_machine(tmp_path, monkeypatch):
    # bfloat16 hosts differ (AVX512_BF16, AMX): each model's row stays with the machine it was measured on.
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import bench
    import contenders
    import models
    monkeypatch.setattr(bench, "ROWS_DIR_BF16", str(tmp_path))
    names = contenders.BFLOAT16_TABLE
    row = dict(model="bert_base", title="the bert", batch=8, failed={}, step={}, pct_limit={}, ratio={}, first={},
               rss={}, evidence={}, loss_diff={}, fastest_peer={1: "eager-bf16-2.15", 2: "eager-bf16-2.15"})
    meta = dict(date="2026-12-07", machine="an amx box", peaks={1: 100.0, 2: 190.0, "bfloat16": {1: 600.0, 2: 1200.0}},
                rounds=3, contenders=names)
    bench.store_rows([row], meta, "bfloat16")
    bench.store_rows([dict(row, model="timm_resnet50", title="the resnet")],
                     dict(meta, machine="an avx512 box", peaks=dict(meta["peaks"], bfloat16={1: 200.0, 2: 400.0})),
                     "bfloat16")
    text = bench.tables_of_every_machine("an avx512 box", names, "bfloat16")
    assert text.index("the resnet") < text.index("an amx box") < text.index("the bert")  # this machine first
    assert "600 GFLOP/s at 1 thread" in text and "200 GFLOP/s at 1 thread" in text
    missing = text.split("Not yet measured on any machine")[1]
    assert "bert_base" not in missing and "timm_resnet50" not in missing
    assert len(missing.split(", ")) == len(models.BFLOAT16_ZOO) - 2


def test_bench_check_of_the_stored_rows_fails_on_a_missed_target(tmp_path, monkeypatch):
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import bench
    monkeypatch.setattr(bench, "ROWS_DIR", str(tmp_path))
    monkeypatch.setattr(bench, "update_readme", lambda table: None)
    monkeypatch.setattr(bench, "_machine", lambda: "this box")
    names = ["eager-1.13", "onnxtrain-1.13"]
    row = dict(model="cnn", title="the cnn", batch=8, failed={}, step={}, pct_limit={},
               ratio={"onnxtrain-1.13@1": dict(median=0.5, min=0.4, max=0.6)}, first={}, rss={}, evidence={},
               loss_diff={}, fastest_peer={1: "eager-1.13", 2: "eager-1.13"})
    meta = dict(date="2026-12-03", machine="this box", peaks={1: 100.0, 2: 190.0}, rounds=3, contenders=names)
    bench.store_rows([row], meta)
    args = ["bench.py", "--readme", "--check", "--contenders", ",".join(names)]
    monkeypatch.setattr(sys, "argv", args)
    bench.main()  # every stored row meets its targets: no exit
    bench.store_rows([dict(row, ratio={"onnxtrain-1.13@1": dict(median=1.5, min=1.4, max=1.6)})], meta)
    with pytest.raises(SystemExit) as exit_info:
        bench.main()
    assert exit_info.value.code == 1


def test_a_failure_without_a_message_says_where_it_was_raised():
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import bench
    trace = ('Traceback (most recent call last):\n  File "/venv/lib/python3.11/site-packages/onnxruntime/tools/'
             'symbolic_shape_infer.py", line 1631, in _infer_Reshape\n    assert is_literal(shape_rank)\nAssertionError\n')
    assert bench._why(trace) == ("AssertionError at onnxruntime/tools/symbolic_shape_infer.py:1631 in _infer_Reshape: "
                                 "assert is_literal(shape_rank)")
    assert bench._why("Traceback:\nValueError: bad size\n") == "ValueError: bad size"


def test_the_kernel_profile_sums_the_engines_kernels_by_op_type():
    cmd = [sys.executable, os.path.join(ROOT, "bench", "kernel_profile.py"), "demo_mlp", "--contender", "onnxtrain-current",
           "--steps", "2", "--warmup", "1"]
    env = dict(os.environ)
    env["ONNXTRAIN_PYTHONPATH"] = os.environ.get("ONNXTRAIN_PYTHONPATH", os.path.join(ROOT, "python"))
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "| forward | Gemm |" in done.stdout and "| backward |" in done.stdout, done.stdout
    assert "| | outside the kernels |" in done.stdout, done.stdout


def test_the_first_steps_profile_shows_each_step_and_the_export_childs_memory(tmp_path):
    cmd = [sys.executable, os.path.join(ROOT, "bench", "kernel_profile.py"), "demo_mlp", "--contender", "onnxtrain-current",
           "--steps", "2", "--first-steps", "--cache-dir", str(tmp_path)]
    env = dict(os.environ)
    env["ONNXTRAIN_PYTHONPATH"] = os.environ.get("ONNXTRAIN_PYTHONPATH", os.path.join(ROOT, "python"))
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "| 1 |" in done.stdout and "| 2 |" in done.stdout and "forward Gemm" in done.stdout, done.stdout
    child = re.search(r"its largest child (\d+) MB", done.stdout)
    assert child and int(child.group(1)) > 0, "the export should have run in a forked child: " + done.stdout
    assert os.listdir(tmp_path), "--cache-dir should have reached the profiled process, whose export it keeps"


def test_a_loss_agreement_build_turns_stochastic_depth_off_and_a_timed_build_keeps_it():
    # Stochastic depth draws from each contender's own random stream, as dropout does: left on, the
    # loss runs of convnext_tiny compared different random masks, not the engines.
    pytest.importorskip("torchvision")
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import models
    timed = [m.p for m in models.build("convnext_tiny").modules() if type(m).__name__ == "StochasticDepth"]
    agreement = [m.p for m in models.build("convnext_tiny", dropout=0.0).modules()
                 if type(m).__name__ == "StochasticDepth"]
    assert timed and max(timed) > 0
    assert len(agreement) == len(timed) and set(agreement) == {0.0}


def test_the_elementwise_bench_reports_each_op_against_a_copy(tmp_path):
    out = tmp_path / "elementwise.md"
    cmd = [sys.executable, os.path.join(ROOT, "bench", "elementwise.py"), "--n", "65536", "--warmup", "1",
           "--repeats", "1", "--ops", "Relu,GeluGrad,Add", "--out", str(out)]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.environ.get("ONNXTRAIN_PYTHONPATH", os.path.join(ROOT, "python"))
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    table = out.read_text()
    assert table == done.stdout.rstrip("\n") + "\n"
    assert "| copy (torch Tensor.copy_) | torch | baseline |" in table and "| copy (numpy copyto) |" in table
    rows = re.findall(r"^\| (Relu|GeluGrad \(none\)|GeluGrad \(tanh\)|Add) \| (\S+) \| (\w+) \| ([^|]+) \|"
                      r" [^|]+ \| ([\d.]+) \| ([\d.]+) \|", table, re.M)
    assert [r[0] for r in rows] == ["Relu", "Add", "GeluGrad (none)", "GeluGrad (tanh)"], table
    assert rows[0][1:4] == ("onnx", "forward", "X") and rows[2][1:4] == ("ai.onnxtrain", "gradient", "dY, X")
    # "x copy" has two decimals: a slow op on a busy host reads 0.00 there.
    assert all(float(r[4]) > 0 and float(r[5]) >= 0 for r in rows), table
    assert "N = 65536 float32" in table and "1 thread(s)" in table


def test_the_elementwise_readme_table_is_the_stored_one(tmp_path, monkeypatch):
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import elementwise
    (tmp_path / "README.md").write_text(f"intro\n{elementwise.README_BEGIN}\nold\n{elementwise.README_END}\nrest\n")
    (tmp_path / "stored.md").write_text("| op |\n|---|\n| Relu |\n")
    monkeypatch.setattr(elementwise, "ROOT", str(tmp_path))
    monkeypatch.setattr(sys, "argv", ["elementwise.py", "--readme", "--out", str(tmp_path / "stored.md")])
    elementwise.main()
    assert (tmp_path / "README.md").read_text() == (f"intro\n{elementwise.README_BEGIN}\n| op |\n|---|\n| Relu |\n"
                                                    f"{elementwise.README_END}\nrest\n")
