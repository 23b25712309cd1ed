"""Preemption under torchrun: a signal to ONE rank stops every rank at the same step,
after rank 0 has written the checkpoint; the same command then resumes from it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.distributed

OVERRIDES = (
    "trainer.train_steps=100000000,trainer.steps_per_loop=50,trainer.summary_interval=50,"
    "trainer.checkpoint_interval=100000000,runtime.distribution_strategy=ddp,"
    "task.train_data.global_batch_size=32"
)


def _rank_pids(model_dir: Path) -> dict[int, int]:
    """Worker pids by LOCAL_RANK, found through /proc (workers run `-m torchgarden`)."""
    pids: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            if str(model_dir).encode() not in cmdline or b"torchgarden" not in cmdline:
                continue
            environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        for item in environ:
            if item.startswith(b"LOCAL_RANK="):
                pids[int(item.split(b"=")[1])] = int(entry)
    return pids


def _launch(model_dir: Path, log_dir: Path, overrides: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}
    env["OMP_NUM_THREADS"] = "1"
    return subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
         "--redirects", "3", "--log-dir", str(log_dir), "-m", "torchgarden", "train",
         "--experiment", "toy_regression", "--mode", "train", "--model_dir", str(model_dir),
         "--params_override", overrides],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )


def _rank_stdout(log_dir: Path, rank: int) -> str:
    found = sorted(log_dir.glob(f"*/attempt_0/{rank}/stdout.log"))
    return found[0].read_text(errors="replace") if found else ""


def test_signal_to_one_rank_stops_both_at_the_same_step_and_resumes(tmp_path):
    model_dir, log_dir = tmp_path / "run", tmp_path / "logs"
    proc = _launch(model_dir, log_dir, OVERRIDES)
    try:
        deadline = time.time() + 240
        while time.time() < deadline and not (model_dir / "train").exists():
            time.sleep(0.5)  # The first summaries are written after the first loop.
        assert (model_dir / "train").exists(), "training never started"
        pids = _rank_pids(model_dir)
        assert set(pids) == {0, 1}, pids
        os.kill(pids[1], signal.SIGTERM)  # Only rank 1 is told to stop.
        proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
    rank0 = _rank_stdout(log_dir, 0)
    match = re.search(r"preempted at step (\d+): checkpoint (\S+);", rank0)
    assert match, rank0[-2000:]
    step = int(match.group(1))
    assert step % 50 == 0  # Agreed at a loop boundary.
    checkpoints = sorted(p.name for p in model_dir.glob("ckpt-*"))
    assert checkpoints == [f"ckpt-{step}"]
    assert _rank_stdout(log_dir, 1) == ""  # Rank 1 writes no logs.

    # The same command (with a reachable target) resumes from the agreed step.
    target = step + 50
    proc = _launch(model_dir, tmp_path / "logs2",
                   OVERRIDES.replace("trainer.train_steps=100000000", f"trainer.train_steps={target}"))
    out, _ = proc.communicate(timeout=240)
    assert proc.returncode == 0, out[-3000:]
    assert f"restored model from {model_dir / f'ckpt-{step}'}" in _rank_stdout(tmp_path / "logs2", 0)
    assert (model_dir / f"ckpt-{target}").is_dir()
