"""``image_classification``: the default experiment (8×8 digits shipped with scikit-learn).

Users point it at their own data by config alone:

```yaml
task:
  model: {num_classes: 5, input_size: [32, 32, 3]}   # height, width, channels
  train_data: {source: folder, input_path: /data/train, global_batch_size: 64}
  validation_data: {source: folder, input_path: /data/val, global_batch_size: 64}
```

``source: npz`` reads ``x`` (N, C, H, W) or (N, H, W) and ``y`` (N,) arrays from a ``.npz``.
``source: datasets`` reads a Hugging Face dataset saved with ``save_to_disk`` (by index, or
as a stream with ``streaming: true``) and ``source: webdataset`` WebDataset ``.tar``
shards; ``x_key`` / ``y_key`` name the image and label columns (docs/data.md).

``task.model.name`` swaps the built-in MLP/CNN for a model library's classifier
(`torchgarden.models`), sized by ``task.model.library_config``::

    torchgarden train --experiment image_classification --params_override \
      'task.model.name=transformers/resnet,task.model.library_config.hidden_sizes=[32,64],task.model.library_config.depths=[1,1],task.model.library_config.embedding_size=32'
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import ClassVar

from torchgarden.config import (
    Config,
    ExperimentConfig,
    RuntimeConfig,
    TaskConfig,
)
from torchgarden.config.errors import ConfigError, not_one_of
from torchgarden.config.errors import choose as _choose
from torchgarden.config.notices import ModelGardenKey, mapped
from torchgarden.experiments._presets import adam_cosine_trainer
from torchgarden.experiments._sources import check_source
from torchgarden.experiments.augmentation import ClassificationAugmentDataConfig
from torchgarden.experiments.library_model import LibraryModelConfig
from torchgarden.models.activations import NormActivation, check_activation
from torchgarden.models.backbones import KERNEL_INITIALIZER_NAMES, Backbone
from torchgarden.registry import register_experiment

__all__ = [
    "BuiltinBackbone",
    "ClassificationBackbone",
    "ClassificationEvaluation",
    "ClassificationLosses",
    "ImageClassificationDataConfig",
    "ImageClassificationModelConfig",
    "ImageClassificationConfig",
    "image_classification",
]

_SOURCES = ("digits", "npz", "folder", "datasets", "webdataset", "tfrecord")
_BUILTIN = ("mlp", "cnn")


@dataclasses.dataclass
class ImageClassificationDataConfig(ClassificationAugmentDataConfig):
    """Where images come from, and Model Garden's augmentation keys
    (`torchgarden.experiments.augmentation`)."""

    source: str = "digits"
    """``digits`` (scikit-learn's bundled 8×8 digits), ``npz``, ``folder``, ``datasets``
    (a Hugging Face dataset saved with ``save_to_disk``), ``webdataset`` (``.tar``
    shards, read as a stream) or ``tfrecord`` (TFRecord shards of ``tf.train.Example`` in
    Model Garden's schema, or a prepared TFDS dataset via ``tfds_name``; docs/data.md)."""
    split: str = ""
    """For ``digits``: ``train`` or ``validation``; empty = from ``is_training``."""
    x_key: str = "x"
    """For ``npz``: the array of images; for ``datasets`` / ``webdataset``: the column
    (tar member extension, e.g. ``npy`` or ``png``) holding each image."""
    y_key: str = "y"
    """For ``npz``: the array of integer labels; for ``datasets`` / ``webdataset``: the
    label column (e.g. ``label`` or ``cls``)."""
    shuffle_buffer_size: int = 10000
    """Records in the shuffle buffer of ``source: tfrecord`` (Model Garden's classification
    default)."""
    cycle_length: int | None = 10
    """TFRecord files read at once, interleaved (Model Garden's classification default)."""
    image_field_key: str = "image/encoded"
    """For ``tfrecord``: the ``tf.train.Example`` feature holding the encoded image."""
    label_field_key: str = "image/class/label"
    """For ``tfrecord``: the feature holding the class id (int64)."""
    aug_rand_hflip: bool = True
    """For ``tfrecord``, training: random left-right flips."""
    aug_crop: bool = True
    """For ``tfrecord``, training: Model Garden's random crop (area in `crop_area_range`,
    aspect ratio in [3/4, 4/3]); False keeps the whole image."""
    crop_area_range: list[float] = dataclasses.field(default_factory=lambda: [0.08, 1.0])
    """Area fractions of the random crop."""
    center_crop_fraction: float = 0.875
    """Side of the evaluation center crop as a fraction of the shorter side (also the
    training crop when no random crop fits)."""
    tf_resize_method: str = "bilinear"
    """Resize to ``task.model.input_size``: ``bilinear`` or ``nearest`` (as ``tf.image.resize``,
    without antialiasing)."""
    streaming: bool = False
    """For ``datasets``: read the Arrow files as a stream, one shard per file, instead of
    by index (``webdataset`` always streams). Streams resume exactly from their saved
    position and are shuffled by shard order only (docs/data.md)."""

    def check(self) -> None:
        super().check()
        check_source(self, self.source, _SOURCES, generated="digits")
        lo, hi = (list(self.crop_area_range) + [0.0, 0.0])[:2]
        if len(self.crop_area_range) != 2 or not 0 < lo <= hi <= 1:
            key = self.field_path("crop_area_range")
            raise ConfigError(f"{key} must be [min, max] with 0 < min <= max <= 1, received "
                              f"{self.crop_area_range}", key=key)
        if not 0 < self.center_crop_fraction <= 1:
            key = self.field_path("center_crop_fraction")
            raise ConfigError(f"{key} must be in (0, 1], received {self.center_crop_fraction}",
                              key=key)
        _choose(self, "tf_resize_method", ("bilinear", "nearest"))
        if self.streaming and self.source != "datasets":
            raise ConfigError(
                f"{self.field_path('streaming')} applies to source 'datasets' only "
                f"(source is '{self.source}'); unset it."
            )


@dataclasses.dataclass
class BuiltinBackbone(Config):
    """torchgarden's small built-in network, sized by ``task.model.hidden_sizes``."""


@dataclasses.dataclass
class ClassificationBackbone(Backbone):
    """Model Garden's backbone one-of plus torchgarden's two small built-in networks."""

    type: str | None = "mlp"
    """The backbone in use: ``mlp`` or ``cnn`` (torchgarden's small networks, sized by
    ``task.model.hidden_sizes``) or a Model Garden backbone (``resnet``, ``vit``,
    ``mobilenet``, ``efficientnet``). Defaults to mlp."""
    mlp: BuiltinBackbone = dataclasses.field(default_factory=BuiltinBackbone)
    """Flatten + ``hidden_sizes`` dense layers (ReLU)."""
    cnn: BuiltinBackbone = dataclasses.field(default_factory=BuiltinBackbone)
    """A 3x3 conv block (batch norm, ReLU, 2x2 max pool) per ``hidden_sizes`` entry."""


@dataclasses.dataclass
class ImageClassificationModelConfig(LibraryModelConfig):
    """Model Garden's classification model: a backbone, global pooling, dropout and a dense
    layer; or a model library's whole classifier when ``name`` is set."""

    MODEL_GARDEN_KEYS: ClassVar[Mapping[str, ModelGardenKey]] = {
        "architecture": mapped("backbone.type", note="architecture is now backbone.type"),
        "dropout": mapped("dropout_rate", note="dropout is now dropout_rate"),
    }

    num_classes: int = 10
    """Number of classes."""
    input_size: list[int] = dataclasses.field(default_factory=lambda: [8, 8, 1])
    """Input shape ``[height, width, channels]`` (Model Garden's order)."""
    backbone: ClassificationBackbone = dataclasses.field(default_factory=ClassificationBackbone)
    """The backbone one-of (`torchgarden.models.backbones`). Defaults to the built-in MLP."""
    dropout_rate: float = 0.0
    """Dropout before the dense layer."""
    norm_activation: NormActivation = dataclasses.field(
        default_factory=lambda: NormActivation(use_sync_bn=False))
    """Activation and batch norm of a Model Garden backbone (unused by ``mlp``/``cnn``)."""
    add_head_batch_norm: bool = False
    """Batch norm on the backbone's features before global pooling (Model Garden
    backbones)."""
    kernel_initializer: str = "random_uniform"
    """Keras initializer of the dense layer's kernel: ``random_uniform`` (±0.05), ``zeros``,
    ``glorot_uniform``, ``he_normal``, ... (`KERNEL_INITIALIZER_NAMES`)."""
    output_softmax: bool = False
    """Model Garden's softmax outputs; only False (logits) is supported: the loss reads
    logits and serving returns probabilities."""
    hidden_sizes: list[int] = dataclasses.field(default_factory=lambda: [128])
    """Widths of the ``mlp`` hidden layers or channels of the ``cnn`` blocks."""

    def check(self) -> None:
        super().check()
        if self.num_classes < 2:
            raise ConfigError(f"task.model.num_classes must be >= 2, got {self.num_classes}.")
        if len(self.input_size) != 3 or min(self.input_size) < 1:
            key = self.field_path("input_size")
            raise ConfigError(f"{key} must be [height, width, channels] (Model Garden's order) "
                              f"of positive ints, got {self.input_size}.", key=key)
        height, width, channels = self.input_size
        if height <= 4 < channels:  # [channels, height, width]: this key's order before
            key = self.field_path("input_size")
            raise ConfigError(
                f"{key} is [height, width, channels] (Model Garden's order); {self.input_size} "
                f"reads as {height}-pixel-high images with {channels} channels; did you mean "
                f"[{width}, {channels}, {height}]?", key=key)
        check_activation(self.backbone.type, self.norm_activation.activation,
                         self.field_path("norm_activation.activation"))
        if any(size < 1 for size in self.hidden_sizes):
            raise ConfigError(
                f"task.model.hidden_sizes must be positive widths, got {self.hidden_sizes}; "
                "drop an entry to remove a layer."
            )
        if not 0.0 <= self.dropout_rate < 1.0:
            key = self.field_path("dropout_rate")
            raise ConfigError(f"{key} must be in [0, 1), got {self.dropout_rate}.", key=key)
        if self.kernel_initializer not in KERNEL_INITIALIZER_NAMES:
            raise not_one_of(self.field_path("kernel_initializer"), self.kernel_initializer,
                             KERNEL_INITIALIZER_NAMES)
        if self.output_softmax:
            key = self.field_path("output_softmax")
            raise ConfigError(f"{key}: True is not supported: the loss reads logits and the "
                              "serving module returns probabilities; set it to false", key=key)
        if self.name and self.backbone.type not in _BUILTIN:
            key = self.field_path("name")
            raise ConfigError(f"{key} ({self.name!r}) and backbone.type "
                              f"({self.backbone.type!r}) both name the network; keep one",
                              key=key)


@dataclasses.dataclass
class ClassificationLosses(Config):
    """Model Garden's classification losses block."""

    loss_weight: float = 1.0
    """Multiplies the whole loss (cross-entropy, L2 penalty and auxiliary losses)."""
    one_hot: bool = True
    """Labels become one-hot vectors and ``label_smoothing`` applies; False: sparse labels
    (no smoothing) or, with ``soft_labels``, label distributions."""
    label_smoothing: float = 0.0
    """Label smoothing of the one-hot cross-entropy (``one_hot: true`` only, as in Model
    Garden)."""
    l2_weight_decay: float = 0.0
    """L2 penalty ``l2_weight_decay / 2 * sum(w**2)`` over conv and dense kernels."""
    soft_labels: bool = False
    """With ``one_hot: false``: labels are class distributions (mixup/cutmix)."""
    use_binary_cross_entropy: bool = False
    """Model Garden's per-class sigmoid loss; only False is supported."""

    def check(self) -> None:
        if not 0.0 <= self.label_smoothing <= 1.0:
            key = self.field_path("label_smoothing")
            raise ConfigError(f"{key} must be in [0, 1], got {self.label_smoothing}.", key=key)
        if self.l2_weight_decay < 0:
            key = self.field_path("l2_weight_decay")
            raise ConfigError(f"{key} must be >= 0, got {self.l2_weight_decay}.", key=key)
        if self.use_binary_cross_entropy:
            key = self.field_path("use_binary_cross_entropy")
            raise ConfigError(f"{key}: True is not supported (torchgarden's classification "
                              "loss is the softmax cross-entropy); set it to false", key=key)


@dataclasses.dataclass
class ClassificationEvaluation(Config):
    """Model Garden's classification evaluation block."""

    top_k: int = 5
    """``top_{k}_accuracy`` metric; 0 disables it."""
    precision_and_recall_thresholds: list[float] | None = None
    """Multi-label precision/recall thresholds; only None is supported."""
    report_per_class_precision_and_recall: bool = False
    """Per-class precision/recall; only False is supported."""

    def check(self) -> None:
        if self.top_k < 0:
            key = self.field_path("top_k")
            raise ConfigError(f"{key} must be >= 0 (0 disables it), got {self.top_k}.", key=key)
        for name in ("precision_and_recall_thresholds", "report_per_class_precision_and_recall"):
            if getattr(self, name):
                key = self.field_path(name)
                raise ConfigError(f"{key}: {getattr(self, name)!r} is not supported (multi-label "
                                  "precision/recall metrics); leave it unset", key=key)


@dataclasses.dataclass
class ImageClassificationConfig(TaskConfig):
    """Model Garden's image-classification task (REFERENCE §12.1)."""

    MODEL_GARDEN_KEYS: ClassVar[Mapping[str, ModelGardenKey]] = {
        "label_smoothing": mapped("losses.label_smoothing", note="now under losses"),
        "l2_weight_decay": mapped("losses.l2_weight_decay", note="now under losses"),
        "top_k": mapped("evaluation.top_k", note="now under evaluation"),
    }

    model: ImageClassificationModelConfig = dataclasses.field(
        default_factory=ImageClassificationModelConfig
    )
    train_data: ImageClassificationDataConfig = dataclasses.field(
        default_factory=lambda: ImageClassificationDataConfig(is_training=True)
    )
    validation_data: ImageClassificationDataConfig = dataclasses.field(
        default_factory=lambda: ImageClassificationDataConfig(is_training=False)
    )
    losses: ClassificationLosses = dataclasses.field(default_factory=ClassificationLosses)
    """The loss (Model Garden's ``losses`` block)."""
    evaluation: ClassificationEvaluation = dataclasses.field(
        default_factory=ClassificationEvaluation)
    """Evaluation metrics (Model Garden's ``evaluation`` block)."""
    model_output_keys: list[int] = dataclasses.field(default_factory=list)
    """Model Garden's multi-output selection; only [] (one output) is supported."""

    def check(self) -> None:
        super().check()
        if self.model_output_keys:
            key = self.field_path("model_output_keys")
            raise ConfigError(f"{key}: {self.model_output_keys} is not supported (the model has "
                              "one output); leave it empty", key=key)


@register_experiment("image_classification")
def image_classification() -> ExperimentConfig:
    """MLP on 8×8 digits: ≥0.95 validation accuracy in a few seconds on a CPU."""
    return ExperimentConfig(
        task=ImageClassificationConfig(
            train_data=ImageClassificationDataConfig(
                is_training=True, global_batch_size=64, split="train", seed=0
            ),
            validation_data=ImageClassificationDataConfig(
                is_training=False, global_batch_size=256, split="validation",
                drop_remainder=False,
            ),
        ),
        trainer=adam_cosine_trainer(
            train_steps=2000, steps_per_loop=100, learning_rate=3e-3, warmup_steps=50,
            best_metric="accuracy",
        ),
        runtime=RuntimeConfig(seed=0),
    )
