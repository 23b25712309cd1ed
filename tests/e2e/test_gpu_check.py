"""The prepared GPU check (benchmarks/gpu_check.py) runs end to end on a CPU at tiny sizes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

pytestmark = pytest.mark.slow


def test_the_gpu_check_writes_every_figure_on_a_cpu(tmp_path):
    out = tmp_path / "gpu_check"
    command = [
        sys.executable, "benchmarks/gpu_check.py", "--tiny", "--device", "cpu", "--out",
        str(out), "--steps", "2", "--rounds", "1", "--warmup", "1", "--resnet-batch", "4",
        "--jpeg-images", "16", "--workers", "1", "--resnet-name", "transformers/resnet",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=env,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads((out / "gpu_check.json").read_text())
    gpt, resnet, tests = (report["parts"][k] for k in ("gpt2", "resnet50", "tests"))
    assert "error" not in gpt and "error" not in resnet, (gpt, resnet)
    assert gpt["torchgarden_tokens_per_s"] > 0 and gpt["hand_written_tokens_per_s"] > 0
    assert gpt["ratio"] == pytest.approx(
        gpt["torchgarden_tokens_per_s"] / gpt["hand_written_tokens_per_s"])
    assert gpt["checkpoint_gb"] > 0 and gpt["restore_gb_per_s"] > 0
    assert resnet["jpeg_images_per_s"] > 0 and 0 <= resnet["jpeg_data_wait_fraction"] <= 1
    assert tests["failures"] == 0 and tests["tests"] == tests["skipped"]  # no CUDA here
    table = (out / "gpu_check.md").read_text()
    assert "| gpt2 | ratio |" in table and "| resnet50 | jpeg_images_per_s |" in table
