"""Preemption under torchrun: a signal to ONE rank stops every rank at the same step,
after the checkpoint is written (by rank 0, or under FSDP2 by every rank's DCP shards);
the same command then resumes from it."""

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
    "trainer.checkpoint_interval=100000000,runtime.distribution_strategy={strategy},"
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


def _stop_one_rank(model_dir: Path, log_dir: Path, overrides: str) -> int:
    """Launches 2 ranks, SIGTERMs rank 1 once training runs; returns the preempted step."""
    proc = _launch(model_dir, log_dir, overrides)
    try:
        deadline = time.time() + 240
        while time.time() < deadline and not (model_dir / "train").exists():
            time.sleep(0.5)  # The first summaries are written after the first loop.
        assert (model_dir / "train").exists(), "training never started"
        pids = _rank_pids(model_dir)
        assert set(pids) == {0, 1}, pids
        os.kill(pids[1], signal.SIGTERM)  # Only rank 1 is told to stop.
        output, _ = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
    # Each rank exits with 143 (a requeue status) after the checkpoint. The first to exit
    # makes torchrun SIGTERM the others, so one still on its way out may show -15.
    codes = set(re.findall(r"exitcode  : (-?\d+) \(pid", output))
    assert "143" in codes and codes <= {"143", "-15"}, output[-3000:]
    rank0 = _rank_stdout(log_dir, 0)
    match = re.search(r"preempted at step (\d+): checkpoint (\S+);", rank0)
    assert match, rank0[-2000:]
    step = int(match.group(1))
    assert step % 50 == 0  # Agreed at a loop boundary.
    checkpoints = sorted(p.name for p in model_dir.glob("ckpt-*"))
    assert checkpoints == [f"ckpt-{step}"]
    assert _rank_stdout(log_dir, 1) == ""  # Rank 1 writes no logs.
    return step


def test_signal_to_one_rank_stops_both_at_the_same_step_and_resumes(tmp_path):
    model_dir = tmp_path / "run"
    step = _stop_one_rank(model_dir, tmp_path / "logs", OVERRIDES.format(strategy="ddp"))

    # The same command (with a reachable target) resumes from the agreed step.
    target = step + 50
    overrides = OVERRIDES.format(strategy="ddp")
    proc = _launch(model_dir, tmp_path / "logs2",
                   overrides.replace("trainer.train_steps=100000000", f"trainer.train_steps={target}"))
    out, _ = proc.communicate(timeout=240)
    assert proc.returncode == 0, out[-3000:]
    assert f"restored model from {model_dir / f'ckpt-{step}'}" in _rank_stdout(tmp_path / "logs2", 0)
    assert (model_dir / f"ckpt-{target}").is_dir()


def test_signal_to_one_fsdp_rank_saves_every_ranks_dcp_shards(tmp_path):
    """FSDP2 writes DCP checkpoints: both ranks write their shards of the agreed step."""
    from torchgarden.checkpoint import CheckpointManager, read_full_state, read_meta

    model_dir = tmp_path / "run"
    step = _stop_one_rank(model_dir, tmp_path / "logs", OVERRIDES.format(strategy="fsdp"))
    path = model_dir / f"ckpt-{step}"
    CheckpointManager.verify(path)
    assert read_meta(path)["format"] == "dcp"
    assert sorted(p.name for p in path.glob("*.distcp")) == ["__0_0.distcp", "__1_0.distcp"]
    state = read_full_state(path)  # What a resumed run (at any world size) restores.
    assert state["global_step"] == {"value": step}
    assert state["train_iterator"]["epoch"] * 8 + state["train_iterator"]["batches_in_epoch"] \
        == step  # 256 examples / global batch 32 = 8 steps per epoch
