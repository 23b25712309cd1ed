"""Subclassed models trained through a Task: the notes' ``MyModel`` and a ResNet block.

Mirrors "Custom Models" in the custom-and-distributed-training course notes: a model
class with its layers created in ``__init__`` and the data flow in ``call`` (two dense
layers, the last one with a softmax), and the subclassed ResNet it points to.

In PyTorch a model is an ``nn.Module`` with ``forward``; a Task's ``build_model`` returns
it and the rest of the framework is unchanged. Because ``MyModel`` ends in a softmax, its
loss is ``losses.SparseCategoricalCrossentropy(from_logits=False)``, as in Keras.

* ``MyModel`` classifies 5 Gaussian blobs in 8 dimensions.
* ``MiniResNet`` (a convolution stem, one ``ResidualBlock``, pooling, a linear head)
  classifies the 8x8 digits.

Run: ``python examples/custom_models.py``
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

import torchgarden as tg
from torchgarden import data, losses, metrics
from torchgarden.tasks import ImageClassificationTask


class MyModel(nn.Module):
    """Dense(4, relu) -> Dense(5, softmax): outputs class probabilities."""

    def __init__(self, in_features: int = 8) -> None:
        super().__init__()
        self.dense1 = nn.Linear(in_features, 4)
        self.dense2 = nn.Linear(4, 5)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.dense1(inputs))
        return F.softmax(self.dense2(x), dim=-1)


class ResidualBlock(nn.Module):
    """conv-bn-relu-conv-bn plus the identity, then relu."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(x + self.bn2(self.conv2(y)))


class MiniResNet(nn.Module):
    """Stem convolution, one residual block, global average pooling, linear head."""

    def __init__(self, channels: int = 16, num_classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, channels, 3, padding=1, bias=False),
                                  nn.BatchNorm2d(channels), nn.ReLU())
        self.block = ResidualBlock(channels)
        self.head = nn.Linear(channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.block(self.stem(x)).mean(dim=(2, 3)))


@dataclasses.dataclass
class BlobsConfig(tg.TaskConfig):
    """Five Gaussian blobs in 8 dimensions."""

    num_examples: int = 1000
    """Examples per split. Defaults to 1000."""


class BlobsTask(tg.Task):
    """Trains ``MyModel`` (probability outputs) with a non-logit cross-entropy."""

    task_config: BlobsConfig

    def build_model(self) -> nn.Module:
        return MyModel()

    def build_inputs(self, params: tg.DataConfig, input_context: Any = None) -> Any:
        generator = torch.Generator().manual_seed(0)
        centers = 3.0 * torch.randn(5, 8, generator=generator)
        if not params.is_training:
            generator.manual_seed(1)
        labels = torch.randint(0, 5, (self.task_config.num_examples,), generator=generator)
        x = centers[labels] + torch.randn(len(labels), 8, generator=generator)
        return data.build_dataloader(data.ArrayDataset(x, labels), params,
                                     input_context=input_context)

    def build_losses(self, labels: torch.Tensor, model_outputs: torch.Tensor,
                     aux_losses: Sequence[torch.Tensor] | None = None) -> torch.Tensor:
        if not hasattr(self, "_loss_fn"):
            self._loss_fn = losses.SparseCategoricalCrossentropy(from_logits=False)
        return self._loss_fn(labels, model_outputs) + sum(aux_losses or [])

    def build_metrics(self, training: bool = True) -> list[Any]:
        return [metrics.SparseCategoricalAccuracy(name="accuracy")]


class ResNetTask(ImageClassificationTask):
    """Digits classification on ``MiniResNet``."""

    def build_model(self) -> nn.Module:
        model = MiniResNet()
        self._l2_weights = [p for p in model.parameters() if p.ndim > 1]
        return model


def _trainer(train_steps: int) -> dict[str, Any]:
    return {"train_steps": train_steps, "steps_per_loop": 50, "summary_interval": 50,
            "validation_interval": train_steps, "checkpoint_interval": train_steps,
            "progress_bar": False}


def blobs_params(train_steps: int = 200) -> tg.ExperimentConfig:
    """Adam at 0.02 on the blobs."""
    return tg.ExperimentConfig(
        task=BlobsConfig(
            train_data=tg.DataConfig(is_training=True, global_batch_size=50, seed=0),
            validation_data=tg.DataConfig(is_training=False, global_batch_size=500)),
        trainer=tg.TrainerConfig(**_trainer(train_steps), optimizer_config=(
            tg.OptimizationConfig.from_dict({
                "optimizer": {"type": "adam"},
                "learning_rate": {"type": "constant", "constant": {"learning_rate": 0.02}}}))),
        runtime=tg.RuntimeConfig(seed=0, device="cpu"),
    ).validate()


def resnet_params(train_steps: int = 100) -> tg.ExperimentConfig:
    """The built-in digits experiment, shortened, with a faster learning rate."""
    params = tg.get_experiment("image_classification")
    params.override({
        "trainer": {**_trainer(train_steps), "best_checkpoint_export_subdir": "",
                    "optimizer_config": {"learning_rate": {"cosine": {
                        "initial_learning_rate": 0.01, "decay_steps": train_steps}}}},
        "runtime": {"device": "cpu"},
    })
    return params.validate()


def main(model_dir: str | None = None) -> dict[str, Any]:
    """Trains ``MyModel`` on the blobs and ``MiniResNet`` on the digits.

    Args:
        model_dir: Parent of the two runs. Defaults to a new temporary directory.

    Returns:
        For ``"my_model"`` and ``"resnet"``: the trained ``model`` and its ``eval_logs``.
    """
    model_dir = model_dir or tempfile.mkdtemp(prefix="tg_custom_models_")
    results: dict[str, Any] = {}
    for name, params, task_cls in (("my_model", blobs_params(), BlobsTask),
                                   ("resnet", resnet_params(), ResNetTask)):
        task = task_cls(params.task, logging_dir=f"{model_dir}/{name}")
        model, eval_logs = tg.run_experiment(task=task, mode="train_and_eval", params=params,
                                             model_dir=f"{model_dir}/{name}")
        results[name] = {"model": model, "eval_logs": eval_logs}
    return results


if __name__ == "__main__":
    for name, run in main().items():
        print(name, {k: round(float(v), 4) for k, v in run["eval_logs"].items()})
