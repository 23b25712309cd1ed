"""The trainer preset shared by the built-in vision experiments."""

from __future__ import annotations

from torchgarden.config import OptimizationConfig, TrainerConfig

__all__ = ["adam_cosine_trainer"]


def adam_cosine_trainer(
    *,
    train_steps: int,
    steps_per_loop: int,
    learning_rate: float,
    warmup_steps: int,
    best_metric: str,
) -> TrainerConfig:
    """Returns the trainer of the built-in vision experiments.

    Adam (Keras' epsilon 1e-7, torch's fused kernel: these presets choose speed over
    bitwise equality with a hand-written loop) with a linear warmup, then cosine decay to zero at
    ``train_steps``; summaries every loop; a checkpoint and a full evaluation every
    500 steps, keeping 3 checkpoints; the evaluation with the highest ``best_metric``
    exported to ``best_ckpt/``.

    Args:
        train_steps: Total training steps (also the cosine decay steps).
        steps_per_loop: Steps per inner loop (also the summary interval).
        learning_rate: Peak learning rate, reached after the warmup.
        warmup_steps: Steps of the linear warmup.
        best_metric: Evaluation metric (higher is better) selecting the best checkpoint.
    """
    return TrainerConfig(
        train_steps=train_steps,
        steps_per_loop=steps_per_loop,
        summary_interval=steps_per_loop,
        checkpoint_interval=500,
        validation_interval=500,
        validation_steps=-1,
        max_to_keep=3,
        best_checkpoint_export_subdir="best_ckpt",
        best_checkpoint_eval_metric=best_metric,
        best_checkpoint_metric_comp="higher",
        optimizer_config=OptimizationConfig.from_dict(
            {
                "optimizer": {"type": "adam", "adam": {"epsilon": 1e-7, "fused": True}},
                "learning_rate": {
                    "type": "cosine",
                    "cosine": {"initial_learning_rate": learning_rate, "decay_steps": train_steps},
                },
                "warmup": {"type": "linear", "linear": {"warmup_steps": warmup_steps}},
            }
        ),
    )
