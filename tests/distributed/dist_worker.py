"""The per-rank program of the distributed tests; started by ``torchrun``.

    python -m torch.distributed.run --standalone --nproc_per_node 2 dist_worker.py \\
        --strategy ddp --out DIR [--resume_dir DIR]

Runs every scenario in one launch (start-up dominates) and leaves what the tests check
under ``--out``: checkpoints and summaries written by the runs, and ``results.json``
(rank 0) with the logs, per-rank write counts and gradient-sync observations.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

import torch
import torch.distributed as dist
from dist_scenarios import (
    GatheringToyTask,
    digits_params,
    rank_batches,
    run,
    toy_params,
)

import torchgarden as tg
from torchgarden import distribute
from torchgarden.checkpoint import best, layout


class WriteCounter:
    """Counts this rank's checkpoint-directory publications and JSON writes."""

    def __init__(self) -> None:
        self.checkpoints = 0
        self.json_files = 0
        publish, write_json = layout.publish, best.atomic_write_json

        def counted_publish(*args: Any, **kwargs: Any) -> Any:
            self.checkpoints += 1  # Either format: meta.json written, renamed into place.
            return publish(*args, **kwargs)

        def counted_json(*args: Any, **kwargs: Any) -> Any:
            self.json_files += 1
            return write_json(*args, **kwargs)

        layout.publish = counted_publish
        best.atomic_write_json = counted_json  # The best-checkpoint logs.


def ddp_allreduce_counter(trainer: Any) -> list[int]:
    """Registers a DDP comm hook on the trainer's model that counts bucket all-reduces."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    calls: list[int] = []

    def counting_hook(state, bucket):  # DDP checks the annotations: leave them out.
        calls.append(1)
        return allreduce_hook(state, bucket)

    trainer.model.register_comm_hook(None, counting_hook)
    return calls


def gradient_sync_observations(strategy: str, out: str) -> dict[str, Any]:
    """Backward passes with ``distribute.set_gradient_sync`` off, then on.

    DDP: all-reduces counted by a comm hook. FSDP2: with sync off the sharded
    parameters get no gradient (it stays unsharded and local); with sync on they get
    the reduce-scattered mean.
    """
    from torchgarden.runtime import setup_runtime
    from torchgarden.train_lib import create_trainer

    params = toy_params(strategy)
    task = tg.get_task(params.task)
    trainer = create_trainer(
        params, task, train=True, evaluate=False, model_dir=out,
        runtime=setup_runtime(params.runtime),
    )
    model = trainer.model
    calls = ddp_allreduce_counter(trainer) if strategy == "ddp" else []
    x = torch.full((4, 8), float(distribute.get_rank() + 1))
    observed: dict[str, Any] = {}
    for phase, enabled in (("off", False), ("on", True)):
        distribute.set_gradient_sync(model, enabled)
        before = len(calls)
        model(x).sum().backward()
        observed[f"allreduces_{phase}"] = len(calls) - before
        observed[f"grad_set_{phase}"] = all(
            p.grad is not None for p in trainer.unwrapped_model.parameters()
        )
    # Summed over both backward passes: sum(x) per input row, 4 rows, both ranks' mean.
    weight = dict(trainer.unwrapped_model.named_parameters())["weight"]
    grad = weight.grad.full_tensor() if hasattr(weight.grad, "full_tensor") else weight.grad
    observed["weight_grad"] = grad.reshape(-1).tolist()
    return observed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--strategy", choices=("ddp", "fsdp"), required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--resume_dir", required=True)
    args = parser.parse_args()
    strategy, out = args.strategy, args.out
    counter = WriteCounter()
    results: dict[str, Any] = {"strategy": strategy}

    toy_dir = os.path.join(out, "toy")
    results["toy"] = run(toy_params(strategy), toy_dir)
    rank = distribute.get_rank()
    results["world_size"] = distribute.get_world_size()
    results["pids"] = distribute.all_gather_object(os.getpid())

    # The data each rank's Trainer sees: 2 epochs of 8 steps.
    batches = rank_batches(toy_params(strategy), 16)
    gathered = distribute.all_gather_object([b.tolist() for b in batches])
    results["rank_batches"] = gathered

    # A Python evaluator gathered across ranks, on the trained toy checkpoint.
    evaluated = run(
        toy_params(strategy), toy_dir, mode="eval", task=GatheringToyTask(toy_params().task)
    )
    results["evaluator"] = evaluated["eval"]

    results["digits"] = run(digits_params(strategy), os.path.join(out, "digits"))

    # Resume at world size 2 from a checkpoint written by one process.
    results["resume"] = run(toy_params(strategy), args.resume_dir)

    # Gradient accumulation (2 micro-steps per step); DDP all-reduces are counted.
    hooks: list[list[int]] = []

    def count_allreduces(trainer: Any) -> None:
        if strategy == "ddp":
            hooks.append(ddp_allreduce_counter(trainer))

    accumulate = toy_params(strategy, **{"trainer.gradient_accumulation_steps": 2})
    results["accumulation"] = run(
        accumulate, os.path.join(out, "accum"), on_trainer=count_allreduces
    )
    results["accumulation_allreduces"] = len(hooks[0]) if hooks else None

    if strategy == "fsdp":
        ema = toy_params(strategy, **{"trainer.optimizer_config.ema": {"average_decay": 0.9}})
        results["ema"] = run(ema, os.path.join(out, "ema"))

    results["gradient_sync"] = gradient_sync_observations(strategy, os.path.join(out, "sync"))
    results["writes"] = distribute.all_gather_object(
        {"checkpoints": counter.checkpoints, "json_files": counter.json_files}
    )
    if rank == 0:
        with open(os.path.join(out, "results.json"), "w", encoding="utf-8") as f:
            json.dump(results, f)
    distribute.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    distribute.exit_worker(0)  # Not the interpreter's exit: it can abort under gloo.
