"""Elastic restarts never hang: under ``torchrun --max-restarts`` a rank killed at any moment
(during start-up, mid-step, mid-save, anywhere while training) is restarted with the others,
and the job resumes from its newest complete checkpoint, ending with the weights of the
uninterrupted run bit for bit, every round, within a bound.

torchrun's agent keeps one store for all its restarts; before torchgarden namespaced the
process group by restart attempt, a restarted rank could read a dead peer's address from
the previous attempt and wait for it (issue 27: 1 try in 4 sat there for minutes).
``TG_ELASTIC_ROUNDS=100`` runs a longer version by hand.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.distributed

FAULTY_CLI = str(Path(__file__).resolve().parents[1] / "resilience" / "faulty_cli.py")
ROUNDS = int(os.environ.get("TG_ELASTIC_ROUNDS", "20"))
STEPS = 1500
OVERRIDES = (
    f"runtime.distribution_strategy=ddp,trainer.train_steps={STEPS},trainer.steps_per_loop=50,"
    "trainer.summary_interval=50,trainer.checkpoint_interval=100,trainer.max_to_keep=3,"
    "runtime.seed=1,runtime.deterministic=true,runtime.distributed_timeout=0.5"
)
#: Seconds one round may take: a start, a kill, the peers stopped, a restart, the rest of
#: the training (about 10 s here); a rank waiting on a dead peer gives up after the
#: 30 s distributed_timeout, so a hang would show as a round over this bound.
BOUND_S = 120


def _launch(model_dir: Path, log_dir: Path, **env: str) -> subprocess.Popen:
    environ = {k: v for k, v in os.environ.items()
               if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK") and not k.startswith("TG_FAULT")}
    environ.update(OMP_NUM_THREADS="1", **env)
    return subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
         "--max-restarts", "3", "--redirects", "3", "--log-dir", str(log_dir), FAULTY_CLI,
         "train", "--experiment", "toy_regression", "--mode", "train", "--model_dir",
         str(model_dir), "--params_override", OVERRIDES],
        env=environ, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )


def _worker_pids(model_dir: Path) -> dict[int, int]:
    """This job's worker pids by RANK (found through /proc), in its current attempt."""
    pids: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            if str(model_dir).encode() not in cmdline or FAULTY_CLI.encode() not in cmdline:
                continue
            environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        for item in environ:
            if item.startswith(b"RANK="):
                pids[int(item.split(b"=")[1])] = int(entry)
    return pids


def _rank_pid(model_dir: Path, rank: int, job: subprocess.Popen, start: float) -> int:
    """The pid of ``rank``'s worker, waited for: between torchrun's restarts of the group
    (a slow start-up on a loaded machine) no process has the rank for a moment."""
    while (pid := _worker_pids(model_dir).get(rank)) is None:
        assert job.poll() is None and time.monotonic() - start < BOUND_S, (
            f"rank {rank}'s worker was not found before the job ended or {BOUND_S} s passed")
        time.sleep(0.05)
    return pid


def _weights(model_dir: Path) -> dict[str, torch.Tensor]:
    state = torch.load(model_dir / f"ckpt-{STEPS}" / "state.pt", weights_only=True)
    return state["model"]


def _plan(index: int) -> tuple[str, dict[str, str], float]:
    """Round ``index``'s fault: (kind, faulty_cli env, seconds before an external kill)."""
    rng = random.Random(index)
    kind = ("start-up", "mid-step", "mid-save", "running")[index % 4]
    rank = rng.randrange(2)
    if kind == "mid-step":
        return kind, {"TG_FAULT": f"step:{rng.randrange(2, STEPS)}",
                      "TG_FAULT_WHERE": f"{rank}:0"}, 0.0
    if kind == "mid-save":  # One file format: rank 0 writes.
        phase = rng.choice(["state", "meta", "rename", "retention", "rmtree"])
        step = rng.choice(range(400, STEPS, 100))
        return kind, {"TG_FAULT": f"save:{step}:{phase}", "TG_FAULT_WHERE": "0:0"}, 0.0
    return kind, {"TG_RANK": str(rank)}, rng.uniform(0.1, 1.5)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, torch.Tensor]:
    root = tmp_path_factory.mktemp("uninterrupted")
    done = _launch(root / "run", root / "logs")
    output, _ = done.communicate(timeout=BOUND_S)
    assert done.returncode == 0, output[-3000:]
    return _weights(root / "run")


@pytest.mark.parametrize("index", range(ROUNDS))
def test_a_killed_rank_restarts_and_the_job_ends_with_the_uninterrupted_weights(
        index, uninterrupted, tmp_path):
    kind, env, delay = _plan(index)
    model_dir, log_dir = tmp_path / "run", tmp_path / "logs"
    start = time.monotonic()
    job = _launch(model_dir, log_dir, **{k: v for k, v in env.items() if k.startswith("TG_FAULT")})
    try:
        if kind in ("start-up", "running"):
            # start-up: a worker as soon as it exists; running: once summaries are written.
            while time.monotonic() - start < BOUND_S and not (
                    len(_worker_pids(model_dir)) == 2
                    and (kind == "start-up" or (model_dir / "train").exists())):
                time.sleep(0.05)
            time.sleep(delay if kind == "running" else delay / 3)
            os.kill(_rank_pid(model_dir, int(env["TG_RANK"]), job, start), signal.SIGKILL)
        output, _ = job.communicate(timeout=BOUND_S)
    finally:
        if job.poll() is None:
            job.kill()
            job.communicate()
    took = time.monotonic() - start
    assert job.returncode == 0, f"{kind}: {output[-3000:]}"
    assert list(log_dir.glob("*/attempt_1")), f"{kind}: no restart happened ({env})"
    logs = "".join(f.read_text(errors="replace") for f in log_dir.rglob("stderr.log"))
    assert "Connection refused" not in logs, f"{kind}: a rank met a dead peer's address"
    assert took < BOUND_S, f"{kind}: the round took {took:.0f} s"
    for name, value in _weights(model_dir).items():
        assert torch.equal(value, uninterrupted[name]), f"{kind} ({env}): {name} differs"
    print(f"round {index} ({kind}, {env}, kill after {delay:.2f} s): {took:.1f} s")


def test_a_hung_rank_makes_the_others_fail_in_one_line_within_the_timeout(tmp_path, uninterrupted):
    """A rank that hangs (SIGSTOP) instead of dying: the other gives up at its next
    collective after runtime.distributed_timeout (0.5 min here) with one line and exit 4,
    torchrun stops the hung one and restarts both, and the job still ends as uninterrupted."""
    model_dir, log_dir = tmp_path / "run", tmp_path / "logs"
    start = time.monotonic()
    job = _launch(model_dir, log_dir)
    try:
        while time.monotonic() - start < BOUND_S and not (model_dir / "train").exists():
            time.sleep(0.05)
        os.kill(_worker_pids(model_dir)[1], signal.SIGSTOP)
        output, _ = job.communicate(timeout=BOUND_S)
    finally:
        if job.poll() is None:
            job.kill()
            job.communicate()
    assert job.returncode == 0, output[-3000:]
    assert "(exitcode: 4)" in output
    (first,) = log_dir.glob("*/attempt_0/0/stderr.log")
    lines = [line for line in first.read_text().splitlines() if line.startswith("torchgarden")]
    assert len(lines) == 1 and lines[0].startswith("torchgarden: error: rank 0: a collective "
                                                  "with the other ranks failed"), lines
    assert "runtime.distributed_timeout=0.5 min" in lines[0]
    for name, value in _weights(model_dir).items():
        assert torch.equal(value, uninterrupted[name]), name
