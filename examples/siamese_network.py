"""A Siamese network: one encoder shared by two inputs, a distance, a contrastive loss.

Mirrors the "Siamese network" of the custom-and-distributed-training course notes: the
same base network (same weights) embeds both images of a pair, a ``Lambda`` layer turns
the two embeddings into their Euclidean distance, and a custom contrastive loss pulls
similar pairs together and pushes dissimilar ones at least ``margin`` apart.

Here the base network is one ``nn.Module`` called twice (so its weights are shared by
construction), the distance is a ``layers.Lambda``, the loss is ``losses.ContrastiveLoss``
(label 1 for a similar pair) and the task overrides only ``split_inputs`` so the default
steps see ``features=(left, right)`` and ``labels=similar``. Pairs are 8x8 digits; a pair
is similar when both show the same digit.

Run: ``python examples/siamese_network.py``
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

import torchgarden as tg
from torchgarden import data, layers, losses, metrics

MARGIN = 1.0


def euclidean_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Row-wise distance, kept away from 0 so its gradient stays finite."""
    return torch.sqrt(torch.clamp(torch.sum(torch.square(a - b), dim=1), min=1e-7))


class SiameseNetwork(nn.Module):
    """``distance(encoder(left), encoder(right))`` with a single encoder."""

    def __init__(self, embedding_size: int = 16) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Flatten(), nn.Linear(64, 64), nn.ReLU(),
                                     nn.Linear(64, embedding_size))
        self.distance = layers.Lambda(euclidean_distance)

    def forward(self, pair: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        left, right = pair
        return self.distance(self.encoder(left), self.encoder(right))


def make_pairs(split: str, num_pairs: int, seed: int) -> tuple[torch.Tensor, ...]:
    """Half similar, half dissimilar pairs of digits: ``(left, right, similar)``."""
    x, y = data.load_digits_arrays(split)
    generator = torch.Generator().manual_seed(seed)
    left = torch.randint(0, len(y), (num_pairs,), generator=generator)
    right = torch.empty_like(left)
    by_class = [torch.nonzero(y == c).squeeze(1) for c in range(10)]
    for i, index in enumerate(left.tolist()):
        same = i % 2 == 0
        pool = by_class[int(y[index])] if same else torch.nonzero(y != y[index]).squeeze(1)
        right[i] = pool[torch.randint(0, len(pool), (1,), generator=generator)]
    similar = (y[left] == y[right]).float()
    return x[left], x[right], similar


def pair_accuracy(similar: torch.Tensor, distance: torch.Tensor) -> torch.Tensor:
    """1 where the pair is called similar exactly when its distance is below margin / 2."""
    return ((distance < MARGIN / 2).float() == similar).float()


@dataclasses.dataclass
class SiameseConfig(tg.TaskConfig):
    """Pairs of digits."""

    num_train_pairs: int = 2000
    """Training pairs. Defaults to 2000."""
    num_validation_pairs: int = 500
    """Validation pairs. Defaults to 500."""


class SiameseTask(tg.Task):
    """Contrastive training of ``SiameseNetwork`` with the default train/validation steps."""

    task_config: SiameseConfig

    def build_model(self) -> nn.Module:
        return SiameseNetwork()

    def build_inputs(self, params: tg.DataConfig, input_context: Any = None) -> Any:
        cfg = self.task_config
        if params.is_training:
            pairs = make_pairs("train", cfg.num_train_pairs, seed=0)
        else:
            pairs = make_pairs("validation", cfg.num_validation_pairs, seed=1)
        return data.build_dataloader(data.ArrayDataset(*pairs), params,
                                     input_context=input_context)

    @staticmethod
    def split_inputs(inputs: Any) -> tuple[Any, Any]:
        left, right, similar = inputs
        return (left, right), similar

    def build_losses(self, labels: torch.Tensor, model_outputs: torch.Tensor,
                     aux_losses: Sequence[torch.Tensor] | None = None) -> torch.Tensor:
        if not hasattr(self, "_loss_fn"):
            self._loss_fn = losses.ContrastiveLoss(margin=MARGIN)
        return self._loss_fn(labels, model_outputs) + sum(aux_losses or [])

    def build_metrics(self, training: bool = True) -> list[Any]:
        return [metrics.MeanMetricWrapper(pair_accuracy, name="pair_accuracy")]


def build_params(train_steps: int = 200) -> tg.ExperimentConfig:
    """Adam at 3e-3, batches of 64 pairs."""
    return tg.ExperimentConfig(
        task=SiameseConfig(
            train_data=tg.DataConfig(is_training=True, global_batch_size=64, seed=0),
            validation_data=tg.DataConfig(is_training=False, global_batch_size=500)),
        trainer=tg.TrainerConfig(
            train_steps=train_steps, steps_per_loop=50, summary_interval=50,
            validation_interval=train_steps, checkpoint_interval=train_steps,
            progress_bar=False,
            optimizer_config=tg.OptimizationConfig.from_dict({
                "optimizer": {"type": "adam"},
                "learning_rate": {"type": "constant", "constant": {"learning_rate": 3e-3}}})),
        runtime=tg.RuntimeConfig(seed=0, device="cpu"),
    ).validate()


def main(model_dir: str | None = None, train_steps: int = 200) -> dict[str, Any]:
    """Trains the Siamese network on digit pairs.

    Args:
        model_dir: Output directory. Defaults to a new temporary directory.
        train_steps: Steps to train. Defaults to 200.

    Returns:
        The trained ``model`` and the ``eval_logs``.
    """
    model_dir = model_dir or tempfile.mkdtemp(prefix="tg_siamese_")
    params = build_params(train_steps)
    task = SiameseTask(params.task, logging_dir=model_dir)
    model, eval_logs = tg.run_experiment(task=task, mode="train_and_eval", params=params,
                                         model_dir=model_dir)
    return {"model": model, "eval_logs": eval_logs}


if __name__ == "__main__":
    result = main()
    print({k: round(float(v), 4) for k, v in result["eval_logs"].items()})
