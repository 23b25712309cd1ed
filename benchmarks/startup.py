"""Start-up costs: ``--help``, import time, time to first step, whole commands, checkpoint stall.

* ``torchgarden --help`` wall time (a fresh process each time).
* ``import torchgarden`` versus ``import torch`` (fresh processes, interleaved).
* Time to first step: process start until the first optimizer step has run, for a
  hand-written loop and for torchgarden's API on the toy experiment (imports of the
  optimizer and everything else included).
* Whole commands against ``python -c "import torch"`` (issue 24; fresh processes, after a
  warm-up, in a new random order each round): a 1-step ``train`` of the default experiment
  (a new model_dir each time), ``eval`` of a trained run, ``export --format pt2`` and
  ``predict`` of that export; a compiled (``runtime.enable_xla``) run restarted from its
  checkpoint for 20 more steps, on this machine (Inductor's disk cache as it is) and as on
  a new one (an empty Inductor cache), with and without the ``compile_cache/`` its
  model_dir keeps; and a whole 20,000-step compiled digits run from a fresh model against
  the hand-written one-step compiled loop (h1) doing the same steps, compile included on
  both sides, both with Inductor's disk cache as it is.
* Checkpoint stall: how long ``CheckpointManager.save()`` blocks training for a
  ~67 MB state, synchronous versus ``enable_async=True`` (which only copies to host
  memory before returning; the write finishes in a background thread).

Medians of ``--repeats`` runs. Targets from the issue: ``--help`` <= 0.3 s and
``import torchgarden`` <= ``import torch`` + 0.15 s.

Usage:
    OMP_WAIT_POLICY=PASSIVE .venv/bin/python benchmarks/startup.py [--repeats 7]
"""

from __future__ import annotations

import argparse
import os
import random
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

import _common

HELP_TARGET_S = 0.3
IMPORT_TARGET_S = 0.15

_FIRST_STEP_HAND_WRITTEN = """
import torch
import torch.nn.functional as F
torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
x, y = torch.randn(32, 8), torch.randn(32, 1)
loss = F.mse_loss(model(x), y)
optimizer.zero_grad()
loss.backward()
optimizer.step()
print("first-step-done", flush=True)
"""

_FIRST_STEP_TORCHGARDEN = """
import torchgarden
from torchgarden.train_lib import create_trainer
params = torchgarden.get_experiment("toy_regression")
trainer = create_trainer(params, torchgarden.get_task(params.task), train=True, evaluate=False)
trainer.train(1)
print("first-step-done", flush=True)
"""


def _python() -> str:
    return sys.executable


def _wall(command: list[str], *, until: str | None = None) -> float:
    """Seconds from spawning ``command`` to its exit (or to the line ``until``)."""
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", "OMP_NUM_THREADS": "1"}
    start = time.perf_counter()
    if until is None:
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, env=env)
        return time.perf_counter() - start
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env
    ) as process:
        assert process.stdout is not None
        for line in process.stdout:
            if line.strip() == until:
                elapsed = time.perf_counter() - start
                break
        else:
            raise RuntimeError(f"{command[:3]} exited without printing {until!r}")
        process.wait()
    return elapsed


def _interleaved(commands: dict[str, list[str]], repeats: int, until: str | None = None
                 ) -> dict[str, float]:
    times: dict[str, list[float]] = {name: [] for name in commands}
    for command in commands.values():  # Warm the file cache once.
        _wall(command, until=until)
    order = list(commands)
    for _ in range(repeats):
        random.shuffle(order)  # A slow moment of the machine hits a different contender.
        for name in order:
            times[name].append(_wall(commands[name], until=until))
    return {name: _common.median(values) for name, values in times.items()}


def _fresh(command: list[str], root: str, prepare: Callable[[str], None] | None = None,
           *, new_machine: bool = True) -> list[str]:
    """``command`` run by a shell that first gives it a new directory ``$D`` (made by
    ``prepare``'s shell line when given) and, for ``new_machine``, an empty Inductor cache."""
    line = " ".join(f'"{part}"' if "$" in part else shlex.quote(part) for part in command)
    setup = prepare(root) if prepare else ""
    inductor = f"I=$(mktemp -d -p {root}); TORCHINDUCTOR_CACHE_DIR=$I " if new_machine else ""
    return ["bash", "-c", f"D=$(mktemp -d -p {root}); {setup} {inductor}{line}"]


# (h1) of digits_mlp.py as a whole process: the digits MLP's step hand-written as one
# torch.compile(fullgraph=True) graph (grad_and_value, torch's functional Adam), trained for
# {steps} steps over torchgarden's digits data on its data path, compile included.
_HAND_WRITTEN_COMPILED_RUN = """
import sys
sys.path.insert(0, {benchmarks!r})
import _contenders, _workloads
_contenders.COMPILE_WARMUP_STEPS = 1
_contenders.hand_written_compiled(_workloads.digits_mlp())({steps})
"""
WHOLE_RUN_STEPS = 20_000


def _whole_commands(python: str, cli: str, repeats: int) -> dict[str, float]:
    """Medians of whole commands a user runs, each against ``import torch``."""
    root = tempfile.mkdtemp(prefix="tg-bench-startup-")
    trained, compiled = os.path.join(root, "trained"), os.path.join(root, "compiled")
    train = [cli, "train", "--experiment", "image_classification", "--mode", "train"]
    subprocess.run([*train, "--model_dir", trained, "--params_override",
                    "trainer.train_steps=100"], check=True, capture_output=True)
    subprocess.run([cli, "export", "--model_dir", trained, "--format", "pt2"], check=True,
                   capture_output=True)
    export = os.path.join(trained, "exports", "ckpt-100")
    image = os.path.join(root, "digit.png")
    subprocess.run([python, "-c", "from PIL import Image; import numpy as np; Image.fromarray("
                    f"np.zeros((8, 8), np.uint8)).save({image!r})"], check=True)
    compile_override = ("runtime.enable_xla=true,trainer.steps_per_loop=20,"
                        "trainer.checkpoint_interval=20,trainer.train_steps=")
    subprocess.run([*train, "--model_dir", compiled, "--params_override",
                    f"{compile_override}20"], check=True, capture_output=True)
    copy = f"cp -r {shlex.quote(compiled)}/. $D/;"
    restart = [*train, "--model_dir", "$D", "--params_override", f"{compile_override}40"]
    whole_run = ("runtime.enable_xla=true,trainer.optimizer_config.learning_rate.cosine."
                 "decay_steps=-1,trainer.steps_per_loop=1000,trainer.summary_interval="
                 f"1000,trainer.checkpoint_interval={WHOLE_RUN_STEPS},"
                 f"trainer.train_steps={WHOLE_RUN_STEPS}")
    hand_written = _HAND_WRITTEN_COMPILED_RUN.format(
        benchmarks=os.path.dirname(os.path.abspath(__file__)), steps=WHOLE_RUN_STEPS)
    try:
        return _interleaved({
            "import torch": [python, "-c", "import torch"],
            "train, 1 step (default experiment)": _fresh(
                [*train, "--model_dir", "$D/run", "--params_override",
                 "trainer.train_steps=1"], root),
            "eval of a trained run": [cli, "eval", "--model_dir", trained],
            "export --format pt2": _fresh(
                [cli, "export", "--model_dir", trained, "--format", "pt2", "--output",
                 "$D/export"], root),
            "predict with an export": [cli, "predict", "--export", export, image],
            "compiled restart, same machine": _fresh(
                restart, root, lambda _: copy, new_machine=False),
            "compiled restart, same machine, no compile_cache/": _fresh(
                restart, root, lambda _: f"{copy} rm -rf $D/compile_cache;", new_machine=False),
            "compiled restart, new machine": _fresh(restart, root, lambda _: copy),
            "compiled restart, new machine, no compile_cache/": _fresh(
                restart, root, lambda _: f"{copy} rm -rf $D/compile_cache;"),
            f"compiled {WHOLE_RUN_STEPS} steps, torchgarden": _fresh(
                [*train, "--model_dir", "$D/run", "--params_override", whole_run], root,
                new_machine=False),
            f"compiled {WHOLE_RUN_STEPS} steps, hand-written (h1)": [
                python, "-c", hand_written],
        }, repeats)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _checkpoint_stall(repeats: int) -> dict[str, float]:
    import torch

    from torchgarden.checkpoint import Checkpoint, CheckpointManager

    model = torch.nn.Linear(4096, 4096)  # 16.8 M float32 values: 67 MB.
    megabytes = sum(p.numel() * p.element_size() for p in model.parameters()) / 1e6
    root = tempfile.mkdtemp(prefix="tg-bench-ckpt-")
    calls: dict[str, list[float]] = {"sync": [], "async": [], "async until written": []}
    try:
        managers = {
            kind: CheckpointManager(
                Checkpoint(model=model), os.path.join(root, kind), max_to_keep=2,
                enable_async=kind == "async",
            )
            for kind in ("sync", "async")
        }
        for number in range(1, repeats + 1):
            for kind, manager in managers.items():
                start = time.perf_counter()
                manager.save(number, check_interval=False)
                calls[kind].append(time.perf_counter() - start)
                if kind == "async":
                    manager.sync()
                    calls["async until written"].append(time.perf_counter() - start)
        for manager in managers.values():
            manager.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    result = {kind: _common.median(values) for kind, values in calls.items()}
    result["megabytes"] = megabytes
    return result


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Runs every measurement and prints a table; returns the medians in seconds."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--seed", type=int, default=0, help="of the random order")
    args = parser.parse_args(argv)
    random.seed(args.seed)
    _common.setup_threads()
    _common.print_header("start-up: --help, imports, first step, checkpoint stall", "startup.py", argv)
    python = _python()
    cli = os.path.join(os.path.dirname(python), "torchgarden")
    if not os.path.exists(cli):
        cli_command = [python, "-m", "torchgarden", "--help"]
    else:
        cli_command = [cli, "--help"]

    imports = _interleaved(
        {
            "python (no imports)": [python, "-c", "pass"],
            "import torch": [python, "-c", "import torch"],
            "import torchgarden": [python, "-c", "import torchgarden"],
            "import torchgarden + training API": [
                python, "-c", "from torchgarden import Task, Trainer, Controller, run_experiment"
            ],
            "torchgarden --help": cli_command,
        },
        args.repeats,
    )
    first_step = _interleaved(
        {
            "first step, hand-written": [python, "-c", _FIRST_STEP_HAND_WRITTEN],
            "first step, torchgarden API": [python, "-c", _FIRST_STEP_TORCHGARDEN],
        },
        args.repeats,
        until="first-step-done",
    )
    commands = _whole_commands(python, cli if os.path.exists(cli) else "torchgarden",
                               args.repeats)
    stall = _checkpoint_stall(args.repeats)

    over_torch = imports["import torchgarden + training API"] - imports["import torch"]
    notes = {
        "import torchgarden": "lazy: torch not imported yet",
        "import torchgarden + training API": "imports torch",
        "torchgarden --help": f"target <= {HELP_TARGET_S}",
    }
    rows = [(name, f"{value:.3f}", notes.get(name, "")) for name, value in imports.items()]
    rows.append(("(torchgarden + training API) - import torch", f"{over_torch:+.3f}",
                 f"target <= +{IMPORT_TARGET_S}"))
    rows += [(name, f"{value:.3f}", "process start -> step done")
             for name, value in first_step.items()]
    torch_s = commands["import torch"]
    rows += [(name, f"{value:.3f}", "" if name == "import torch" else
              f"import torch {value - torch_s:+.2f} s ({value / torch_s:.2f}x)")
             for name, value in commands.items()]
    rows += [
        (f"checkpoint save() call, sync, {stall['megabytes']:.0f} MB", f"{stall['sync']:.3f}",
         "blocks training"),
        (f"checkpoint save() call, async, {stall['megabytes']:.0f} MB", f"{stall['async']:.3f}",
         "blocks training"),
        ("async save until written (background)", f"{stall['async until written']:.3f}", ""),
    ]
    print()
    print(f"median of {args.repeats} runs, seconds:")
    _common.print_table(["measurement", "seconds", "note"], rows)
    return {**imports, **first_step, **commands,
            **{f"checkpoint {k}": v for k, v in stall.items()}}


if __name__ == "__main__":
    main(sys.argv[1:])
