"""``multitask_shapes``: segmentation and shape classification sharing one encoder.

The generated 64×64 shape images of ``semantic_segmentation`` (no download) serve two
tasks: ``segmentation`` (per-pixel classes, mean IoU) and ``shapes`` (which shape
classes appear in the image: multi-label, from the masks). Both run on one
``SegmentationModel``: the shapes head pools the encoder's deepest features, so the
encoder learns from both losses. The joint trainer takes one batch of each task per
step and one update on ``1.0 * segmentation loss + 0.5 * shapes loss``.
"""

from __future__ import annotations

import dataclasses

from torchgarden.config import RuntimeConfig
from torchgarden.config.multitask import (
    MultiTaskConfig,
    MultiTaskExperimentConfig,
    MultiTaskTrainerConfig,
    TaskRoutine,
)
from torchgarden.experiments._presets import adam_cosine_trainer
from torchgarden.experiments.segmentation_blocks import SegmentationEvaluationConfig
from torchgarden.experiments.semantic_segmentation import (
    SegmentationDataConfig,
    SegmentationModelConfig,
    SemanticSegmentationConfig,
)
from torchgarden.registry import register_experiment

__all__ = ["ShapePresenceConfig", "ShapesMultiTaskConfig", "multitask_shapes"]


@dataclasses.dataclass
class ShapePresenceConfig(SemanticSegmentationConfig):
    """Which of the ``model.num_classes - 1`` shape classes appear in each image (one
    logit each, binary cross-entropy), learned from the segmentation masks."""

    allow_image_summary: bool = False
    """No image summaries for this task. Defaults to False."""


@dataclasses.dataclass
class ShapesMultiTaskConfig(MultiTaskConfig):
    """A segmentation routine and a shape-presence routine on one encoder-decoder."""

    model: SegmentationModelConfig = dataclasses.field(default_factory=SegmentationModelConfig)


def _shapes_task(task: type[SemanticSegmentationConfig]) -> SemanticSegmentationConfig:
    return task(
        train_data=SegmentationDataConfig(
            is_training=True, global_batch_size=16, split="train", seed=0,
            output_size=[64, 64], aug_rand_hflip=True, aug_scale_min=0.75,
            aug_scale_max=1.25, color_jitter=0.1),
        validation_data=SegmentationDataConfig(
            is_training=False, global_batch_size=32, split="validation", drop_remainder=False),
        evaluation=SegmentationEvaluationConfig(report_train_mean_iou=False),
    )


@register_experiment("multitask_shapes")
def multitask_shapes() -> MultiTaskExperimentConfig:
    """Joint training of segmentation and shape presence on a shared encoder (CPU: about
    3 minutes for 1000 steps)."""
    trainer = adam_cosine_trainer(train_steps=1000, steps_per_loop=50, learning_rate=3e-3,
                                  warmup_steps=30, best_metric="segmentation/mean_iou")
    config = MultiTaskTrainerConfig.from_dict(trainer.as_dict())
    config.trainer_type = "joint"
    return MultiTaskExperimentConfig(
        task=ShapesMultiTaskConfig(task_routines=[
            TaskRoutine(task_name="segmentation",
                        task_config=_shapes_task(SemanticSegmentationConfig), task_weight=1.0),
            TaskRoutine(task_name="shapes", task_config=_shapes_task(ShapePresenceConfig),
                        task_weight=0.5),
        ]),
        trainer=config,
        runtime=RuntimeConfig(seed=0),
    )
