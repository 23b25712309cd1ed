"""Multi-task training under torchrun (2 gloo ranks, DDP) against one process.

Every rank must draw the same task at every step (same seeded sampler), the DDP-synced
weights must be equal on both ranks, and they must match one process with the same
global batch up to float summation order (tolerances as in ``test_torchrun.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from dist_launch import LAUNCH_TIMEOUT_S, rank_log
from multitask_worker import multitask_params

import torchgarden as tg
from torchgarden.train_lib import run_experiment

pytestmark = pytest.mark.distributed

WORKER = Path(__file__).with_name("multitask_worker.py")


@pytest.fixture(scope="module")
def launched(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("multitask")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc_per_node", "2", "--redirects", "3", "--log-dir", str(out / "logs"),
               str(WORKER), "--out", str(out)]
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}
    env["OMP_NUM_THREADS"] = "1"
    done = subprocess.run(command, env=env, capture_output=True, text=True,
                          timeout=LAUNCH_TIMEOUT_S)
    if done.returncode != 0:
        tails = "\n".join(f"--- rank {r} ---\n" + rank_log(out, r, "stderr")[-3000:]
                          for r in (0, 1))
        pytest.fail(f"torchrun exited with {done.returncode}:\n{done.stderr[-2000:]}\n{tails}")
    ranks = []
    for rank in (0, 1):
        with open(out / f"rank{rank}.json", encoding="utf-8") as f:
            ranks.append(json.load(f))
    return {"out": out, "ranks": ranks}


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The same runs in one process."""
    root = tmp_path_factory.mktemp("multitask_single")
    found = {}
    for trainer_type in ("interleaving", "joint"):
        params = multitask_params(trainer_type)
        model, logs = run_experiment(task=tg.get_task(params.task), mode="train_and_eval",
                                     params=params, model_dir=str(root / trainer_type))
        found[trainer_type] = (model.state_dict(), logs)
    return found


def test_every_rank_draws_the_same_task_at_every_step(launched):
    first, second = (rank["drawn"] for rank in launched["ranks"])
    assert launched["ranks"][0]["world_size"] == 2
    assert len(first) == 20 and first == second
    assert set(first) == {"digits", "parity"}


@pytest.mark.parametrize("trainer_type", ["interleaving", "joint"])
def test_weights_are_equal_on_both_ranks_and_match_one_process(launched, single, trainer_type):
    out = launched["out"]
    rank0, rank1 = (torch.load(out / f"rank{r}_{trainer_type}.pt", weights_only=True)
                    for r in (0, 1))
    for key in rank0:
        assert torch.equal(rank0[key], rank1[key]), key
    weights, logs = single[trainer_type]
    torch.testing.assert_close(rank0, weights, rtol=1e-5, atol=1e-6)
    ours = launched["ranks"][0][trainer_type]
    for task in ("digits", "parity"):  # 359 images; the sampler pads rank 1 with one more.
        assert ours[task]["accuracy"] == pytest.approx(float(logs[task]["accuracy"]),
                                                       abs=1 / 359 + 1e-6)


def test_rank_0_alone_writes_task_summaries_and_checkpoints(launched):
    run = launched["out"] / "interleaving"
    assert sorted(os.listdir(run / "validation")) == sorted(
        ["digits", "parity", *(n for n in os.listdir(run / "validation") if n.startswith("events"))])
    state = torch.load(run / "ckpt-20" / "state.pt", weights_only=True)
    assert sum(state["task_steps"].values()) == 20
    assert state["train_iterator"]["digits"]["batches_in_epoch"] == state["task_steps"]["digits"]
