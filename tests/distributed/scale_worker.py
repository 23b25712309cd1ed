"""The per-rank program of the scale tests (issue 13); started by ``torchrun``.

    python -m torch.distributed.run --standalone --nproc_per_node N scale_worker.py \\
        --scenario {main,eval,resume,kill} --out DIR --reference DIR [--kill_at STEP]

* ``main`` (2 ranks): FSDP2 toy runs saved with DCP (synchronously and asynchronously),
  a resume of the step-10 checkpoint at 2 ranks, the three streaming sources (stopped
  at step 8 and resumed), and the three evaluations;
* ``eval`` (3 ranks): the three evaluations;
* ``resume`` (4 ranks): the step-10 DCP checkpoint of ``main`` resumed;
* ``kill``: the toy DCP run again; with ``--kill_at N`` rank 1 SIGKILLs itself once its
  shards of checkpoint N are written (before the checkpoint is published).

Rank 0 writes ``results.json`` under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
from pathlib import Path
from typing import Any

import scale_scenarios as scale
import torch.distributed as dist
from dist_scenarios import run, toy_params

from torchgarden import distribute


def _copy_checkpoint(source: Path, step: int, target: Path) -> Path:
    if distribute.get_rank() == 0:
        target.mkdir(parents=True)
        shutil.copytree(source / f"ckpt-{step}", target / f"ckpt-{step}")
    distribute.barrier()
    return target


def _kill_rank_one_at(step: int) -> None:
    """Rank 1 dies (SIGKILL) right after writing its shards of checkpoint ``step``."""
    import torch.distributed.checkpoint as dcp

    original = dcp.FileSystemWriter.write_data

    def write_then_die(self: Any, plan: Any, planner: Any) -> Any:
        written = original(self, plan, planner)
        if distribute.get_rank() == 1 and f".ckpt-{step}.tmp-" in str(self.path):
            written.wait()
            os.kill(os.getpid(), signal.SIGKILL)
        return written

    dcp.FileSystemWriter.write_data = write_then_die


def evaluations(args: argparse.Namespace) -> dict[str, Any]:
    reference = Path(args.reference)
    return {name: scale.evaluate(name, reference / "trained" / name, reference / "shapes",
                                 Path(args.out) / "eval", scale.EVAL_STRATEGIES[name])
            for name in scale.EVAL_TASKS}


def main_scenario(args: argparse.Namespace) -> dict[str, Any]:
    out = Path(args.out)
    results: dict[str, Any] = {"toy": run(toy_params("fsdp"), out / "toy")}
    results["toy_async"] = run(
        toy_params("fsdp", **{"trainer.enable_async_checkpointing": True}), out / "toy_async")
    results["resume2"] = run(toy_params("fsdp"), _copy_checkpoint(out / "toy", 10,
                                                                  out / "resume2"))
    data_root = Path(args.reference) / "stream_data"
    strategies = {"datasets": "ddp", "datasets_streaming": "fsdp", "webdataset": "ddp"}
    for source, strategy in strategies.items():
        scale.run_stream(source, data_root, out / "stream" / source, strategy)
    results["eval"] = evaluations(args)
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scenario", choices=("main", "eval", "resume", "kill"), required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--reference", required=True)
    parser.add_argument("--kill_at", type=int, default=0)
    args = parser.parse_args()
    out = Path(args.out)
    dist.init_process_group("gloo")  # Now, so that rank 0 alone copies the inputs.
    if args.scenario == "main":
        results = main_scenario(args)
    elif args.scenario == "eval":
        results = {"eval": evaluations(args)}
    elif args.scenario == "resume":
        source = Path(args.reference)
        results = {"resume": run(toy_params("fsdp"), _copy_checkpoint(source, 10, out / "r"))}
    else:
        if args.kill_at:
            _kill_rank_one_at(args.kill_at)
        results = {"toy": run(toy_params("fsdp"), out / "toy")}
    results["world_size"] = distribute.get_world_size()
    if distribute.get_rank() == 0:
        with open(out / "results.json", "w", encoding="utf-8") as f:
            json.dump(results, f)
    distribute.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    distribute.exit_worker(0)  # Not the interpreter's exit: it can abort under gloo.
