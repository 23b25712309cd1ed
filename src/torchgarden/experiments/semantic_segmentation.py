"""``semantic_segmentation``: a small encoder-decoder on generated shape images.

By default the data is generated on first use (no downloads) under
``<$TORCHGARDEN_DATA_DIR or ~/.cache/torchgarden>/shapes-v1-<hash>``: 512 training
and 128 validation 64×64 images of rectangles, ellipses and triangles (classes
1-3, 0 = background) with clutter. Users point it at their own image/mask folders
by config alone:

```yaml
task:
  model: {num_classes: 21}          # background included
  train_data: {input_path: /data/train, output_size: [256, 256], global_batch_size: 16}
  validation_data: {input_path: /data/val, output_size: [256, 256], global_batch_size: 16}
```

where ``/data/train/images/x.jpg`` pairs with ``/data/train/masks/x.png`` (one
channel, per-pixel class ids; 255 = ignored).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, ClassVar

from torchgarden.config import (
    Config,
    DataConfig,
    ExperimentConfig,
    RuntimeConfig,
    TaskConfig,
)
from torchgarden.config.errors import ConfigError, choose, require
from torchgarden.config.notices import ModelGardenKey, ignored, mapped
from torchgarden.experiments._presets import adam_cosine_trainer
from torchgarden.experiments._sources import auto_source, check_source
from torchgarden.experiments.library_model import LibraryBackbone
from torchgarden.experiments.segmentation_blocks import (
    SegmentationDecoder,
    SegmentationEvaluationConfig,
    SegmentationHeadConfig,
    SegmentationLossConfig,
)
from torchgarden.models.backbones import NormActivation
from torchgarden.registry import register_experiment

__all__ = [
    "GeneratedShapesConfig",
    "SegmentationBackbone",
    "SegmentationDataConfig",
    "SegmentationModelConfig",
    "SemanticSegmentationConfig",
    "semantic_segmentation",
]

_SPLITS = ("train", "validation")


@dataclasses.dataclass
class SegmentationDataConfig(DataConfig):
    """Image/mask folders and the augmentation applied to them.

    Augmentation (flip, scale jitter, colour jitter) runs on training splits only, as in
    Model Garden; a validation split is resized (scale-cropped at scale 1) to
    ``output_size`` with its masks (``resize_eval_groundtruth``).
    """

    MODEL_GARDEN_KEYS: ClassVar[Mapping[str, ModelGardenKey]] = {
        **DataConfig.MODEL_GARDEN_KEYS,
        "aug_policy": ignored("Model Garden's segmentation parser does not read it"),
    }

    source: str = ""
    """``folder`` (``input_path`` holds `image_subdir`/ and `mask_subdir`/), ``tfrecord``
    (TFRecord shards of ``tf.train.Example`` in Model Garden's segmentation schema, or
    ``tfds_name``), ``shapes`` (the generated shapes data, ``task.generated_data``); empty =
    ``shapes`` without an ``input_path``, ``folder`` with one. Defaults to ""."""
    split: str = ""
    """For generated data: ``train`` or ``validation``; empty = from ``is_training``.
    Defaults to ""."""
    image_subdir: str = "images"
    """Folder of images under ``input_path``. Defaults to "images"."""
    mask_subdir: str = "masks"
    """Folder of masks (matched to images by file stem) under ``input_path``.
    Defaults to "masks"."""
    output_size: list[int] = dataclasses.field(default_factory=list)
    """``[height, width]`` every example is scale-cropped to; empty keeps the image
    size (images must then be equally sized to batch). Defaults to []."""
    aug_rand_hflip: bool = True
    """Random horizontal flips of training pairs. Defaults to True (Model Garden's)."""
    aug_scale_min: float = 1.0
    """Smallest random scale of the scale-crop (needs ``output_size``). Defaults to 1.0."""
    aug_scale_max: float = 1.0
    """Largest random scale of the scale-crop (needs ``output_size``). Defaults to 1.0."""
    color_jitter: float = 0.0
    """Strength of random brightness, contrast and saturation changes. Defaults to 0.0."""
    crop_size: list[int] = dataclasses.field(default_factory=list)
    """``[height, width]``: training pairs are resized to ``output_size`` (aspect ratio not
    kept), a random ``crop_size`` window is cut out, then flipped and scale-jittered to
    ``crop_size`` (Model Garden's order); validation ignores it. Defaults to []."""
    resize_eval_groundtruth: bool = True
    """Validation masks are resized with their images to ``output_size`` (metrics at that
    size); false (metrics on the original masks) is not provided. Defaults to True."""
    groundtruth_padded_size: list[int] = dataclasses.field(default_factory=list)
    """Padded size of original-size validation masks; only with
    ``resize_eval_groundtruth: false`` (not provided). Defaults to []."""
    preserve_aspect_ratio: bool = True
    """Resizing keeps the aspect ratio (then pads); false is not provided. Defaults to True."""
    additional_dense_features: list[Any] = dataclasses.field(default_factory=list)
    """Extra input channels from other TFRecord features; not provided. Defaults to []."""
    dtype: str = "float32"
    """Dtype images leave the parser in (values rounded to it): ``float32``, ``bfloat16``
    or ``float16``; the model computes in float32 / autocast. Defaults to "float32"."""
    preload: bool = True
    """Decode and check every pair once at start and keep them in memory
    (augmentation still runs every step); False reads and checks lazily per
    example. Defaults to True."""

    def resolved_source(self) -> str:
        """`source`, or the one an empty `source` means for this `input_path`."""
        return self.source or auto_source(self, "folder", "")

    def check(self) -> None:
        super().check()
        check_source(self, self.resolved_source(), ("folder", "tfrecord", "shapes"),
                     generated="shapes")
        if self.split and self.split not in _SPLITS:
            key = self.field_path("split")
            raise ConfigError(
                f"{key} must be empty, 'train' or 'validation', received {self.split!r}", key=key
            )
        if self.output_size and (len(self.output_size) != 2 or min(self.output_size) < 1):
            key = self.field_path("output_size")
            raise ConfigError(
                f"{key} must be [] or [height, width] >= 1, received {self.output_size!r}", key=key
            )
        if not 0 < self.aug_scale_min <= self.aug_scale_max:
            key = self.field_path("aug_scale_min")
            raise ConfigError(
                f"{key} ({self.aug_scale_min}) must be > 0 and <= aug_scale_max "
                f"({self.aug_scale_max})", key=key,
            )
        scaled = (self.aug_scale_min, self.aug_scale_max) != (1.0, 1.0)
        if scaled and not (self.output_size or self.crop_size):
            key = self.field_path("output_size")
            raise ConfigError(
                f"{key} is required when aug_scale_min/aug_scale_max are not 1; set e.g. "
                f"{key}=[64, 64]", key=key,
            )
        if self.color_jitter < 0:
            key = self.field_path("color_jitter")
            raise ConfigError(f"{key} must be >= 0, received {self.color_jitter}", key=key)
        self._check_model_garden_keys()
        augmented = self.is_training and (
            self.aug_rand_hflip or self.color_jitter or self.aug_scale_min != 1.0
            or self.aug_scale_max != 1.0)
        if self.cache and augmented:
            key = self.field_path("cache")
            raise ConfigError(
                f"{key}=true would store one augmented copy of each example and replay it "
                f"every epoch; set {key}=false and keep {self.field_path('preload')}=true "
                "(decoded pairs in memory, augmentation every step)", key=key,
            )

    def _check_model_garden_keys(self) -> None:
        """Model Garden's parser options torchgarden does not provide: refused, never read
        differently."""
        choose(self, "dtype", ("float32", "bfloat16", "float16"))
        require(self, "crop_size", not self.crop_size or (
            len(self.crop_size) == 2 and min(self.crop_size) >= 1), "[] or [height, width] >= 1")
        require(self, "resize_eval_groundtruth", self.resize_eval_groundtruth,
                "true (metrics on original-size masks are not provided)")
        require(self, "groundtruth_padded_size", not self.groundtruth_padded_size,
                "[] (it applies only with resize_eval_groundtruth: false)")
        require(self, "preserve_aspect_ratio", self.preserve_aspect_ratio,
                "true (resizing keeps the aspect ratio)")
        require(self, "additional_dense_features", not self.additional_dense_features,
                "[] (extra dense input features are not provided)")


@dataclasses.dataclass
class SegmentationBackbone(LibraryBackbone):
    """A segmentation backbone: Model Garden's one-of (``resnet``, ``dilated_resnet``,
    ``mobilenet``, built by transformers), a library model by ``name``, or neither (the
    built-in encoder-decoder)."""

    PYRAMID_TYPES: ClassVar[tuple[str, ...]] = ("resnet", "dilated_resnet", "mobilenet")

    def levels(self) -> list[int]:
        """The feature levels the Model Garden backbone returns."""
        if self.type == "dilated_resnet":
            return list(range(2, min(int(math.log2(self.dilated_resnet.output_stride)), 5) + 1))
        if self.type == "mobilenet":
            return list(range(2, int(math.log2(self.mobilenet.output_stride or 32)) + 1))
        return [2, 3, 4, 5]


@dataclasses.dataclass
class SegmentationModelConfig(Config):
    """The network: Model Garden's backbone, decoder and head (`torchgarden.vision.deeplab`)
    when ``backbone.type`` is set; else a library backbone under a semantic-FPN head
    (``backbone.name``) or the built-in encoder-decoder of ``widths``."""

    num_classes: int = 4
    """Output classes, background (0) included. Defaults to 4 (background + 3 shapes)."""
    input_size: list[int | None] = dataclasses.field(default_factory=list)
    """``[height, width, channels]`` (Model Garden's order; height and width may be null:
    any size); channels must be 3. [] = RGB of any size. Defaults to []."""
    min_level: int = 3
    """Finest level of an ``fpn`` decoder. Defaults to 3."""
    max_level: int = 6
    """Coarsest level of an ``fpn`` decoder. Defaults to 6."""
    backbone: SegmentationBackbone = dataclasses.field(default_factory=SegmentationBackbone)
    """Model Garden's one-of (``type: resnet | dilated_resnet | mobilenet``), a library
    backbone by ``name`` (``transformers/resnet``), or neither: the built-in encoder-decoder.
    Defaults to the built-in one."""
    decoder: SegmentationDecoder = dataclasses.field(default_factory=SegmentationDecoder)
    """Decoder of a Model Garden backbone (``identity``, ``aspp``, ``fpn``)."""
    head: SegmentationHeadConfig = dataclasses.field(default_factory=SegmentationHeadConfig)
    """Segmentation head of a Model Garden backbone."""
    mask_scoring_head: dict[str, Any] | None = None
    """Model Garden's mask-scoring head; only null (none) is built. Defaults to None."""
    norm_activation: NormActivation = dataclasses.field(
        default_factory=lambda: NormActivation(norm_momentum=0.9, norm_epsilon=1e-5,
                                               use_sync_bn=False))
    """Batch norm of the whole model, activation of a Model Garden backbone, decoder and head.
    Defaults to torch's batch norm (momentum 0.9 in Keras' terms, epsilon 1e-5)."""
    widths: list[int] = dataclasses.field(default_factory=lambda: [16, 32, 64, 128])
    """(torchgarden, built-in model) Channels per encoder level, shallow to deep; each level
    halves the resolution. Defaults to [16, 32, 64, 128]."""
    stem_stride: int = 2
    """(torchgarden, built-in model) Stride of the first convolution: 2 runs the network at
    half resolution and upsamples the logits, 1 keeps full resolution. Defaults to 2."""
    dropout: float = 0.0
    """(torchgarden, built-in and library-backbone models) Dropout before the classifier.
    Defaults to 0.0."""

    def check(self) -> None:
        require(self, "stem_stride", self.stem_stride in (1, 2), "1 or 2")
        require(self, "num_classes", self.num_classes >= 2, ">= 2 (background included)")
        require(self, "widths", bool(self.widths) and min(self.widths) >= 1, "positive ints")
        require(self, "mask_scoring_head", self.mask_scoring_head is None,
                "null (a mask-scoring head is not built)")
        size = self.input_size
        require(self, "input_size", not size or (len(size) == 3 and size[2] == 3 and all(
            v is None or v >= 1 for v in size[:2])), "[] or [height, width, 3] (null: any)")
        if self.backbone.type is None:
            for name in ("decoder", "head"):
                if getattr(self, name) != type(getattr(self, name))():
                    key = self.field_path(name)
                    raise ConfigError(f"{key} shapes the model of a Model Garden backbone; set "
                                      "task.model.backbone.type (e.g. dilated_resnet)", key=key)
            return
        self._check_levels()

    def _check_levels(self) -> None:
        """Levels the decoder and head read exist (Model Garden fails at build otherwise)."""
        levels = self.backbone.levels()
        decoder, head = self.decoder, self.head
        if decoder.type == "aspp":
            _require_at(self, "decoder.aspp.level", decoder.aspp.level in levels,
                        f"one of the backbone's levels {levels}")
            levels_out = [decoder.aspp.level]
        elif decoder.type == "fpn":
            _require_at(self, "min_level", self.min_level in levels and
                        self.min_level <= self.max_level,
                        f"one of the backbone's levels {levels}, <= max_level")
            levels_out = list(range(self.min_level, self.max_level + 1))
        else:
            levels_out = levels
        if str(head.level).isdigit():  # else the head's own check names it
            _require_at(self, "head.level", int(head.level) in levels_out,
                        f"one of the decoder's levels {levels_out}")
        if str(head.feature_fusion).startswith("deeplabv3plus") and str(head.low_level).isdigit():
            _require_at(self, "head.low_level", int(head.low_level) in levels,
                        f"one of the backbone's levels {levels}")


def _require_at(config: Config, dotted: str, ok: bool, requirement: str) -> None:
    """`require` for a key below ``config`` (sub-configs get their path when checked)."""
    if not ok:
        key = config.field_path(dotted)
        value = config
        for part in dotted.split("."):
            value = getattr(value, part)
        raise ConfigError(f"{key} must be {requirement}, received {value!r}", key=key)


@dataclasses.dataclass
class GeneratedShapesConfig(Config):
    """The generated shapes data used when ``*_data.input_path`` is empty."""

    data_dir: str = ""
    """Parent folder of generated data; empty = ``$TORCHGARDEN_DATA_DIR`` or
    ``~/.cache/torchgarden``. Defaults to ""."""
    num_train: int = 512
    """Training images. Defaults to 512."""
    num_validation: int = 128
    """Validation images. Defaults to 128."""
    image_size: int = 64
    """Image height and width. Defaults to 64."""
    max_objects: int = 4
    """Most objects per image. Defaults to 4."""
    seed: int = 0
    """Generator seed. Defaults to 0."""


@dataclasses.dataclass
class SemanticSegmentationConfig(TaskConfig):
    """Per-pixel classification with cross-entropy, mean IoU and image summaries."""

    MODEL_GARDEN_KEYS: ClassVar[Mapping[str, ModelGardenKey]] = {
        "ignore_label": mapped("losses.ignore_label", note="Model Garden's place"),
        **{name: ignored("TPU spatial partitioning of the input; torch keeps each example on "
                         "one device") for name in ("train_input_partition_dims",
                                                    "eval_input_partition_dims")},
    }

    model: SegmentationModelConfig = dataclasses.field(default_factory=SegmentationModelConfig)
    train_data: SegmentationDataConfig = dataclasses.field(
        default_factory=lambda: SegmentationDataConfig(is_training=True)
    )
    validation_data: SegmentationDataConfig = dataclasses.field(
        default_factory=lambda: SegmentationDataConfig(is_training=False)
    )
    generated_data: GeneratedShapesConfig = dataclasses.field(
        default_factory=GeneratedShapesConfig
    )
    """Used by a split whose ``input_path`` is empty; ``model.num_classes - 1`` shape
    classes are drawn."""
    losses: SegmentationLossConfig = dataclasses.field(default_factory=SegmentationLossConfig)
    """The loss; its ``ignore_label`` also marks pixels the metrics leave out."""
    evaluation: SegmentationEvaluationConfig = dataclasses.field(
        default_factory=SegmentationEvaluationConfig)
    """What the IoU metric reports (Model Garden's block)."""
    image_mean: list[float] = dataclasses.field(default_factory=lambda: [0.485, 0.456, 0.406])
    """Per-channel mean subtracted from [0, 1] RGB images. Defaults to ImageNet's."""
    image_std: list[float] = dataclasses.field(default_factory=lambda: [0.229, 0.224, 0.225])
    """Per-channel std images are divided by. Defaults to ImageNet's."""
    allow_image_summary: bool = True
    """Write input / ground truth / prediction images with each evaluation.
    Defaults to True."""
    num_image_summaries: int = 4
    """Validation examples shown in the image summaries. Defaults to 4."""

    def check(self) -> None:
        if len(self.image_mean) != 3 or len(self.image_std) != 3 or min(self.image_std) <= 0:
            key = self.field_path("image_std")
            raise ConfigError(
                f"{self.field_path('image_mean')} and {key} must be 3 values (RGB), std > 0; "
                f"received {self.image_mean} and {self.image_std}", key=key,
            )
        sets = self.validation_data if isinstance(self.validation_data, dict) else {
            "": self.validation_data}
        for name, split in sets.items():
            if split.dtype != self.train_data.dtype:
                key = self.field_path(f"validation_data.{name + '.' if name else ''}dtype")
                raise ConfigError(f"{key} ({split.dtype!r}) differs from train_data.dtype "
                                  f"({self.train_data.dtype!r}); set both equal", key=key)
        ignore = self.losses.ignore_label
        if ignore < self.model.num_classes:
            key = self.field_path("losses.ignore_label")
            raise ConfigError(f"{key} ({ignore}) must be >= model.num_classes "
                              f"({self.model.num_classes}); 255 is the usual choice", key=key)
        weights = self.losses.class_weights
        _require_at(self, "losses.class_weights", not weights or len(weights) ==
                    self.model.num_classes, f"[] or {self.model.num_classes} weights (num_classes)")
        if self.num_image_summaries < 1:
            key = self.field_path("num_image_summaries")
            raise ConfigError(
                f"{key} must be >= 1, received {self.num_image_summaries}", key=key
            )


@register_experiment("semantic_segmentation")
def semantic_segmentation() -> ExperimentConfig:
    """U-Net-style model on generated 64×64 shapes: mean IoU 0.72-0.76 in ~3.5 CPU minutes."""
    return ExperimentConfig(
        task=SemanticSegmentationConfig(
            train_data=SegmentationDataConfig(
                is_training=True, global_batch_size=16, split="train", seed=0,
                output_size=[64, 64], aug_rand_hflip=True, aug_scale_min=0.75,
                aug_scale_max=1.25, color_jitter=0.1,
            ),
            validation_data=SegmentationDataConfig(
                is_training=False, global_batch_size=32, split="validation",
                drop_remainder=False,
            ),
            evaluation=SegmentationEvaluationConfig(report_train_mean_iou=False),
        ),
        trainer=adam_cosine_trainer(
            train_steps=2000, steps_per_loop=50, learning_rate=3e-3, warmup_steps=30,
            best_metric="mean_iou",
        ),
        runtime=RuntimeConfig(seed=0),
    )
