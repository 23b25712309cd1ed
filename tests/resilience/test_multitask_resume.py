"""Multi-task runs resume exactly: the sampler, every task's data position and open
averaging window are in the checkpoint (random SIGKILLs: ``test_kill_resume.py``'s
``multitask_train_and_eval`` case)."""

from __future__ import annotations

import os
import random

import pytest
from resilience_tools import CASES, cli_args, load_state, run_cli, run_differences

SEED = int(os.environ.get("TG_RESILIENCE_SEED", "5"))


@pytest.mark.slow
def test_a_multitask_run_preempted_mid_loop_resumes_bitwise(reference, tmp_path):
    step = random.Random(f"{SEED}-multitask").choice([s for s in range(3, 58) if s % 5])
    experiment, override, mode = CASES["multitask_train_and_eval"]
    model_dir = str(tmp_path / "run")
    args = cli_args(experiment, model_dir, override, mode)

    stopped = run_cli(args, fault=f"signal:{step}:SIGUSR1")
    assert stopped.returncode == 143, stopped.stderr[-3000:]
    state = load_state(os.path.join(model_dir, f"ckpt-{step}"))
    assert sum(state["task_steps"].values()) == step
    windows = state["task_windows"]  # The loop's partial windows wait for the resumed run.
    assert sum(window["loss"]["count"] for window in windows.values()) == step % 5
    resumed = run_cli(args)

    print(f"seed={SEED} SIGUSR1 at step {step}")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert run_differences(reference("multitask_train_and_eval"), model_dir,
                           ("train", "validation")) == []
