"""``retinanet``: RetinaNet-style object detection (REFERENCE §12.2), on shipped shapes data.

By default it trains on generated 64x64 shape images (`torchgarden.vision.generate_shapes_dataset`,
written once under ``$TORCHGARDEN_DATA_DIR`` or ``~/.cache/torchgarden``; nothing is downloaded)
and reports COCO box AP/AR on validation. Own COCO-format data is a config change:

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
from collections.abc import Mapping
from typing import Any, ClassVar

from torchgarden.config import (
    Config,
    DataConfig,
    ExperimentConfig,
    OptimizationConfig,
    RuntimeConfig,
    TaskConfig,
    TrainerConfig,
)
from torchgarden.config.errors import ConfigError, ConfigKeyError, choose, require
from torchgarden.config.notices import ModelGardenKey, ignored, mapped
from torchgarden.experiments._presets import adam_cosine_trainer
from torchgarden.experiments._sources import auto_source, check_source
from torchgarden.experiments.augmentation import AugmentationConfig
from torchgarden.experiments.library_model import LibraryBackbone
from torchgarden.experiments.retinanet_blocks import (
    Anchor,
    Decoder,
    DetectionGenerator,
    RetinaNetHeadConfig,
)
from torchgarden.experiments.semantic_segmentation import GeneratedShapesConfig
from torchgarden.models.activations import NormActivation, check_activation
from torchgarden.registry import register_experiment

__all__ = [
    "RetinaNetConfig", "RetinaNetDataConfig", "RetinaNetLossConfig", "RetinaNetModelConfig",
    "RetinaNetParserConfig", "retinanet", "retinanet_resnet18", "retinanet_resnetfpn_coco",
]


@dataclasses.dataclass(frozen=True)
class _Moved(ModelGardenKey):
    """A torchgarden key that moved to Model Garden's place: setting it is an error."""

    def rewrite(self, key: str, value: Any, *, path: str) -> tuple[str, Any] | None:
        raise ConfigKeyError(f"{path} moved to {self.target} (Model Garden's place); set it "
                             "there", key=path)


@dataclasses.dataclass
class RetinaNetParserConfig(Config):
    """Model Garden's RetinaNet ``Parser``: augmentation and anchor labelling of a split."""

    MODEL_GARDEN_KEYS: ClassVar[Mapping[str, ModelGardenKey]] = {
        "aug_policy": ignored("Model Garden keeps it for backward compatibility and does not "
                              "use it (use aug_type)"),
    }
    num_channels: int = 3
    """Image channels; 3 (RGB) is provided. Defaults to 3."""
    match_threshold: float = 0.5
    """Anchors with IoU >= this are positive. Defaults to 0.5."""
    unmatched_threshold: float = 0.5
    """Anchors with IoU < this are negative; in between they are ignored. Defaults to 0.5."""
    aug_rand_hflip: bool = False
    """Random left-right flips (with boxes) of training images. Defaults to False."""
    aug_rand_jpeg: dict[str, Any] | None = None
    """Random JPEG re-encoding; not provided (a value is refused). Defaults to None."""
    aug_scale_min: float = 1.0
    """Smallest random scale of the training resize-and-crop to ``task.model.input_size``.
    Defaults to 1.0."""
    aug_scale_max: float = 1.0
    """Largest random scale of the training resize-and-crop. Defaults to 1.0."""
    skip_crowd_during_training: bool = True
    """Leave crowd boxes out of training labels; false (crowds trained as objects) is not
    provided. Defaults to True."""
    max_num_instances: int = 100
    """Boxes kept per image (the first), as Model Garden's fixed-size labels. Defaults to 100."""
    aug_type: AugmentationConfig | None = None
    """RandAugment/AutoAugment with boxes; not provided (a type is refused). Defaults to None."""
    pad: bool = True
    """Pad resized images to ``input_size``; false is not provided. Defaults to True."""
    keep_aspect_ratio: bool = True
    """Keep the aspect ratio when resizing; false is not provided. Defaults to True."""

    def check(self) -> None:
        require(self, "num_channels", self.num_channels == 3, "3 (RGB images)")
        require(self, "unmatched_threshold",
                0 <= self.unmatched_threshold <= self.match_threshold <= 1,
                f"in [0, match_threshold ({self.match_threshold})] with match_threshold <= 1")
        require(self, "aug_scale_min", 0 < self.aug_scale_min <= self.aug_scale_max,
                f"> 0 and <= aug_scale_max ({self.aug_scale_max})")
        require(self, "max_num_instances", self.max_num_instances >= 1, ">= 1")
        require(self, "aug_rand_jpeg", self.aug_rand_jpeg is None,
                "None (random JPEG quality is not provided)")
        require(self, "skip_crowd_during_training", self.skip_crowd_during_training,
                "true (crowd boxes are never trained as objects here)")
        require(self, "aug_type", self.aug_type is None or self.aug_type.type is None,
                "None (box-aware RandAugment/AutoAugment is not provided)")
        require(self, "pad", self.pad, "true (images are always padded to input_size)")
        require(self, "keep_aspect_ratio", self.keep_aspect_ratio,
                "true (resizing keeps the aspect ratio)")


@dataclasses.dataclass
class RetinaNetDataConfig(DataConfig):
    """A detection split (see ``source``). Augmentation and anchor labelling sit under
    ``parser`` (Model Garden's place); the older ``aug_rand_hflip`` / ``aug_scale_min`` /
    ``aug_scale_max`` here are read as the ``parser`` keys, with a notice."""

    MODEL_GARDEN_KEYS: ClassVar[Mapping[str, ModelGardenKey]] = {
        **DataConfig.MODEL_GARDEN_KEYS,
        **{name: mapped(f"parser.{name}", note="Model Garden's place is the split's parser")
           for name in ("aug_rand_hflip", "aug_scale_min", "aug_scale_max")},
    }
    source: str = ""
    """``coco`` (a COCO JSON in ``input_path`` and its images), ``tfrecord`` (TFRecord shards
    of ``tf.train.Example`` in Model Garden's detection schema, or ``tfds_name``), ``shapes``
    (the generated shapes data, ``task.generated_data``); empty = ``shapes`` without an
    ``input_path``, ``coco`` with a ``.json`` one. Defaults to ""."""
    image_dir: str = ""
    """Folder the JSON's ``file_name`` entries are relative to; empty = the ``images``
    folder beside ``input_path``. Defaults to ""."""
    parser: RetinaNetParserConfig = dataclasses.field(default_factory=RetinaNetParserConfig)
    """Model Garden's parser block: flips, scale jitter, anchor matching thresholds."""
    color_jitter: float = 0.0
    """Strength of random brightness, contrast and saturation changes of training images
    (a torchgarden key). Defaults to 0.0."""
    dtype: str = "bfloat16"
    """Dtype images leave the parser in: ``float32``, ``bfloat16`` or ``float16`` (values
    rounded to it, as Model Garden's cast does); the model receives them cast to float32
    (autocast runs the mixed precision). Defaults to "bfloat16", Model Garden's."""

    def resolved_source(self) -> str:
        """`source`, or the one an empty `source` means for this `input_path`."""
        return self.source or auto_source(self, "coco", ".json")

    def check(self) -> None:
        super().check()
        source = self.resolved_source()
        check_source(self, source, ("coco", "tfrecord", "shapes"), generated="shapes")
        paths = self.input_path if isinstance(self.input_path, list) else [self.input_path]
        require(self, "input_path", source != "coco" or len(paths) <= 1, "one COCO JSON file")
        require(self, "color_jitter", self.color_jitter >= 0, ">= 0")
        choose(self, "dtype", ("float32", "bfloat16", "float16"))


@dataclasses.dataclass
class RetinaNetModelConfig(Config):
    """Model Garden's RetinaNet model block (`torchgarden.vision.RetinaNet`)."""

    MODEL_GARDEN_KEYS: ClassVar[Mapping[str, ModelGardenKey]] = {
        name: mapped(target, note=f"now {target}, as in Model Garden") for name, target in {
            "fpn_channels": "decoder.fpn.num_filters",
            "head_channels": "head.num_filters",
            "num_head_convs": "head.num_convs",
            "num_scales": "anchor.num_scales",
            "aspect_ratios": "anchor.aspect_ratios",
            "anchor_size": "anchor.anchor_size",
            "score_threshold": "detection_generator.pre_nms_score_threshold",
            "nms_iou_threshold": "detection_generator.nms_iou_threshold",
            "max_num_detections": "detection_generator.max_num_detections",
            "pre_nms_top_k": "detection_generator.pre_nms_top_k",
        }.items()
    }

    num_classes: int = 3
    """Foreground classes; must equal the number of categories in the data. Defaults to 3."""
    input_size: list[int | None] = dataclasses.field(default_factory=lambda: [64, 64])
    """``[height, width, 3]`` (Model Garden's order) or ``[height, width]`` images are
    resized (aspect kept) and padded to. Defaults to [64, 64]."""
    min_level: int = 2
    """Finest pyramid level (stride ``2**min_level``). Defaults to 2 (Model Garden: 3)."""
    max_level: int = 4
    """Coarsest pyramid level; levels above the backbone's are stride-2 convs (P6, P7).
    Defaults to 4 (Model Garden: 7)."""
    anchor: Anchor = dataclasses.field(default_factory=Anchor)
    """Anchors."""
    backbone: LibraryBackbone = dataclasses.field(default_factory=LibraryBackbone)
    """Model Garden's one-of (``type: resnet`` or ``mobilenet``, built by transformers;
    levels 2..5), a library backbone by ``name`` (``transformers/resnet``) or, with neither, the built-in
    small backbone of ``backbone_channels``."""
    decoder: Decoder = dataclasses.field(default_factory=Decoder)
    """The feature pyramid."""
    head: RetinaNetHeadConfig = dataclasses.field(default_factory=RetinaNetHeadConfig)
    """Class and box towers."""
    detection_generator: DetectionGenerator = dataclasses.field(
        default_factory=DetectionGenerator)
    """Decoding and NMS of the detections."""
    norm_activation: NormActivation = dataclasses.field(
        default_factory=lambda: NormActivation(norm_momentum=0.9, norm_epsilon=1e-5,
                                               use_sync_bn=False))
    """Batch norm of the backbone, pyramid and head; ``activation`` is that of the pyramid
    (before P7), the head's towers and a ResNet backbone (MobileNet keeps relu6, as in
    Model Garden; the built-in backbone ReLU). Defaults to torch's batch norm (momentum 0.9
    in Keras' terms, epsilon 1e-5) and relu."""
    backbone_channels: list[int] = dataclasses.field(default_factory=lambda: [16, 32, 64, 128])
    """(torchgarden) Channels of the built-in backbone's stages 1..max_level. Defaults to
    [16, 32, 64, 128]."""
    prior_probability: float = 0.01
    """Initial foreground probability of the classifier. Defaults to 0.01."""

    def check(self) -> None:
        require(self, "num_classes", self.num_classes >= 1, ">= 1")
        size = self.input_size
        valid = len(size) in (2, 3) and None not in size[:2] and min(size[:2]) >= 1
        require(self, "input_size", valid and size[2:] in ([], [3]),
                "[height, width, 3] or [height, width] >= 1")
        require(self, "min_level", 1 <= self.min_level <= self.max_level,
                f">= 1 and <= max_level ({self.max_level})")
        builtin = self.backbone.type is None and not self.backbone.name
        if builtin and len(self.backbone_channels) != self.max_level:
            key = self.field_path("backbone_channels")
            raise ConfigError(f"{key} needs one entry per level 1..{self.max_level} (max_level), "
                              f"received {self.backbone_channels}", key=key)
        check_activation(self.backbone.type, self.norm_activation.activation,
                         self.field_path("norm_activation.activation"))


@dataclasses.dataclass
class RetinaNetLossConfig(Config):
    """The loss (Model Garden's defaults); matching thresholds: ``task.train_data.parser``."""

    MODEL_GARDEN_KEYS: ClassVar[Mapping[str, ModelGardenKey]] = {
        name: _Moved(target=f"task.train_data.parser.{name}")
        for name in ("match_threshold", "unmatched_threshold")
    }

    focal_loss_alpha: float = 0.25
    """Focal-loss weight of positives. Defaults to 0.25."""
    focal_loss_gamma: float = 1.5
    """Focal-loss focusing exponent. Defaults to 1.5."""
    huber_loss_delta: float = 0.1
    """Huber box-loss delta. Defaults to 0.1."""
    box_loss_weight: float = 50.0
    """``total = cls + box_loss_weight * box``. Defaults to 50.0."""
    loss_weight: float = 1.0
    """Multiplies the whole loss. Defaults to 1.0."""
    l2_weight_decay: float = 0.0
    """L2 penalty ``l2_weight_decay / 2 * sum(w**2)`` over conv kernels (Model Garden's
    kernel regularizer). Defaults to 0.0."""
    match_each_groundtruth: bool = True
    """Give every box its best anchor as a positive, whatever the IoU (as Model Garden's
    anchor labeler does). Defaults to True."""


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
    """Validation images drawn with detections when ``allow_image_summary``. Defaults to 4."""

    def check(self) -> None:
        if len(self.image_mean) != 3 or len(self.image_std) != 3 or min(self.image_std) <= 0:
            key = self.field_path("image_std")
            raise ConfigError(
                f"{self.field_path('image_mean')} and {key} must be 3 values (RGB), std > 0; "
                f"received {self.image_mean} and {self.image_std}", key=key)
        self._check_matching()
        require(self, "max_num_eval_detections", self.max_num_eval_detections >= 1, ">= 1")

    def _check_matching(self) -> None:
        """Anchors are matched in the loss with one pair of thresholds: the training
        parser's. A validation parser asking for others is refused, not read differently."""
        train = self.train_data.parser
        if not 0 <= train.unmatched_threshold <= train.match_threshold <= 1:
            return  # the parser's own check names the bad value
        sets = self.validation_data if isinstance(self.validation_data, dict) else {
            "": self.validation_data}
        for name, split in sets.items():
            for field in ("match_threshold", "unmatched_threshold"):
                mine, theirs = getattr(split.parser, field), getattr(train, field)
                if mine != theirs:
                    key = self.field_path(f"validation_data.{name + '.' if name else ''}"
                                          f"parser.{field}")
                    raise ConfigError(
                        f"{key} ({mine}) differs from train_data.parser.{field} ({theirs}); "
                        "the loss matches anchors with the training parser's thresholds, so "
                        "set both equal", key=key)


def _parser(**kwargs: Any) -> RetinaNetParserConfig:
    """The presets' parser: torchgarden's tuned matching (0.5 / 0.4) on shapes."""
    return RetinaNetParserConfig(unmatched_threshold=0.4, **kwargs)


@register_experiment("retinanet")
def retinanet() -> ExperimentConfig:
    """RetinaNet on 64x64 shapes: AP50 ~0.8, AP ~0.5 after 1000 Adam steps (~5 CPU minutes)."""
    return ExperimentConfig(
        task=RetinaNetConfig(
            train_data=RetinaNetDataConfig(
                is_training=True, global_batch_size=32, seed=0, dtype="float32", parser=_parser(
                    aug_rand_hflip=True, aug_scale_min=0.8, aug_scale_max=1.25)),
            validation_data=RetinaNetDataConfig(
                is_training=False, global_batch_size=32, drop_remainder=False,
                dtype="float32", parser=_parser()),
            allow_image_summary=True),
        trainer=adam_cosine_trainer(
            train_steps=1000, steps_per_loop=100, learning_rate=5e-3, warmup_steps=100,
            best_metric="AP"),
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


COCO_TRAIN_EXAMPLES = 118287
COCO_VAL_EXAMPLES = 5000


@register_experiment("retinanet_resnetfpn_coco")
def retinanet_resnetfpn_coco() -> ExperimentConfig:
    """Model Garden's ``retinanet_resnetfpn_coco``: a transformers ResNet-50 with Model
    Garden's FPN and head at 640x640x3 on COCO TFRecords under ``coco/``, its SGD schedule.

    Model Garden starts the backbone from its ImageNet checkpoint on Cloud Storage; nothing is
    downloaded here: set ``task.model.backbone.pretrained_path`` (or ``task.init_checkpoint``)
    to a local file, or the backbone starts from random weights.
    """
    train_batch_size, eval_batch_size = 256, 8
    steps_per_epoch = COCO_TRAIN_EXAMPLES // train_batch_size
    scale = train_batch_size / 256.0
    task = RetinaNetConfig()
    task.override({
        "model": {
            "num_classes": 91, "input_size": [640, 640, 3], "min_level": 3, "max_level": 7,
            "backbone": {"type": "resnet", "resnet": {"model_id": 50}},
            "norm_activation": {"activation": "relu", "norm_momentum": 0.99,
                                "norm_epsilon": 0.001, "use_sync_bn": False},
            "anchor": {"num_scales": 3, "aspect_ratios": [0.5, 1.0, 2.0], "anchor_size": 4.0},
            "decoder": {"type": "fpn", "fpn": {"num_filters": 256, "batch_norm": True}},
            "head": {"num_convs": 4, "num_filters": 256, "norm_per_level": True},
            "detection_generator": {"pre_nms_top_k": 5000}},
        "losses": {"l2_weight_decay": 1e-4},
        "train_data": {"source": "tfrecord", "input_path": "coco/train*", "is_training": True,
                       "global_batch_size": train_batch_size, "parser": {
                           "aug_rand_hflip": True, "aug_scale_min": 0.8, "aug_scale_max": 1.2}},
        "validation_data": {"source": "tfrecord", "input_path": "coco/val*",
                            "is_training": False, "global_batch_size": eval_batch_size}})
    return ExperimentConfig(
        task=task,
        trainer=TrainerConfig(
            train_steps=72 * steps_per_epoch,
            validation_steps=COCO_VAL_EXAMPLES // eval_batch_size,
            validation_interval=steps_per_epoch, steps_per_loop=steps_per_epoch,
            summary_interval=steps_per_epoch, checkpoint_interval=steps_per_epoch,
            optimizer_config=OptimizationConfig.from_dict({
                "optimizer": {"type": "sgd", "sgd": {"momentum": 0.9}},
                "learning_rate": {"type": "stepwise", "stepwise": {
                    "boundaries": [57 * steps_per_epoch, 67 * steps_per_epoch],
                    "values": [0.32 * scale, 0.032 * scale, 0.0032 * scale]}},
                "warmup": {"type": "linear", "linear": {
                    "warmup_steps": 500, "warmup_learning_rate": 0.0067}}})),
        runtime=RuntimeConfig(mixed_precision_dtype="bfloat16"))
