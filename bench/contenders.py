"""What a CPU user would train with instead of onnxtrain, and onnxtrain itself: each contender is a
way to wrap the model (and its optimizer) and the Python environment it runs in.

The environments are the project's venvs (scripts/torch_venv.sh, scripts/ort_venv.sh), made once
outside the clone. The orchestrator resolves each contender's interpreter; a contender whose
environment cannot be made, or that fails on a model, becomes a row that says why.
"""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
NEWEST_TORCH = "2.15.0"
ORT_VERSION = "1.19.2"

# name -> (environment, kind). "system" is Debian's torch 1.13 (its venv adds the model zoos);
# "current" is the interpreter running bench/run (for a quick look, and the harness's own test).
CONTENDERS = {
    "eager-1.13": ("system", "eager"),
    "eager-2.15": (NEWEST_TORCH, "eager"),
    "compile-2.15": (NEWEST_TORCH, "compile"),
    "compile-max-autotune-2.15": (NEWEST_TORCH, "compile_max_autotune"),
    f"ort-{ORT_VERSION}": ("ort", "ort"),
    "onnxtrain-1.13": ("system", "onnxtrain"),
    "onnxtrain-2.15": (NEWEST_TORCH, "onnxtrain"),
    # The same engine through onnxtrain.TrainStep: forward, backward and the update in one call.
    "onnxtrain-step-1.13": ("system", "onnxtrain_step"),
    "onnxtrain-step-2.15": (NEWEST_TORCH, "onnxtrain_step"),
    # Under torch.autocast("cpu", dtype=torch.bfloat16) (AUTOCAST): what a CPU user who wants speed
    # trains with, each judged against the bfloat16 peers only.
    "eager-bf16-2.15": (NEWEST_TORCH, "eager"),
    "compile-bf16-2.15": (NEWEST_TORCH, "compile"),
    "compile-max-autotune-bf16-2.15": (NEWEST_TORCH, "compile_max_autotune"),
    f"ort-{ORT_VERSION}-bf16": ("ort", "ort"),
    "onnxtrain-bf16-2.15": (NEWEST_TORCH, "onnxtrain"),
    "onnxtrain-step-bf16-2.15": (NEWEST_TORCH, "onnxtrain_step"),
    "eager-current": ("current", "eager"),
    "onnxtrain-current": ("current", "onnxtrain"),
    "onnxtrain-step-current": ("current", "onnxtrain_step"),
}
AUTOCAST = {name: "bfloat16" for name in CONTENDERS if "-bf16" in name}
DEFAULT = [name for name, (environment, _) in CONTENDERS.items() if environment != "current" and name not in AUTOCAST]
# Every bfloat16 contender.
BFLOAT16 = [name for name in CONTENDERS if name in AUTOCAST]
# bench/run --contenders bf16, the bfloat16 table's: the bfloat16 contenders, and onnxtrain's own
# float32 for the ratio of each bfloat16 onnxtrain contender to its float32 twin.
BFLOAT16_TABLE = BFLOAT16 + ["onnxtrain-2.15"]


def is_ours(name):
    return CONTENDERS[name][1] in ("onnxtrain", "onnxtrain_step")


def precision(name):
    """The dtype autocast computes the contender's products in; float32 without autocast."""
    return AUTOCAST.get(name, "float32")


def float32_twin(name):
    """The same contender without autocast (onnxtrain-bf16-2.15 -> onnxtrain-2.15), or None."""
    twin = name.replace("-bf16", "")
    return twin if twin != name and twin in CONTENDERS else None


def peers(names, like=None):
    """The contenders among `names` that are not onnxtrain; with `like`, those of its precision."""
    return [n for n in names if not is_ours(n) and (like is None or precision(n) == precision(like))]


def is_eager_twin(peer, ours):
    """Whether `peer` is eager PyTorch on the same torch and in the same precision as `ours`."""
    return (CONTENDERS[peer][1] == "eager" and CONTENDERS[peer][0] == CONTENDERS[ours][0]
            and precision(peer) == precision(ours))


_interpreters = {}


def interpreter(name):
    """The contender's python, making its venv on first use; raises with the script's output."""
    environment = CONTENDERS[name][0]
    if environment == "current":
        return sys.executable
    if environment not in _interpreters:
        if environment == "ort":
            cmd = [os.path.join(ROOT, "scripts", "ort_venv.sh")]
        else:
            cmd = [os.path.join(ROOT, "scripts", "torch_venv.sh"), environment]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True)
        except OSError as e:
            done = subprocess.CompletedProcess(cmd, 1, "", str(e))
        if done.returncode != 0:
            _interpreters[environment] = RuntimeError(
                f"{' '.join(os.path.basename(c) for c in cmd)} failed: {done.stderr.strip()[-500:]}")
        else:
            _interpreters[environment] = done.stdout.strip().splitlines()[-1]
    found = _interpreters[environment]
    if isinstance(found, Exception):
        raise found
    return found


def wrap(name, net, lr=0.01, momentum=0.9):
    """(the module to call, its optimizer) for contender `name`, inside its own process."""
    import torch

    kind = CONTENDERS[name][1]
    if kind in ("onnxtrain", "onnxtrain_step"):
        import onnxtrain
        model = onnxtrain.ORTModule(net)
        return model, onnxtrain.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    optimizer = torch.optim.SGD(net.parameters(), lr=lr, momentum=momentum)
    if kind == "eager":
        return net, optimizer
    if kind == "compile":
        return torch.compile(net), optimizer
    if kind == "compile_max_autotune":
        return torch.compile(net, mode="max-autotune-no-cudagraphs"), optimizer
    if kind == "ort":
        _give_ort_sessions_torchs_threads(torch.get_num_threads())
        from onnxruntime.training.ortmodule import ORTModule
        return ORTModule(net), optimizer
    raise ValueError(f"unknown contender kind {kind!r}")


def train_step(name, model, optimizer):
    """The contender's training step, a callable from a batch to the loss: the four lines of a
    PyTorch loop, or onnxtrain.TrainStep's one engine call."""
    if name in CONTENDERS and CONTENDERS[name][1] == "onnxtrain_step":
        import onnxtrain
        step = onnxtrain.TrainStep(model, optimizer)
    else:
        def step(*batch):
            optimizer.zero_grad(set_to_none=True)
            loss = _forward(name, model, batch)
            loss.backward()
            optimizer.step()
            return loss
        return step
    if name not in AUTOCAST:
        return step

    def under_autocast(*batch):  # TrainStep's forward (and export) runs inside the call
        import torch
        with torch.autocast("cpu", dtype=getattr(torch, AUTOCAST[name])):
            return step(*batch)
    under_autocast.whole_steps_of = step
    return under_autocast


def _forward(name, model, batch):
    """The loss, under autocast for a bfloat16 contender (the backward runs outside it, as in
    PyTorch's recipe)."""
    if name not in AUTOCAST:
        return model(*batch)
    import torch
    with torch.autocast("cpu", dtype=getattr(torch, AUTOCAST[name])):
        return model(*batch)


def _give_ort_sessions_torchs_threads(threads):
    """ORT's ORTModule makes its sessions with default SessionOptions, whose thread pool ignores
    torch's thread count (and OMP_NUM_THREADS): equal threads need the count set on every
    SessionOptions it creates."""
    import onnxruntime

    class EqualThreads(onnxruntime.SessionOptions):
        def __init__(self):
            super().__init__()
            self.intra_op_num_threads = threads
            self.inter_op_num_threads = 1

    onnxruntime.SessionOptions = EqualThreads


def environment_variables(name):
    """Settings that make a contender fail loudly instead of quietly running eager PyTorch."""
    kind = CONTENDERS[name][1]
    if kind in ("onnxtrain", "onnxtrain_step"):
        return {"ONNXTRAIN_FALLBACK": "0"}
    if kind == "ort":
        return {"ORTMODULE_FALLBACK_POLICY": "FALLBACK_DISABLE"}
    return {}


def capturing(model):
    """Whether an onnxtrain ORTModule still runs its calls eagerly while its capture goes on."""
    warmup = getattr(model, "_warmup", None)
    return warmup is not None and warmup.job is not None


def engine_calls(name, model, step):
    """How many calls the engine served so far (None for a peer): ORTModule's engine runs, or
    TrainStep's whole steps as one engine call."""
    kind = CONTENDERS.get(name, (None, None))[1]
    if kind == "onnxtrain":
        return model.engine_runs
    if kind == "onnxtrain_step":
        return getattr(step, "whole_steps_of", step).whole_steps
    return None


def export_child_rss_mb(name):
    """The peak RSS of the largest child process an onnxtrain process waited for (None for a peer):
    its export children, and any other child (an eager process of this bench also shows one, of
    about 450 MB, that the model zoo's imports start), so an upper bound on the export's."""
    if CONTENDERS.get(name, (None, None))[1] not in ("onnxtrain", "onnxtrain_step"):
        return None
    import resource
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024 or None


def evidence(name, model, step):
    """What shows that the wrapper itself ran the steps (raises where it did not)."""
    kind = CONTENDERS[name][1]
    if kind == "onnxtrain":
        assert model.fallback_reason is None, model.fallback_reason
        return {}
    if kind == "onnxtrain_step":
        assert model.fallback_reason is None, model.fallback_reason
        step = getattr(step, "whole_steps_of", step)
        assert step.whole_steps > 0, "onnxtrain.TrainStep ran no step as one engine call"
        return dict(whole_steps=step.whole_steps)
    if kind.startswith("compile"):
        from torch._dynamo.utils import counters
        graphs = counters["stats"]["unique_graphs"]
        assert graphs > 0, "torch.compile compiled no graph"
        return dict(graphs=graphs, graph_breaks=sum(counters["graph_break"].values()))
    return {}
