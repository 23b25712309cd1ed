"""Adversarial table, concurrency and process-fault groups: real processes on one model_dir.

A trainer is paused mid-run (``faulty_cli``'s ``TG_FAULT_HOLD``) while it holds its
model_dir's lock; other real ``python -m torchgarden`` processes then try to write or read
the same model_dir. Each refused process must exit 2 with one line naming the holder,
and leave the model_dir byte-identical; readers must write only under ``eval/``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from resilience_tools import FAULTY_CLI, TIMEOUT, child_env, run_cli
from table import tree

from torchgarden.checkpoint import CheckpointManager
from torchgarden.train_lib.run_lock import LOCK_FILE

pytestmark = pytest.mark.slow

TOY = ["--experiment", "toy_regression"]
OVERRIDE = ("trainer.train_steps=20,trainer.steps_per_loop=5,trainer.summary_interval=5,"
            "trainer.checkpoint_interval=5,trainer.max_to_keep=10,runtime.seed=3")


class Held:
    """A ``train`` process paused at ``step`` while holding the lock, until released."""

    def __init__(self, tmp_path, model_dir: str, *, step: int, mode: str = "train") -> None:
        self.gate = str(tmp_path / f"gate-{step}")
        env = child_env(TG_FAULT_HOLD=f"{step}:{self.gate}")
        self.process = subprocess.Popen(
            [sys.executable, FAULTY_CLI, "train", *TOY, "--mode", mode, "--model_dir", model_dir,
             "--params_override", OVERRIDE],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        self.output: list[str] = []
        for line in self.process.stdout:  # type: ignore[union-attr]
            self.output.append(line)
            if line.startswith(f"faulty_cli: holding at step {step}"):
                return
        raise AssertionError("".join(self.output) + self.process.stderr.read())

    def release(self) -> tuple[int, str]:
        with open(self.gate, "w"):
            pass
        out, err = self.process.communicate(timeout=TIMEOUT)
        return self.process.returncode, err

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.communicate(timeout=TIMEOUT)


def start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "torchgarden", *args], env=child_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(process: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=TIMEOUT)
    return process.returncode, out, err


def refused_by(err: str, holder: int) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("torchgarden: error: ") and "is in use" in lines[0], err
    assert f"pid {holder} on host" in lines[0] and LOCK_FILE in lines[0], err
    return lines[0]


def test_a_second_trainer_is_refused_and_changes_nothing(tmp_path):
    model_dir = str(tmp_path / "run")
    bad_data = str(tmp_path / "missing.npz")
    held = Held(tmp_path, model_dir, step=8)  # ckpt-5 written, the lock held.
    before = tree(model_dir)
    # Another model, and a run that would fail on its data (and clean up "its" model_dir).
    other = start("train", *TOY, "--mode", "train", "--model_dir", model_dir,
                  "--params_override", OVERRIDE + ",task.hidden_size=4")
    broken = start("train", "--experiment", "image_classification", "--mode", "train",
                   "--model_dir", model_dir, "--params_override",
                   f"task.train_data.source=npz,task.train_data.input_path={bad_data}")
    for process in (other, broken):
        code, _, err = finish(process)
        assert code == 2
        print(refused_by(err, held.process.pid))
    assert tree(model_dir) == before

    code, err = held.release()
    assert code == 0, err
    CheckpointManager.verify(os.path.join(model_dir, "ckpt-20"))
    with open(os.path.join(model_dir, "ckpt-20", "meta.json")) as f:
        assert json.load(f)["config"]["task"]["hidden_size"] == 0  # The holder's config.
    assert not os.path.exists(os.path.join(model_dir, LOCK_FILE))


def test_two_trainers_started_together_one_wins(tmp_path):
    model_dir = str(tmp_path / "run")
    runs = [start("train", *TOY, "--mode", "train", "--model_dir", model_dir,
                  "--params_override", OVERRIDE + ",trainer.train_steps=2000,"
                  f"task.hidden_size={width}") for width in (0, 4)]
    results = [finish(process) for process in runs]
    codes = sorted(code for code, _, _ in results)
    if codes == [0, 0]:  # One finished before the other started: then it must resume it.
        pytest.skip("the two runs did not overlap on this machine")
    assert codes == [0, 2], [err for _, _, err in results]
    winner = [p for p, (code, _, _) in zip(runs, results) if code == 0][0]
    loser_err = [err for code, _, err in results if code == 2][0]
    print(refused_by(loser_err, winner.pid))
    width = 0 if winner is runs[0] else 4
    for name in os.listdir(model_dir):
        if name.startswith("ckpt-"):
            with open(os.path.join(model_dir, name, "meta.json")) as f:
                assert json.load(f)["config"]["task"]["hidden_size"] == width


def test_a_killed_trainers_lock_never_blocks(tmp_path):
    model_dir = str(tmp_path / "run")
    held = Held(tmp_path, model_dir, step=8)
    held.kill()
    with open(os.path.join(model_dir, LOCK_FILE)) as f:
        assert json.load(f)["pid"] == held.process.pid  # Left behind by SIGKILL...
    result = run_cli(["train", *TOY, "--mode", "train", "--model_dir", model_dir,
                      "--params_override", OVERRIDE], plain=True)
    assert result.returncode == 0, result.stderr  # ...and ignored: the kernel dropped it.
    assert "restored model from" in result.stdout and "ckpt-5" in result.stdout
    assert not os.path.exists(os.path.join(model_dir, LOCK_FILE))


def test_evaluators_write_only_under_eval_and_one_at_a_time(tmp_path):
    model_dir = str(tmp_path / "run")
    held = Held(tmp_path, model_dir, step=13, mode="train_and_eval")  # ckpt-10 exists.
    trainer_files = tree(model_dir)
    follower = start("eval", "--mode", "continuous_eval", "--model_dir", model_dir,
                     "--params_override", "trainer.continuous_eval_timeout=1")
    seen = []
    for line in follower.stdout:  # type: ignore[union-attr]
        seen.append(line)
        if line.startswith(" eval | step:     10 |") and "output" in line:
            break  # It evaluated ckpt-10 while the trainer is paused (and still holds it).
    assert seen and "output" in seen[-1], "".join(seen) + follower.stderr.read()
    once = start("eval", "--model_dir", model_dir)  # A second evaluator: refused.
    code, _, err = finish(once)
    assert code == 2 and "evaluation directory" in err and "in use" in err, err
    assert len(err.strip().splitlines()) == 1, err
    # The evaluators wrote nothing where the trainer writes.
    outside_eval = {k: v for k, v in tree(model_dir).items() if k.split(os.sep)[0] != "eval"}
    assert outside_eval == trainer_files
    assert any("tfevents" in name for name in os.listdir(os.path.join(model_dir, "eval")))

    code, err = held.release()
    assert code == 0, err
    code, out, err = finish(follower)  # Stops once the checkpoint of step 20 is evaluated.
    assert code == 0, err
    assert "config read from" in "".join(seen) and " eval | step:     20 |" in out
    assert not os.path.exists(os.path.join(model_dir, "eval", LOCK_FILE))
