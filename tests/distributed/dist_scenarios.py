"""Runs shared by the torchrun worker (2 ranks) and the single-process references.

Both sides build the same configs here, so a DDP/FSDP run and its reference differ
only in the number of processes (and ``runtime.distribution_strategy``).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch

import torchgarden as tg
from torchgarden import distribute
from torchgarden.loop.logs import to_host
from torchgarden.tasks.toy import ToyRegressionTask

#: Steps of every training run; checkpoints land at 10 and 20.
TRAIN_STEPS = 20
RESUME_STEP = 10


def toy_params(strategy: str = "single", **overrides: Any) -> tg.ExperimentConfig:
    """Toy regression: 256 train / 256 validation examples, global batch 32 / 64.

    Both splits divide evenly over 2 ranks, so evaluation sees no padded examples.
    """
    params = tg.get_experiment("toy_regression")
    params.override(
        {
            "trainer.train_steps": TRAIN_STEPS,
            "trainer.steps_per_loop": 5,
            "trainer.summary_interval": 5,
            "trainer.checkpoint_interval": RESUME_STEP,
            "trainer.validation_interval": RESUME_STEP,
            "trainer.validation_steps": -1,
            "trainer.max_to_keep": 5,
            "runtime.distribution_strategy": strategy,
            "runtime.num_threads": 1,
            **overrides,
        }
    )
    return params


def digits_params(strategy: str = "single") -> tg.ExperimentConfig:
    """The digits MLP (Adam, warmup + cosine, best-checkpoint export) for 20 steps."""
    params = tg.get_experiment("image_classification")
    params.override(
        {
            "trainer.train_steps": TRAIN_STEPS,
            "trainer.steps_per_loop": 10,
            "trainer.summary_interval": 10,
            "trainer.checkpoint_interval": TRAIN_STEPS,
            "trainer.validation_interval": TRAIN_STEPS,
            "trainer.optimizer_config.learning_rate.cosine.decay_steps": TRAIN_STEPS,
            "trainer.optimizer_config.warmup.linear.warmup_steps": 5,
            "runtime.distribution_strategy": strategy,
            "runtime.num_threads": 1,
        }
    )
    return params


class GatheringToyTask(ToyRegressionTask):
    """Toy task with a Python evaluator: the median absolute error over all ranks.

    A median is not a sum of per-shard values, so it is right only if every rank's
    errors are gathered (``distribute.all_gather_list``) before it is taken.
    """

    def validation_step(self, inputs: Any, model: Any, metrics: Any = None) -> dict[str, Any]:
        features, labels = self.split_inputs(inputs)
        outputs = self.inference_step(features, model)
        loss = self.build_losses(labels, outputs)
        if metrics:
            self.process_metrics(metrics, labels, outputs)
        return {self.loss: loss.detach(), "abs_errors": (outputs - labels).abs().reshape(-1)}

    def aggregate_logs(self, state: Any = None, step_logs: Any = None) -> Any:
        state = [] if state is None else state
        state.extend(step_logs["abs_errors"].tolist())
        return state

    def reduce_aggregated_logs(self, aggregated_logs: Any, global_step: Any = None) -> Any:
        errors = distribute.all_gather_list(aggregated_logs)
        return {
            "median_absolute_error": float(np.median(errors)),
            "num_examples_gathered": float(len(errors)),
        }


def floats(logs: dict[str, Any]) -> dict[str, float]:
    """Scalar entries of ``logs`` as Python floats."""
    host = to_host(logs)
    return {k: float(v) for k, v in host.items() if isinstance(v, (int, float))}


def run(
    params: tg.ExperimentConfig,
    model_dir: str | os.PathLike[str],
    *,
    mode: str = "train_and_eval",
    task: Any = None,
    on_trainer: Any = None,
) -> dict[str, Any]:
    """Runs ``mode`` and returns ``{"train": [loop logs...], "eval": final eval logs}``.

    Args:
        on_trainer: Called with the built Trainer before the run (e.g. to add hooks).
    """
    from torchgarden.runtime import setup_runtime
    from torchgarden.train_lib import create_trainer, run_experiment

    task = task or tg.get_task(params.task, logging_dir=os.fspath(model_dir))
    runtime = setup_runtime(params.runtime)
    trainer = create_trainer(
        params, task, train="train" in mode, evaluate="eval" in mode,
        model_dir=os.fspath(model_dir), runtime=runtime,
    )
    if on_trainer is not None:
        on_trainer(trainer)
    train_logs: list[dict[str, float]] = []
    _, eval_logs = run_experiment(
        task=task, mode=mode, params=params, model_dir=model_dir, trainer=trainer,
        runtime=runtime, train_actions=[lambda logs: train_logs.append(floats(logs))],
    )
    return {"train": train_logs, "eval": floats(eval_logs)}


def rank_batches(params: tg.ExperimentConfig, num_batches: int) -> list[torch.Tensor]:
    """The features of the first ``num_batches`` train batches this rank's Trainer sees."""
    from torchgarden.data import DataIterator, InputContext

    task = tg.get_task(params.task)
    context = InputContext(
        num_replicas=distribute.get_world_size(), replica_id=distribute.get_rank()
    )
    iterator = DataIterator(task.build_inputs(params.task.train_data, context), repeat=True)
    return [next(iterator)[0] for _ in range(num_batches)]


def checkpoint_state(model_dir: str | os.PathLike[str], step: int) -> dict[str, Any]:
    """The items of ``model_dir/ckpt-<step>`` as one process saves them (``state.pt``;
    an FSDP2 run's DCP shards read in full)."""
    from torchgarden.checkpoint import read_full_state

    return read_full_state(os.path.join(os.fspath(model_dir), f"ckpt-{step}"))
