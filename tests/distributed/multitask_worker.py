"""The per-rank program of the multi-task torchrun test; started by ``torchrun``.

    python -m torch.distributed.run --standalone --nproc_per_node 2 multitask_worker.py \\
        --out DIR

Runs the interleaving and the joint trainer on ``multitask_digits`` (DDP, 2 ranks) and
leaves, per rank, ``rank<R>.json`` (the tasks the sampler drew, the eval logs) and
``rank<R>_<trainer>.pt`` (the final weights) under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

import torch
import torch.distributed as dist

import torchgarden as tg
from torchgarden import distribute
from torchgarden.loop.logs import to_host
from torchgarden.multitask import TaskSampler
from torchgarden.runtime import setup_runtime, teardown_runtime
from torchgarden.train_lib import run_experiment

TRAIN_STEPS = 20


def multitask_params(trainer_type: str, strategy: str = "single") -> tg.ExperimentConfig:
    """``multitask_digits`` for 20 steps: global batch 64 per task, evaluation at 10, 20."""
    params = tg.get_experiment("multitask_digits")
    params.override({
        "task.model.hidden_sizes": [16],
        "trainer.trainer_type": trainer_type,
        "trainer.train_steps": TRAIN_STEPS,
        "trainer.steps_per_loop": 5,
        "trainer.summary_interval": 5,
        "trainer.checkpoint_interval": 10,
        "trainer.validation_interval": 10,
        "trainer.optimizer_config.learning_rate.cosine.decay_steps": TRAIN_STEPS,
        "trainer.optimizer_config.warmup.linear.warmup_steps": 5,
        "trainer.progress_bar": False,
        "runtime.distribution_strategy": strategy,
        "runtime.device": "cpu",
        "runtime.num_threads": 1,
    })
    return params.validate()


def record_draws() -> list[str]:
    """Appends every task the sampler draws (on this rank) to the returned list."""
    drawn: list[str] = []
    sample = TaskSampler.sample

    def recorded(self: TaskSampler, global_step: int) -> str:
        drawn.append(sample(self, global_step))
        return drawn[-1]

    TaskSampler.sample = recorded  # type: ignore[method-assign]
    return drawn


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    out = parser.parse_args().out
    drawn = record_draws()
    results: dict[str, Any] = {}
    first = runtime = setup_runtime(multitask_params("joint", "ddp").runtime)
    try:
        for trainer_type in ("interleaving", "joint"):
            params = multitask_params(trainer_type, "ddp")
            runtime = setup_runtime(params.runtime)  # Seeds again: each run starts alike.
            model, logs = run_experiment(
                task=tg.get_task(params.task), mode="train_and_eval", params=params,
                model_dir=os.path.join(out, trainer_type), runtime=runtime)
            results[trainer_type] = to_host(logs)
            torch.save(model.state_dict(),
                       os.path.join(out, f"rank{runtime.rank}_{trainer_type}.pt"))
        results["drawn"] = drawn
        results["world_size"] = dist.get_world_size()
        with open(os.path.join(out, f"rank{runtime.rank}.json"), "w", encoding="utf-8") as f:
            json.dump(results, f)
    finally:
        teardown_runtime(first)


if __name__ == "__main__":
    main()
    distribute.exit_worker(0)  # Not the interpreter's exit: it can abort under gloo.
