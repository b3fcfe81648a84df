"""A tiny run of the benchmark harness, so that bench/run cannot rot. Timings are not checked."""
import json
import os
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def test_bench_runs_one_model_for_two_steps(tmp_path):
    cmd = [sys.executable, os.path.join(ROOT, "bench", "bench.py"), "--models", "mlp_small", "--steps", "2",
           "--warmup", "1", "--agreement-steps", "2", "--quick", "--out", str(tmp_path)]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.environ.get("ONNXTRAIN_PYTHONPATH", os.path.join(ROOT, "python"))
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = json.loads((tmp_path / "bench.json").read_text())
    assert [r["model"] for r in rows] == ["mlp_small"]
    row = rows[0]
    for key in ("eager_1t_median", "ours_1t_median", "ours_2t_median", "eager_rss", "ours_rss", "ours_first"):
        assert row[key] > 0, key
    assert row["loss_rel_diff"] < 1e-4  # dropout 0: both contenders compute the same losses
    assert (tmp_path / "bench.md").read_text().count("| MLP 784-512-256-10 |") == 1
    assert (tmp_path / "bench.png").stat().st_size > 1000
