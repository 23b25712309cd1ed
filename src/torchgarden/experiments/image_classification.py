"""``image_classification``: the default experiment (8×8 digits shipped with scikit-learn).

Users point it at their own data by config alone:

```yaml
task:
  model: {num_classes: 5, input_size: [3, 32, 32]}
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

from torchgarden.config import (
    DataConfig,
    ExperimentConfig,
    RuntimeConfig,
    TaskConfig,
)
from torchgarden.config.errors import ConfigError
from torchgarden.experiments._presets import adam_cosine_trainer
from torchgarden.experiments._sources import check_source
from torchgarden.experiments.library_model import LibraryModelConfig
from torchgarden.registry import register_experiment

__all__ = [
    "ImageClassificationDataConfig",
    "ImageClassificationModelConfig",
    "ImageClassificationConfig",
    "image_classification",
]

_SOURCES = ("digits", "npz", "folder", "datasets", "webdataset", "tfrecord")
_ARCHITECTURES = ("mlp", "cnn")


@dataclasses.dataclass
class ImageClassificationDataConfig(DataConfig):
    """Where images come from."""

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
    streaming: bool = False
    """For ``datasets``: read the Arrow files as a stream, one shard per file, instead of
    by index (``webdataset`` always streams). Streams resume exactly from their saved
    position and are shuffled by shard order only (docs/data.md)."""

    def check(self) -> None:
        super().check()
        check_source(self, self.source, _SOURCES, generated="digits")
        if self.streaming and self.source != "datasets":
            raise ConfigError(
                f"{self.field_path('streaming')} applies to source 'datasets' only "
                f"(source is '{self.source}'); unset it."
            )


@dataclasses.dataclass
class ImageClassificationModelConfig(LibraryModelConfig):
    """A small built-in classifier, or a model library's one when ``name`` is set."""

    architecture: str = "mlp"
    """``mlp`` (flatten + hidden layers) or ``cnn`` (conv blocks + linear head); unused
    when ``name`` names a library model."""
    input_size: list[int] = dataclasses.field(default_factory=lambda: [1, 8, 8])
    """Input shape (channels, height, width)."""
    num_classes: int = 10
    """Number of classes."""
    hidden_sizes: list[int] = dataclasses.field(default_factory=lambda: [128])
    """MLP hidden widths, or CNN channel counts per block (built-in models only)."""
    dropout: float = 0.0
    """Dropout before the classifier (built-in models only)."""

    def check(self) -> None:
        super().check()
        if self.architecture not in _ARCHITECTURES:
            raise ConfigError(
                f"task.model.architecture must be one of {', '.join(_ARCHITECTURES)}, got "
                f"'{self.architecture}'."
            )
        if self.num_classes < 2:
            raise ConfigError(f"task.model.num_classes must be >= 2, got {self.num_classes}.")
        if len(self.input_size) != 3 or min(self.input_size) < 1:
            raise ConfigError(
                f"task.model.input_size must be [channels, height, width] of positive ints, got "
                f"{self.input_size}."
            )
        if any(size < 1 for size in self.hidden_sizes):
            raise ConfigError(
                f"task.model.hidden_sizes must be positive widths, got {self.hidden_sizes}; "
                "drop an entry to remove a layer."
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"task.model.dropout must be in [0, 1), got {self.dropout}.")


@dataclasses.dataclass
class ImageClassificationConfig(TaskConfig):
    """The image-classification task (REFERENCE §12.1, trimmed to what small data needs)."""

    model: ImageClassificationModelConfig = dataclasses.field(
        default_factory=ImageClassificationModelConfig
    )
    train_data: ImageClassificationDataConfig = dataclasses.field(
        default_factory=lambda: ImageClassificationDataConfig(is_training=True)
    )
    validation_data: ImageClassificationDataConfig = dataclasses.field(
        default_factory=lambda: ImageClassificationDataConfig(is_training=False)
    )
    label_smoothing: float = 0.0
    """Label smoothing of the cross-entropy loss."""
    l2_weight_decay: float = 0.0
    """L2 penalty added to the loss (Model Garden's convention: ``l2/2 * sum(w**2)``)."""
    top_k: int = 5
    """``top_{k}_accuracy`` metric; 0 disables it."""

    def check(self) -> None:
        super().check()
        if not 0.0 <= self.label_smoothing <= 1.0:
            raise ConfigError(
                f"task.label_smoothing must be in [0, 1], got {self.label_smoothing}."
            )
        if self.l2_weight_decay < 0:
            raise ConfigError(f"task.l2_weight_decay must be >= 0, got {self.l2_weight_decay}.")
        if self.top_k < 0:
            raise ConfigError(f"task.top_k must be >= 0 (0 disables it), got {self.top_k}.")


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
