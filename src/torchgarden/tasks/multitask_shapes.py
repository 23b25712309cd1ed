"""Tasks of ``multitask_shapes``: shape presence, and segmentation + presence on one encoder."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from torchgarden import data, metrics
from torchgarden.core.serving import Serving
from torchgarden.core.task import Task
from torchgarden.experiments.multitask_shapes import ShapePresenceConfig, ShapesMultiTaskConfig
from torchgarden.experiments.semantic_segmentation import SegmentationDataConfig
from torchgarden.multitask import MultiTask, MultiTaskBaseModel
from torchgarden.registry import register_task
from torchgarden.tasks.semantic_segmentation import SemanticSegmentationTask
from torchgarden.vision.segmentation_model import SegmentationModel, conv_block

__all__ = ["EncoderClassifier", "ShapePresenceTask", "ShapesMultiTask"]


class EncoderClassifier(nn.Module):
    """Logits ``[N, num_outputs]`` from the maximum of an encoder's deepest features.

    Args:
        encoder: A ``SegmentationModel.encoder`` (conv blocks; 2x max-pool between them),
            shared with a segmentation model or its own.
        width: Channels of the encoder's last block.
        num_outputs: Logits per image.
    """

    def __init__(self, encoder: nn.ModuleList, width: int, num_outputs: int) -> None:
        super().__init__()
        self.encoder = encoder
        self.head = nn.Linear(width, num_outputs)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = images
        for level, block in enumerate(self.encoder):
            if level:
                x = F.max_pool2d(x, 2, ceil_mode=True)
            x = block(x)
        return self.head(x.amax(dim=(2, 3)))  # Is a shape anywhere: the strongest response.


def _presence_collate(num_shapes: int) -> Callable[[Sequence[Any]], Any]:
    """Batches ``(image, mask)`` examples into ``(images, [N, num_shapes] 0/1 labels)``."""

    def collate(examples: Sequence[Any]) -> tuple[torch.Tensor, torch.Tensor]:
        images, masks = data.tuple_collate(examples)
        classes = torch.arange(1, num_shapes + 1).view(1, -1, 1)
        present = (masks.flatten(1).unsqueeze(1) == classes).any(dim=2)
        return images, present.float()

    return collate


@register_task(ShapePresenceConfig)
class ShapePresenceTask(SemanticSegmentationTask):
    """Multi-label classification: is each shape class in the image? (Masks -> labels.)

    Reports ``accuracy`` (per shape class, at probability 0.5) and ``validation_loss``.
    """

    task_config: ShapePresenceConfig

    def build_model(self) -> nn.Module:
        model = self.task_config.model
        widths = list(model.widths)
        encoder = nn.ModuleList(
            conv_block(widths[level - 1] if level else 3, width,
                       stride=1 if level else model.stem_stride)
            for level, width in enumerate(widths))
        return EncoderClassifier(encoder, widths[-1], model.num_classes - 1)

    def build_inputs(self, params: SegmentationDataConfig, input_context: Any = None) -> Any:
        return data.build_dataloader(
            self.build_dataset(params), params, input_context=input_context,
            collate_fn=_presence_collate(self.task_config.model.num_classes - 1))

    def build_losses(self, labels: torch.Tensor, model_outputs: torch.Tensor,
                     aux_losses: Sequence[torch.Tensor] | None = None) -> torch.Tensor:
        loss = F.binary_cross_entropy_with_logits(model_outputs, labels)
        if aux_losses:
            loss = loss + torch.stack([a.float() for a in aux_losses]).sum()
        return loss

    def build_metrics(self, training: bool = True) -> list[Any]:
        return [metrics.BinaryAccuracy(name="accuracy", threshold=0.0)]  # On logits.

    def validation_step(self, inputs: Any, model: nn.Module,
                        metrics: Sequence[Any] | None = None) -> dict[str, Any]:
        return Task.validation_step(self, inputs, model, metrics)

    def inference_step(self, inputs: Any, model: nn.Module) -> Any:
        return Task.inference_step(self, inputs, model)  # logits per image: nothing to resize

    def build_serving_module(self, model: nn.Module) -> Serving:
        return Task.build_serving_module(self, model)


@register_task(ShapesMultiTaskConfig)
class ShapesMultiTask(MultiTask):
    """A ``SegmentationModel`` (``task.model``) for every segmentation routine and an
    ``EncoderClassifier`` on its encoder for every shape-presence routine."""

    task_config: ShapesMultiTaskConfig

    def build_multitask_model(self) -> MultiTaskBaseModel:
        config = self.task_config.model
        segmenter = SegmentationModel(config.num_classes, widths=config.widths,
                                      stem_stride=config.stem_stride, dropout=config.dropout)
        sub_tasks: dict[str, nn.Module] = {}
        for name, task in self.tasks.items():
            if isinstance(task, ShapePresenceTask):
                outputs = task.task_config.model.num_classes - 1
                sub_tasks[name] = EncoderClassifier(segmenter.encoder, config.widths[-1], outputs)
            elif isinstance(task, SemanticSegmentationTask):
                sub_tasks[name] = segmenter
            else:
                raise TypeError(f"task {name!r}: ShapesMultiTask shares a segmentation "
                                f"encoder; {type(task).__name__} is neither a segmentation nor "
                                "a shape-presence task.")
        return MultiTaskBaseModel(sub_tasks)
