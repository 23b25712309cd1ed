"""Helpers of the fault-injection tests: run the CLI, kill it, read results back bitwise."""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import os
import random
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
FAULTY_CLI = os.path.join(HERE, "faulty_cli.py")
#: Seconds one CLI subprocess may take before the test fails (startup alone is 2-4 s).
TIMEOUT = 180

#: Deterministic settings shared by every run: frequent checkpoints and summaries.
COMMON = (
    "trainer.train_steps=60,trainer.steps_per_loop=5,trainer.summary_interval=5,"
    "trainer.checkpoint_interval=5,trainer.max_to_keep=2,runtime.deterministic=true,"
    "runtime.seed=7,runtime.num_threads=1,trainer.preemption_signals=[SIGTERM,SIGUSR1]"
)
#: Toy regression (Linear 8->1, SGD with momentum), shuffled.
TOY = COMMON + ",task.train_data.shuffle=true"
#: The digits MLP (Adam, cosine decay with warmup, dropout), shuffled by default.
DIGITS = (
    COMMON + ",task.train_data.global_batch_size=32,task.model.hidden_sizes=[16],"
    "task.model.dropout_rate=0.1,trainer.optimizer_config.learning_rate.cosine.decay_steps=60,"
    "trainer.optimizer_config.warmup.linear.warmup_steps=10"
)
#: Digits and parity heads on one backbone, interleaved by the seeded task sampler.
MULTITASK = (
    COMMON + ",task.model.hidden_sizes=[16],task.model.dropout=0.1,"
    "trainer.optimizer_config.learning_rate.cosine.decay_steps=60,"
    "trainer.optimizer_config.warmup.linear.warmup_steps=10"
)
WORKERS = ",task.train_data.num_workers=2"
EMA = ",trainer.optimizer_config.ema.average_decay=0.9"
#: name -> (experiment, override, mode) of the exact-resume cases.
CASES = {
    "toy": ("toy_regression", TOY, "train"),
    "toy_workers2": ("toy_regression", TOY + WORKERS, "train"),
    "toy_float16_ema": (
        "toy_regression", TOY + ",runtime.mixed_precision_dtype=float16" + EMA, "train"
    ),
    "digits": ("image_classification", DIGITS, "train"),
    "digits_workers2": ("image_classification", DIGITS + WORKERS, "train"),
    "digits_bfloat16_ema": (
        "image_classification", DIGITS + ",runtime.mixed_precision_dtype=bfloat16" + EMA, "train"
    ),
    # Checkpoints at eval points (Orbit counts eval points from where a run starts).
    "digits_train_and_eval": (
        "image_classification",
        DIGITS + ",trainer.checkpoint_interval=10,trainer.validation_interval=10",
        "train_and_eval",
    ),
    # Best checkpoint on one task's metric (digits/accuracy), evaluations of both tasks.
    "multitask_train_and_eval": (
        "multitask_digits",
        MULTITASK + ",trainer.checkpoint_interval=10,trainer.validation_interval=10",
        "train_and_eval",
    ),
}
TRAIN_STEPS = 60
CHECKPOINT_INTERVAL = 5
SAVE_PHASES = ("state", "meta", "rename", "retention", "rmtree")


def cli_args(experiment: str, model_dir: str, override: str, mode: str = "train") -> list[str]:
    return [
        "train", "--experiment", experiment, "--mode", mode, "--model_dir", model_dir,
        "--params_override", override,
    ]


def child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TG_FAULT")}
    env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", **extra)
    return env


def run_cli(
    args: Sequence[str], *, fault: str | None = None, plain: bool = False,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Runs the CLI in a subprocess; ``plain`` runs ``python -m torchgarden`` itself."""
    extra = dict(env or {})
    if fault:
        extra["TG_FAULT"] = fault
    command = [sys.executable, "-m", "torchgarden"] if plain else [sys.executable, FAULTY_CLI]
    return subprocess.run(
        [*command, *args], env=child_env(**extra), capture_output=True, text=True,
        timeout=TIMEOUT,
    )


@contextlib.contextmanager
def process_state_restored() -> Iterator[None]:
    """Undoes what an in-process run changes globally (deterministic mode, denormals)."""
    deterministic = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)


def run_in_process(args: Sequence[str]) -> int:
    """Runs ``torchgarden.cli.main.main(args)`` in this process (the reference runs)."""
    from torchgarden.cli.main import main

    with process_state_restored():
        return main(list(args))


def checkpoint_dirs(model_dir: str) -> list[str]:
    """``ckpt-N`` names in ``model_dir`` sorted by N."""
    names = [n for n in os.listdir(model_dir) if n.startswith("ckpt-")]
    return sorted(names, key=lambda n: int(n.split("-")[1]))


def load_state(checkpoint: str) -> dict[str, Any]:
    return torch.load(os.path.join(checkpoint, "state.pt"), weights_only=True)


def final_state(model_dir: str) -> dict[str, Any]:
    """The state of ``model_dir``'s highest-numbered checkpoint."""
    return load_state(os.path.join(model_dir, checkpoint_dirs(model_dir)[-1]))


def differences(a: Any, b: Any, where: str = "state") -> list[str]:
    """Where two nested states differ, bit for bit (tensors compared by dtype, shape, bytes)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return [f"{where}: {type(a).__name__} vs {type(b).__name__}"]
        if a.dtype != b.dtype or a.shape != b.shape:
            return [f"{where}: {a.dtype}{tuple(a.shape)} vs {b.dtype}{tuple(b.shape)}"]
        same = torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))
        return [] if same else [f"{where}: tensors differ"]
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        if set(a) != set(b):
            return [f"{where}: keys {sorted(map(str, set(a) ^ set(b)))} differ"]
        out: list[str] = []
        for key in a:
            out += differences(a[key], b[key], f"{where}[{key!r}]")
        return out
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return [f"{where}: length {len(a)} vs {len(b)}"]
        out = []
        for i, (x, y) in enumerate(zip(a, b)):
            out += differences(x, y, f"{where}[{i}]")
        return out
    if isinstance(a, float) and isinstance(b, float):
        return [] if struct.pack("<d", a) == struct.pack("<d", b) else [f"{where}: {a!r} vs {b!r}"]
    return [] if a == b else [f"{where}: {a!r} vs {b!r}"]


#: Tags that measure time or memory (they differ between any two runs).
TIMING_TAGS = ("steps_per_second", "throughput/", "memory/", "startup/")


def scalars(directory: str, skip: Sequence[str] = TIMING_TAGS) -> dict[str, dict[int, float]]:
    """Every scalar under ``directory``: ``{tag: {step: value}}``, the LAST write per step;
    tags starting with one of ``skip`` are left out.

    Event files of a killed run and of its resumption both hold the steps between the
    last checkpoint and the kill; the value written last (by wall time) wins.
    """
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    latest: dict[tuple[str, int], tuple[float, int, float]] = {}
    paths = glob.glob(os.path.join(directory, "**", "events.out.tfevents.*"), recursive=True)
    for order, path in enumerate(sorted(paths, key=os.path.getmtime)):
        prefix = os.path.relpath(os.path.dirname(path), directory)
        prefix = "" if prefix == "." else prefix + "/"
        for event in EventFileLoader(path).Load():
            for value in event.summary.value:
                if value.tag.startswith(tuple(skip)) or not value.HasField("simple_value"):
                    continue
                key = (prefix + value.tag, event.step)
                stamp = (event.wall_time, order)
                if key not in latest or stamp >= latest[key][:2]:
                    latest[key] = (*stamp, value.simple_value)
    out: dict[str, dict[int, float]] = {}
    for (tag, step), (*_, number) in latest.items():
        out.setdefault(tag, {})[step] = number
    return out


def scalar_differences(
    a: dict[str, dict[int, float]], b: dict[str, dict[int, float]]
) -> list[str]:
    """Tags, steps or float32 bit patterns that differ between two ``scalars`` results."""
    out = []
    if set(a) != set(b):
        out.append(f"tags differ: {sorted(set(a) ^ set(b))}")
    for tag in sorted(set(a) & set(b)):
        if sorted(a[tag]) != sorted(b[tag]):
            out.append(f"{tag}: steps {sorted(set(a[tag]) ^ set(b[tag]))} differ")
            continue
        for step, value in a[tag].items():
            if struct.pack("<f", value) != struct.pack("<f", b[tag][step]):
                out.append(f"{tag}@{step}: {value!r} vs {b[tag][step]!r}")
    return out


def run_differences(reference: str, run: str, summary_dirs: Sequence[str] = ("train",)) -> list[str]:
    """Final checkpoint state and logged scalars of two model dirs, bit for bit."""
    out = differences(final_state(reference), final_state(run))
    for sub in summary_dirs:
        out += [f"{sub}/{d}" for d in scalar_differences(
            scalars(os.path.join(reference, sub)), scalars(os.path.join(run, sub)))]
    return out


def random_faults(
    rng: random.Random, count: int, *, evaluate_every: int | None = None,
    checkpoint_interval: int = CHECKPOINT_INTERVAL,
) -> list[str]:
    """``count`` kill points at strictly increasing steps, drawn from every kind of fault.

    Half land inside a checkpoint write (each phase of ``faulty_cli``), the rest inside
    a train step, a summary write or (with ``evaluate_every``) an evaluation.
    """
    faults: dict[int, str] = {}
    while len(faults) < count:
        roll = rng.random()
        if roll < 0.5:
            step = checkpoint_interval * rng.randint(1, TRAIN_STEPS // checkpoint_interval)
            phase = rng.choice(SAVE_PHASES if step >= 3 * checkpoint_interval else SAVE_PHASES[:4])
            fault = f"save:{step}:{phase}"
        elif roll < 0.8:
            step = rng.randint(1, TRAIN_STEPS)
            fault = f"step:{step}"
        elif evaluate_every and roll < 0.9:
            step = evaluate_every * rng.randint(1, TRAIN_STEPS // evaluate_every)
            fault = f"eval:{step}"
        else:
            step = CHECKPOINT_INTERVAL * rng.randint(1, TRAIN_STEPS // CHECKPOINT_INTERVAL)
            fault = f"summary:{step}"
        faults.setdefault(step, fault)
    return [faults[step] for step in sorted(faults)]


@dataclasses.dataclass
class Outcome:
    """What a killed-and-restarted run went through."""

    kills: list[str] = dataclasses.field(default_factory=list)
    restarts: int = 0
    leftovers: list[str] = dataclasses.field(default_factory=list)


def run_until_done(args: Sequence[str], faults: Sequence[str]) -> Outcome:
    """Runs the same command once per fault (each must die by SIGKILL), then to the end."""
    outcome = Outcome()
    for fault in faults:
        result = run_cli(args, fault=fault)
        assert result.returncode == -signal.SIGKILL, (
            f"fault {fault} did not kill the run (exit {result.returncode}):\n"
            f"{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
        )
        outcome.kills.append(fault)
        outcome.restarts += 1
    result = run_cli(args)
    assert result.returncode == 0, f"{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
    model_dir = args[args.index("--model_dir") + 1]
    outcome.leftovers = sorted(n for n in os.listdir(model_dir) if ".tmp-" in n)
    return outcome


def kill_at_random_time(args: Sequence[str], loop_end: int, rng: random.Random) -> bool:
    """Starts ``python -m torchgarden``, SIGKILLs it at a random moment after ``loop_end``.

    The moment is a random delay (0-40 ms) after the log line of the loop ending at
    ``loop_end``, when its summaries and checkpoint are being written. Returns whether
    the kill landed before the run finished on its own.
    """
    delay = rng.uniform(0.0, 0.04)
    process = subprocess.Popen(
        [sys.executable, "-m", "torchgarden", *args], env=child_env(),
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    needle = f"train | step: {loop_end: 6d} | steps/sec"
    try:
        for line in process.stdout:  # type: ignore[union-attr]
            if line.startswith(needle):
                time.sleep(delay)
                process.send_signal(signal.SIGKILL)
                break
        process.communicate(timeout=TIMEOUT)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return process.returncode == -signal.SIGKILL
