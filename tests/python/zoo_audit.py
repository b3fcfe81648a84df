"""The numerics audit (onnxtrain.audit) of a zoo's models: every node of one training step
recomputed alone in float64 on its own inputs, so that no decision flipped upstream can move its
error. This judges the kernels where a step comparison with eager cannot: a model whose eager
float32 run is itself far from float64 hides a kernel error of that size in its rounding.

oneDNN reads ONEDNN_MAX_CPU_ISA once per process, so each ISA setting audits in a fresh process:
the zoo's test module, run as a script with --audit, prints one JSON line (see run_as_script). A
zoo's audit is one test per ISA setting: per-model tests would share that subprocess through a
cache that each pytest-xdist worker holds alone, and so run it once per worker.
"""
import json
import os
import subprocess
import sys

import pytest
import torch

import onnxtrain
import zoo_parity

# Normalized per op family (src/audit/audit_compare.h); float32 rounding of the suite's models
# measures about 1e-6 at worst, a kernel error of 1e-4 or more is far above it.
AUDIT_TOLERANCE = 1e-5

# An If that torch 2.x's MultiheadAttention export adds has no single-node float64 twin (its body
# is several nodes): the audit reports it with that reason, which is allowed for control flow only.
CONTROL_FLOW = {"If", "Loop", "Scan"}


def worst_nodes(names, case):
    """Per model (case(name) -> zoo_parity.Case): its worst node in one audited training step, and
    the nodes without a float64 twin."""
    results = {}
    for name in names:
        c = case(name)
        torch.manual_seed(0)
        model = c.make()
        args, kwargs, target = c.batch(torch.Generator().manual_seed(1))
        report = onnxtrain.audit(model, *args, loss_fn=lambda out: c.loss(out, target), **kwargs)
        worst = report.worst(1)[0]
        results[name] = {"op_type": worst.op_type, "node": worst.node, "graph": worst.graph,
                         "rel_error": worst.rel_error, "nodes": len(report.rows),
                         "not_compared": [f"{r.op_type} {r.node}: {r.reason}" for r in report.not_compared
                                          if r.op_type not in CONTROL_FLOW]}
    return results


def isa_below_host():
    """The ONEDNN_MAX_CPU_ISA one step below this CPU: AVX2 under AVX-512, else SSE41."""
    with open("/proc/cpuinfo") as f:
        flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    return "AVX2" if "avx512f" in flags else "SSE41"


def isa_settings():
    """The ISA parameter of a zoo's audit test: the host's (None) and the one below it."""
    return [pytest.param(None, id="host_isa"), pytest.param(isa_below_host(), id="isa_below_host")]


def audits_at(script, isa):
    """worst_nodes of every model of `script` (a zoo test module), audited in a fresh process with
    oneDNN capped at `isa` (None: the host's)."""
    env = dict(os.environ)
    env.pop("ONEDNN_MAX_CPU_ISA", None)
    if isa is not None:
        env["ONEDNN_MAX_CPU_ISA"] = isa
    done = subprocess.run([sys.executable, script, "--audit"], env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"the audit at ISA {isa or 'host'} failed:\n{done.stderr[-4000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def check_every_model(results):
    """The assertion of a zoo's audit test, over every model of one audits_at: one test per ISA
    setting runs one subprocess for the whole zoo, and its message names each model that fails."""
    problems = []
    for name, result in sorted(results.items()):
        if result["not_compared"]:
            problems.append(f"{name}: nodes without a float64 twin: {result['not_compared'][:5]}")
        if result["rel_error"] > AUDIT_TOLERANCE:
            problems.append(f"{name}: {result['graph']} {result['op_type']} {result['node']} is "
                            f"{result['rel_error']:.2e} from its float64 twin, above {AUDIT_TOLERANCE:.0e}")
    assert not problems, "\n".join(problems)


def run_as_script(names, case):
    """The --audit entry of a zoo test module: the capture this torch uses by default, no fallback
    of either kind, and worst_nodes of `names` as one JSON line."""
    zoo_parity.without_fallback()
    print(json.dumps(worst_nodes(names, case)))
