"""Preemption: a signal means "checkpoint at the next step boundary, say where, exit 143".

The runs use ``trainer.preemption_signals=[SIGTERM,SIGUSR1]`` (SLURM's ``--signal``
sends SIGUSR1). Rerunning the same command after the exit must finish with the same
bits as a run that was never stopped.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys

import pytest
from resilience_tools import (
    CASES,
    FAULTY_CLI,
    TIMEOUT,
    checkpoint_dirs,
    child_env,
    cli_args,
    load_state,
    run_cli,
    run_differences,
)

from torchgarden.checkpoint import CheckpointManager

SEED = int(os.environ.get("TG_RESILIENCE_SEED", "5"))


def toy_args(model_dir: str, case: str = "toy") -> list[str]:
    experiment, override, mode = CASES[case]
    return cli_args(experiment, model_dir, override, mode)


def test_sigusr1_checkpoints_at_the_next_step_exits_143_and_resumes_bitwise(
    reference, tmp_path
):
    step = random.Random(f"{SEED}-preempt").choice([s for s in range(3, 58) if s % 5])
    model_dir = str(tmp_path / "run")

    stopped = run_cli(toy_args(model_dir), fault=f"signal:{step}:SIGUSR1")

    print(f"seed={SEED} SIGUSR1 at the start of step {step}")
    checkpoint = os.path.join(model_dir, f"ckpt-{step}")
    assert stopped.returncode == 143, stopped.stderr[-3000:]
    assert f"preempted at step {step}: checkpoint {checkpoint}; exiting." in stopped.stdout
    assert stopped.stderr.strip().splitlines()[-1] == (
        f"torchgarden: preempted at step {step}; checkpoint: {checkpoint}; exiting with "
        "status 143 so the job can be requeued."
    )
    CheckpointManager.verify(checkpoint)
    assert load_state(checkpoint)["global_step"]["value"] == step
    assert checkpoint_dirs(model_dir)[-1] == f"ckpt-{step}"

    resumed = run_cli(toy_args(model_dir))

    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"restored model from {checkpoint} at step {step}." in resumed.stdout
    assert run_differences(reference("toy"), model_dir) == []


def test_a_second_signal_aborts_at_once_without_a_checkpoint(tmp_path):
    model_dir = str(tmp_path / "run")

    aborted = run_cli(toy_args(model_dir), fault="signal:23:SIGUSR1+SIGUSR1")

    assert aborted.returncode == 128 + signal.SIGUSR1, aborted.stderr[-3000:]
    assert "second SIGUSR1: aborting without a checkpoint" in aborted.stderr
    assert checkpoint_dirs(model_dir) == ["ckpt-15", "ckpt-20"]  # Nothing new after step 20.
    CheckpointManager.verify(os.path.join(model_dir, "ckpt-20"))


def test_sigterm_from_outside_during_a_step_stops_at_the_next_boundary(tmp_path):
    model_dir = str(tmp_path / "run")
    process = subprocess.Popen(
        [sys.executable, FAULTY_CLI, *toy_args(model_dir)],
        env=child_env(TG_FAULT_STALL="23:2"),  # Step 23 takes 2 s: the signal lands by then.
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        for line in process.stdout:  # type: ignore[union-attr]
            if line.startswith("train | step:     20 | steps/sec"):
                process.send_signal(signal.SIGTERM)
                break
        out, err = process.communicate(timeout=TIMEOUT)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()

    assert process.returncode == 143, err[-3000:]
    assert "received SIGTERM: saving a checkpoint at the next step boundary" in err
    stop = int(checkpoint_dirs(model_dir)[-1].split("-")[1])
    assert 20 <= stop <= 23  # The loop end at 20 is a step boundary too.
    assert f"preempted at step {stop}: checkpoint {model_dir}/ckpt-{stop}; exiting." in out
    CheckpointManager.verify(os.path.join(model_dir, f"ckpt-{stop}"))


@pytest.mark.slow
def test_sigterm_to_the_whole_process_group_with_dataloader_workers(reference, tmp_path):
    """Schedulers signal every process of the job, DataLoader workers included."""
    model_dir = str(tmp_path / "run")
    process = subprocess.Popen(
        [sys.executable, FAULTY_CLI, *toy_args(model_dir, "toy_workers2")],
        env=child_env(TG_FAULT_STALL="23:3"), start_new_session=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        for line in process.stdout:  # type: ignore[union-attr]
            if line.startswith("train | step:     20 | steps/sec"):
                os.killpg(process.pid, signal.SIGTERM)
                break
        out, err = process.communicate(timeout=TIMEOUT)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()

    assert process.returncode == 143, err[-3000:]
    resumed = run_cli(toy_args(model_dir, "toy_workers2"))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert run_differences(reference("toy_workers2"), model_dir) == []
