"""A tiny run of the benchmark harness, so that bench/run cannot rot. Timings are not checked."""
import json
import os
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def test_bench_runs_one_model_in_fresh_process_pairs(tmp_path):
    cmd = [sys.executable, os.path.join(ROOT, "bench", "bench.py"), "--models", "demo_mlp", "--steps", "2",
           "--warmup", "2", "--pairs", "1", "--agreement-steps", "3", "--quick", "--out", str(tmp_path)]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.environ.get("ONNXTRAIN_PYTHONPATH", os.path.join(ROOT, "python"))
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((tmp_path / "bench.json").read_text())
    assert report["meta"]["peaks"]["1"] > 0
    (row,) = report["rows"]
    assert row["model"] == "demo_mlp" and row["flops"] > 0
    for key in ("eager_1t", "ours_1t", "eager_2t", "ours_2t", "ratio_1t", "ratio_2t_vs_eager_best"):
        assert row[key]["median"] > 0 and row[key]["min"] <= row[key]["median"] <= row[key]["max"], key
    for key in ("eager_rss", "ours_rss", "ours_first", "eager_pct_limit_1t", "ours_pct_limit_1t"):
        assert row[key] > 0, key
    # Dropout 0 and no BatchNorm: both contenders stay within float32 rounding of the float64 run.
    assert row["loss_diff_ours"] < 1e-5 and row["loss_diff_eager"] < 1e-5
    table = (tmp_path / "bench.md").read_text()
    assert table.count("| demo: digits MLP 64-256-128-10 |") == 1 and "Targets missed" in table
    assert (tmp_path / "bench.png").stat().st_size > 1000


def test_bench_check_fails_when_a_target_is_missed(tmp_path):
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import bench
    row = dict(model="mlp_small", ratio_1t=dict(median=0.9), ratio_2t_vs_eager_best=dict(median=0.5),
               ours_first=0.2, eager_first=0.1, ours_rss=100, eager_rss=200, loss_diff_eager=1e-3,
               loss_diff_ours=2e-3, agreement_steps=10)
    assert any("mlp_small: 1-thread ratio 0.90" in m for m in bench.misses([row]))
    row["ratio_1t"]["median"] = 0.6
    assert bench.misses([row]) == []  # losses noisier than eager's, but within its float32 drift
    row["loss_diff_ours"] = 1e-2
    assert any("mlp_small: losses 1.0e-02 from float64" in m for m in bench.misses([row]))


def test_the_memory_tradeoff_report_runs_and_recompute_stashes_less(tmp_path):
    cmd = [sys.executable, os.path.join(ROOT, "bench", "memory_optimization.py"), "--model", "transformer", "--pairs",
           "1", "--warmup", "1", "--steps", "1", "--threads-list", "1", "--out", str(tmp_path)]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.environ.get("ONNXTRAIN_PYTHONPATH", os.path.join(ROOT, "python"))
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    (pair,) = json.loads((tmp_path / "report.json").read_text())["results"]["1"]
    assert pair["recompute"]["stashed_bytes"] < pair["none"]["stashed_bytes"]
    assert pair["recompute"]["recomputed_bytes"] > 0 and pair["none"]["recomputed_bytes"] == 0
    assert "| 1 | recompute |" in (tmp_path / "report.md").read_text()
