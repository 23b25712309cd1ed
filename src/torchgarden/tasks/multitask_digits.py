"""Tasks of the ``multitask_digits`` experiments: parity, corrupted digits, shared heads."""

from __future__ import annotations

import torch
from torch import nn

from torchgarden.experiments.image_classification import ImageClassificationConfig
from torchgarden.experiments.multitask_digits import (
    CorruptedDigitsConfig,
    DigitParityConfig,
    DigitsMultiTaskConfig,
)
from torchgarden.multitask import MultiTask, MultiTaskBaseModel
from torchgarden.registry import register_task
from torchgarden.tasks.image_classification import ImageClassificationTask

__all__ = ["CorruptedDigitsTask", "DigitParityTask", "DigitsMultiTask", "corrupt_images"]


@register_task(DigitParityConfig)
class DigitParityTask(ImageClassificationTask):
    """Image classification of ``label % 2``: is the digit odd?"""

    def _checked(self, x: torch.Tensor, y: torch.Tensor,
                 where: str) -> tuple[torch.Tensor, torch.Tensor]:
        return super()._checked(x, y % 2, where)


def corrupt_images(images: torch.Tensor, corruption: str, severity: float,
                   seed: int) -> torch.Tensor:
    """Seeded Gaussian noise (std ``severity``, clipped to [0, 1]) or an occluded
    ``severity``-pixel square per image, of ``[N, C, H, W]`` images in [0, 1]."""
    generator = torch.Generator().manual_seed(seed)
    if corruption == "noise":
        noise = torch.randn(images.shape, generator=generator) * severity
        return (images + noise).clamp(0.0, 1.0)
    size = int(severity)
    height, width = images.shape[-2:]
    out = images.clone()
    rows = torch.randint(0, max(height - size, 0) + 1, (len(images),), generator=generator)
    cols = torch.randint(0, max(width - size, 0) + 1, (len(images),), generator=generator)
    for image, row, col in zip(out, rows.tolist(), cols.tolist()):
        image[..., row:row + size, col:col + size] = 0.0
    return out


@register_task(CorruptedDigitsConfig)
class CorruptedDigitsTask(ImageClassificationTask):
    """The digit classification on corrupted images (``task.corruption``)."""

    task_config: CorruptedDigitsConfig

    def _checked(self, x: torch.Tensor, y: torch.Tensor,
                 where: str) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = super()._checked(x, y, where)
        config = self.task_config
        return corrupt_images(x, config.corruption, config.severity, config.corruption_seed), y


@register_task(DigitsMultiTaskConfig)
class DigitsMultiTask(MultiTask):
    """Every routine an image classification of the same images: one MLP backbone
    (``task.model``), one linear head per task (``num_classes`` of its own model)."""

    task_config: DigitsMultiTaskConfig

    def build_multitask_model(self) -> MultiTaskBaseModel:
        backbone_config = self.task_config.model
        heads = {}
        for name, task in self.tasks.items():
            config = task.task_config
            if not isinstance(config, ImageClassificationConfig):
                raise TypeError(f"task {name!r}: DigitsMultiTask shares an image classifier's "
                                f"backbone; {type(config).__name__} is not an "
                                "ImageClassificationConfig.")
            heads[name] = config.model.num_classes
        first = next(iter(self.tasks.values())).task_config
        height, width, channels = first.model.input_size  # type: ignore[attr-defined]
        layers: list[nn.Module] = [nn.Flatten()]
        width_in = channels * height * width
        for hidden in backbone_config.hidden_sizes:
            layers += [nn.Linear(width_in, hidden), nn.ReLU()]
            width_in = hidden
        if backbone_config.dropout:
            layers.append(nn.Dropout(backbone_config.dropout))
        backbone = nn.Sequential(*layers)
        return MultiTaskBaseModel({
            name: nn.Sequential(backbone, nn.Linear(width_in, classes))
            for name, classes in heads.items()
        })

