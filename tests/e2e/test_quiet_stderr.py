"""Stderr holds nothing that reads like a failure on a run that succeeds: no profiler
``USDT ... profiler_start`` lines from Kineto (issue 22). The command runs in a fresh
process: Kineto reads its log level once per process."""

from __future__ import annotations

import os
import subprocess
import sys


def test_a_profiled_run_prints_nothing_on_stderr(tmp_path):
    model_dir = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k != "KINETO_LOG_LEVEL"}
    env["OMP_NUM_THREADS"] = "1"
    result = subprocess.run(
        [sys.executable, "-m", "torchgarden", "train", "--experiment", "toy_regression",
         "--mode", "train", "--model_dir", str(model_dir), "--params_override",
         "trainer.train_steps=10,trainer.steps_per_loop=5,trainer.summary_interval=5,"
         "trainer.profile_steps=[6,10]"],
        capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "USDT" not in result.stderr and "profiler_start" not in result.stderr
    assert result.stderr.strip() == ""
    traces = os.listdir(model_dir / "profile")
    assert any(name.endswith(".pt.trace.json") for name in traces), traces
