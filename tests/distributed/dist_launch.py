"""Starting ``dist_worker.py`` under torchrun and reading what its ranks left behind."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

WORKER = Path(__file__).with_name("dist_worker.py")
#: Wall-clock limit of one torchrun launch (it takes ~25 s on 2 busy cores).
LAUNCH_TIMEOUT_S = 300


def copy_checkpoint(source_dir: Path, step: int, target_dir: Path) -> Path:
    """Copies ``source_dir/ckpt-<step>`` into a fresh ``target_dir`` (a run to resume)."""
    target_dir.mkdir(parents=True)
    shutil.copytree(source_dir / f"ckpt-{step}", target_dir / f"ckpt-{step}")
    return target_dir


def rank_log(out: Path, rank: int, stream: str) -> str:
    """What rank ``rank`` wrote to ``stream`` (``stdout``/``stderr``) under torchrun."""
    found = glob.glob(str(out / "logs" / "*" / "attempt_0" / str(rank) / f"{stream}.log"))
    if not found:
        return ""
    return Path(found[0]).read_text(encoding="utf-8", errors="replace")


def launch(strategy: str, out: Path, resume_dir: Path) -> dict[str, Any]:
    """Runs ``dist_worker.py`` on 2 gloo ranks and returns rank 0's ``results.json``."""
    return launch_script(WORKER, ["--strategy", strategy, "--out", str(out),
                                  "--resume_dir", str(resume_dir)], out, nprocs=2)


def launch_script(script: Path, args: list[str], out: Path, *, nprocs: int,
                  expect_failure: bool = False, logs: str = "logs") -> dict[str, Any]:
    """Runs ``script`` on ``nprocs`` gloo ranks; returns rank 0's ``out/results.json``
    (``{}`` when the launch is expected to fail, which it then must). The ranks' output
    goes to ``out/<logs>``."""
    import json

    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone",
        "--nproc_per_node", str(nprocs), "--redirects", "3", "--log-dir", str(out / logs),
        str(script), *args,
    ]
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}
    env["OMP_NUM_THREADS"] = "1"
    out.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=LAUNCH_TIMEOUT_S
    )
    if expect_failure:
        assert done.returncode != 0, "the launch was expected to fail"
        return {}
    if done.returncode != 0:
        tails = "\n".join(
            f"--- rank {r} stderr ---\n" + rank_log(out, r, "stderr")[-3000:]
            for r in range(nprocs)
        )
        pytest.fail(f"torchrun {script.name} {args} exited with {done.returncode}:\n"
                    f"{done.stderr[-2000:]}\n{tails}")
    with open(out / "results.json", encoding="utf-8") as f:
        return json.load(f)
