"""``retinanet``: RetinaNet-style object detection (REFERENCE §12.2), on shipped shapes data.

With the defaults the task trains on a generated dataset of 64x64 shape images
(`torchgarden.vision.generate_shapes_dataset`, written once under
``$TORCHGARDEN_DATA_DIR`` or ``~/.cache/torchgarden``; nothing is downloaded) and reports
COCO box AP/AR on its validation split. Users point it at their own COCO-format data by
config alone:

```yaml
task:
  model: {num_classes: 5, input_size: [256, 256]}
  train_data: {input_path: /data/train.json, image_dir: /data/train2017}
  validation_data: {input_path: /data/val.json, image_dir: /data/val2017}
```

This module is torch-free: it only defines configs and registers the experiment.
"""

from __future__ import annotations

import dataclasses

from torchgarden.config import (
    Config,
    DataConfig,
    ExperimentConfig,
    RuntimeConfig,
    TaskConfig,
)
from torchgarden.config.errors import ConfigError
from torchgarden.experiments._presets import adam_cosine_trainer
from torchgarden.experiments._sources import auto_source, check_source
from torchgarden.experiments.library_model import LibraryModelConfig
from torchgarden.experiments.semantic_segmentation import GeneratedShapesConfig
from torchgarden.registry import register_experiment

__all__ = [
    "RetinaNetConfig",
    "RetinaNetDataConfig",
    "RetinaNetLossConfig",
    "RetinaNetModelConfig",
    "retinanet",
    "retinanet_resnet18",
]


@dataclasses.dataclass
class RetinaNetDataConfig(DataConfig):
    """A COCO-format detection split: an annotation JSON (``input_path``) and its images.

    An empty ``input_path`` reads the generated shapes split (``task.generated_data``).
    """

    source: str = ""
    """``coco`` (a COCO JSON in ``input_path`` and its images), ``tfrecord`` (TFRecord shards
    of ``tf.train.Example`` in Model Garden's detection schema, or ``tfds_name``), ``shapes``
    (the generated shapes data, ``task.generated_data``); empty = ``shapes`` without an
    ``input_path``, ``coco`` with a ``.json`` one. Defaults to ""."""
    image_dir: str = ""
    """Folder the JSON's ``file_name`` entries are relative to; empty = the ``images``
    folder beside ``input_path``. Defaults to ""."""
    aug_rand_hflip: bool = False
    """Random left-right flips (with boxes). Defaults to False."""
    aug_scale_min: float = 1.0
    """Smallest random scale of the resize-and-crop to ``task.model.input_size``.
    Defaults to 1.0."""
    aug_scale_max: float = 1.0
    """Largest random scale of the resize-and-crop. Defaults to 1.0."""
    color_jitter: float = 0.0
    """Strength of random brightness, contrast and saturation changes. Defaults to 0.0."""

    def resolved_source(self) -> str:
        """`source`, or the one an empty `source` means for this `input_path`."""
        return self.source or auto_source(self, "coco", ".json")

    def check(self) -> None:
        super().check()
        source = self.resolved_source()
        check_source(self, source, ("coco", "tfrecord", "shapes"), generated="shapes")
        if source == "coco" and isinstance(self.input_path, list) and len(self.input_path) > 1:
            key = self.field_path("input_path")
            raise ConfigError(f"{key} names one COCO JSON file, received "
                              f"{len(self.input_path)} paths", key=key)
        if not 0 < self.aug_scale_min <= self.aug_scale_max:
            key = self.field_path("aug_scale_min")
            raise ConfigError(f"{key} ({self.aug_scale_min}) must be > 0 and <= aug_scale_max "
                              f"({self.aug_scale_max})", key=key)
        if self.color_jitter < 0:
            key = self.field_path("color_jitter")
            raise ConfigError(f"{key} must be >= 0, received {self.color_jitter}", key=key)


@dataclasses.dataclass
class RetinaNetModelConfig(Config):
    """A small RetinaNet (`torchgarden.vision.RetinaNet`)."""

    num_classes: int = 3
    """Foreground classes; must equal the number of categories in the data. Defaults to 3."""
    input_size: list[int] = dataclasses.field(default_factory=lambda: [64, 64])
    """``[height, width]`` images are resized (aspect kept) and padded to. Defaults to
    [64, 64]."""
    min_level: int = 2
    """Finest pyramid level (stride ``2**min_level``). Defaults to 2."""
    max_level: int = 4
    """Coarsest pyramid level. Defaults to 4."""
    backbone: LibraryModelConfig = dataclasses.field(default_factory=LibraryModelConfig)
    """A model library's backbone by name (``backbone.name: transformers/resnet``), whose
    stages give levels ``log2(stride)`` (a ResNet: 2..5); empty name = the built-in
    small backbone of ``backbone_channels``. Defaults to the built-in one."""
    backbone_channels: list[int] = dataclasses.field(default_factory=lambda: [16, 32, 64, 128])
    """Channels of the built-in backbone's stages 1..max_level. Defaults to
    [16, 32, 64, 128]."""
    fpn_channels: int = 64
    """Feature-pyramid width. Defaults to 64."""
    head_channels: int = 64
    """Width of the class and box towers. Defaults to 64."""
    num_head_convs: int = 2
    """Convs per tower. Defaults to 2."""
    num_scales: int = 3
    """Anchor scales per octave. Defaults to 3."""
    aspect_ratios: list[float] = dataclasses.field(default_factory=lambda: [0.5, 1.0, 2.0])
    """Anchor width/height ratios. Defaults to [0.5, 1.0, 2.0]."""
    anchor_size: float = 2.0
    """Anchor size in units of the level's stride. Defaults to 2.0."""
    prior_probability: float = 0.01
    """Initial foreground probability of the classifier. Defaults to 0.01."""
    score_threshold: float = 0.05
    """Detections must score above this. Defaults to 0.05."""
    nms_iou_threshold: float = 0.5
    """Class-aware NMS IoU threshold. Defaults to 0.5."""
    max_num_detections: int = 100
    """Detections kept per image. Defaults to 100."""
    pre_nms_top_k: int = 1000
    """Candidates per image entering NMS. Defaults to 1000."""

    def check(self) -> None:
        if self.num_classes < 1:
            key = self.field_path("num_classes")
            raise ConfigError(f"{key} must be >= 1, received {self.num_classes}", key=key)
        if len(self.input_size) != 2 or min(self.input_size) < 1:
            key = self.field_path("input_size")
            raise ConfigError(f"{key} must be [height, width] >= 1, received "
                              f"{self.input_size}", key=key)
        if not 1 <= self.min_level <= self.max_level:
            key = self.field_path("min_level")
            raise ConfigError(f"{key} ({self.min_level}) and max_level ({self.max_level}) must "
                              "satisfy 1 <= min_level <= max_level", key=key)
        if not self.backbone.name and len(self.backbone_channels) != self.max_level:
            key = self.field_path("backbone_channels")
            raise ConfigError(f"{key} needs one entry per level 1..{self.max_level} (max_level), "
                              f"received {self.backbone_channels}", key=key)


@dataclasses.dataclass
class RetinaNetLossConfig(Config):
    """Anchor matching and the loss (Model Garden's RetinaNet defaults)."""

    focal_loss_alpha: float = 0.25
    """Focal-loss weight of positives. Defaults to 0.25."""
    focal_loss_gamma: float = 1.5
    """Focal-loss focusing exponent. Defaults to 1.5."""
    huber_loss_delta: float = 0.1
    """Huber box-loss delta. Defaults to 0.1."""
    box_loss_weight: float = 50.0
    """``total = cls + box_loss_weight * box``. Defaults to 50.0."""
    match_threshold: float = 0.5
    """Anchors with IoU >= this are positive. Defaults to 0.5."""
    unmatched_threshold: float = 0.4
    """Anchors with IoU < this are negative; in between they are ignored. Defaults to 0.4."""
    match_each_groundtruth: bool = True
    """Give every box its best anchor as a positive, whatever the IoU. Defaults to True."""

    def check(self) -> None:
        if not 0 <= self.unmatched_threshold <= self.match_threshold <= 1:
            key = self.field_path("unmatched_threshold")
            raise ConfigError(f"{key} ({self.unmatched_threshold}) and match_threshold "
                              f"({self.match_threshold}) must satisfy 0 <= unmatched_threshold "
                              "<= match_threshold <= 1", key=key)


@dataclasses.dataclass
class RetinaNetConfig(TaskConfig):
    """The RetinaNet detection task (REFERENCE §12.2)."""

    model: RetinaNetModelConfig = dataclasses.field(default_factory=RetinaNetModelConfig)
    train_data: RetinaNetDataConfig = dataclasses.field(
        default_factory=lambda: RetinaNetDataConfig(is_training=True))
    validation_data: RetinaNetDataConfig = dataclasses.field(
        default_factory=lambda: RetinaNetDataConfig(is_training=False))
    losses: RetinaNetLossConfig = dataclasses.field(default_factory=RetinaNetLossConfig)
    generated_data: GeneratedShapesConfig = dataclasses.field(
        default_factory=GeneratedShapesConfig)
    """Used by a split whose ``input_path`` is empty; ``model.num_classes`` shape classes
    are drawn."""
    image_mean: list[float] = dataclasses.field(default_factory=lambda: [0.485, 0.456, 0.406])
    """Per-channel mean subtracted from [0, 1] RGB images. Defaults to ImageNet's."""
    image_std: list[float] = dataclasses.field(default_factory=lambda: [0.229, 0.224, 0.225])
    """Per-channel std images are divided by. Defaults to ImageNet's."""
    per_category_metrics: bool = False
    """Also report AP/AR per category. Defaults to False."""
    max_num_eval_detections: int = 100
    """Detections per image COCO evaluation reads (``ARmax{N}``). Defaults to 100."""
    num_image_summaries: int = 4
    """Validation images drawn with their detections when ``allow_image_summary``.
    Defaults to 4."""

    def check(self) -> None:
        if len(self.image_mean) != 3 or len(self.image_std) != 3 or min(self.image_std) <= 0:
            key = self.field_path("image_std")
            raise ConfigError(
                f"{self.field_path('image_mean')} and {key} must be 3 values (RGB), std > 0; "
                f"received {self.image_mean} and {self.image_std}", key=key)
        if self.max_num_eval_detections < 1:
            key = self.field_path("max_num_eval_detections")
            raise ConfigError(f"{key} must be >= 1, received {self.max_num_eval_detections}",
                              key=key)


@register_experiment("retinanet")
def retinanet() -> ExperimentConfig:
    """RetinaNet on 64x64 shapes: AP50 ~0.8, AP ~0.5 after 1000 Adam steps (~5 CPU minutes)."""
    return ExperimentConfig(
        task=RetinaNetConfig(
            train_data=RetinaNetDataConfig(
                is_training=True, global_batch_size=32, seed=0, aug_rand_hflip=True,
                aug_scale_min=0.8, aug_scale_max=1.25,
            ),
            validation_data=RetinaNetDataConfig(
                is_training=False, global_batch_size=32, drop_remainder=False,
            ),
            allow_image_summary=True,
        ),
        trainer=adam_cosine_trainer(
            train_steps=1000, steps_per_loop=100, learning_rate=5e-3, warmup_steps=100,
            best_metric="AP",
        ),
        runtime=RuntimeConfig(seed=0),
    )


@register_experiment("retinanet_resnet18")
def retinanet_resnet18() -> ExperimentConfig:
    """`retinanet` with a transformers ResNet-18 backbone (11.2M parameters, random
    weights) on the same 64x64 shapes: the pyramid on its stages at strides 4/8/16
    (levels 2-4; stride 32 leaves 2x2 maps of a 64-pixel image), Adam at 1e-3."""
    config = retinanet()
    config.override({
        "task": {"model": {"backbone": {"name": "transformers/resnet", "library_config": {
            "layer_type": "basic", "embedding_size": 64, "hidden_sizes": [64, 128, 256, 512],
            "depths": [2, 2, 2, 2]}}}},
        "trainer": {"optimizer_config": {"learning_rate": {"cosine": {
            "initial_learning_rate": 1e-3}}}},
    })
    return config
