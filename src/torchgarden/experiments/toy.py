"""``toy_regression``: a tiny linear-regression experiment for tests and the overhead
benchmark (Linear 8→1, MSE, SGD). Trains in well under a second."""

from __future__ import annotations

import dataclasses

from torchgarden.config import (
    ConfigError,
    DataConfig,
    ExperimentConfig,
    OptimizationConfig,
    RuntimeConfig,
    TaskConfig,
    TrainerConfig,
)
from torchgarden.registry import register_experiment

__all__ = ["ToyRegressionConfig", "toy_regression"]


@dataclasses.dataclass
class ToyRegressionConfig(TaskConfig):
    """Regression of ``y = x @ w + noise`` with a linear model."""

    num_examples: int = 256
    """Examples generated for each split."""
    in_features: int = 8
    """Input width."""
    out_features: int = 1
    """Output width."""
    hidden_size: int = 0
    """0 = a single Linear layer; otherwise Linear-ReLU-Linear of this width."""
    noise: float = 0.01
    """Standard deviation of the label noise."""

    def check(self) -> None:
        super().check()
        for name in ("num_examples", "in_features", "out_features"):
            if getattr(self, name) < 1:
                raise ConfigError(f"task.{name} must be >= 1, got {getattr(self, name)}.")
        if self.hidden_size < 0:
            raise ConfigError(
                f"task.hidden_size must be >= 0 (0: one Linear layer), got {self.hidden_size}."
            )
        if self.noise < 0:
            raise ConfigError(f"task.noise must be >= 0, got {self.noise}.")


@register_experiment("toy_regression")
def toy_regression() -> ExperimentConfig:
    """The toy task: 100 SGD steps, evaluation every 50."""
    return ExperimentConfig(
        task=ToyRegressionConfig(
            train_data=DataConfig(is_training=True, global_batch_size=32, seed=0),
            validation_data=DataConfig(
                is_training=False, global_batch_size=64, drop_remainder=False, seed=1
            ),
        ),
        trainer=TrainerConfig(
            train_steps=100,
            steps_per_loop=10,
            summary_interval=10,
            checkpoint_interval=50,
            validation_interval=50,
            max_to_keep=3,
            optimizer_config=OptimizationConfig.from_dict(
                {
                    "optimizer": {"type": "sgd", "sgd": {"momentum": 0.9}},
                    "learning_rate": {"type": "constant", "constant": {"learning_rate": 0.05}},
                }
            ),
        ),
        runtime=RuntimeConfig(seed=0),
    )
