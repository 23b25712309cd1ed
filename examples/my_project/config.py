"""The experiment config of the project: a task config class and a registered factory.

Mirrors the starter example's ``example_config.py``: a ``TaskConfig`` subclass whose
fields carry docstrings, and a factory registered by name that fills in the trainer
schedule and the optimizer.
"""

from __future__ import annotations

import dataclasses

import torchgarden as tg


@dataclasses.dataclass
class ProjectRegressionConfig(tg.TaskConfig):
    """Regression of a random linear map with a one-hidden-layer MLP."""

    num_examples: int = 512
    """Examples per split. Defaults to 512."""
    in_features: int = 8
    """Input width. Defaults to 8."""
    hidden_size: int = 16
    """Hidden width. Defaults to 16."""


@tg.register_experiment("my_project/regression")
def regression() -> tg.ExperimentConfig:
    """Adam with a warmed-up cosine schedule; evaluation every 20 steps."""
    return tg.ExperimentConfig(
        task=ProjectRegressionConfig(
            train_data=tg.DataConfig(is_training=True, global_batch_size=32, seed=0),
            validation_data=tg.DataConfig(is_training=False, global_batch_size=128,
                                          drop_remainder=False),
        ),
        trainer=tg.TrainerConfig(
            train_steps=100, steps_per_loop=10, summary_interval=10, checkpoint_interval=20,
            validation_interval=20, max_to_keep=2, progress_bar=False,
            optimizer_config=tg.OptimizationConfig.from_dict({
                "optimizer": {"type": "adam"},
                "learning_rate": {"type": "cosine",
                                  "cosine": {"initial_learning_rate": 0.01, "decay_steps": 100}},
                "warmup": {"type": "linear", "linear": {"warmup_steps": 10}},
            }),
        ),
        runtime=tg.RuntimeConfig(seed=0, device="cpu"),
    )
