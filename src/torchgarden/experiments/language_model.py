"""``language_model``: a decoder-only Transformer on the Python standard library's source.

The text ships with every Python: the running interpreter's ``stdlib`` ``*.py`` files
(`torchgarden.text.read_corpus`), split by file into train and validation (CRC-32 of the
path), packed into fixed-length byte sequences (256 byte-level tokens). The model is a
`transformers` decoder built from its config (GPT-2 by default; ``transformers/llama``
and ``transformers/bert`` as a decoder also train). Validation reports
``bits_per_byte`` beside the ``unigram_bits_per_byte`` baseline; training reports
``tokens_per_second`` and ``mfu``.

The default trains on 2 CPU cores in about two minutes. GPT-2-small on a GPU, with
bf16, ``torch.compile`` and activation checkpointing::

    torchgarden train --experiment language_model --model_dir runs/gpt2_small \\
      --config_file examples/configs/language_model_gpt2_small.yaml

Other text: ``task.train_data.input_path`` / ``task.validation_data.input_path`` name a
directory, ``file_pattern`` the files in it. This module is torch-free.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from torchgarden.config import (
    DataConfig,
    ExperimentConfig,
    OptimizationConfig,
    RuntimeConfig,
    TaskConfig,
    TrainerConfig,
)
from torchgarden.config.errors import ConfigError
from torchgarden.experiments.library_model import LibraryModelConfig
from torchgarden.registry import register_experiment

__all__ = [
    "LanguageModelConfig",
    "LanguageModelDataConfig",
    "LanguageModelModelConfig",
    "language_model",
]

_SPLITS = ("", "train", "validation")


@dataclasses.dataclass
class LanguageModelDataConfig(DataConfig):
    """A split of a directory of text files (the standard library when ``input_path``
    is empty), packed into ``seq_length``-byte sequences."""

    file_pattern: str = "*.py"
    """File-name pattern under the directory. Defaults to "*.py"."""
    split: str = ""
    """``train`` or ``validation``; empty = from ``is_training``. Defaults to ""."""
    seq_length: int = 64
    """Bytes (tokens) per sequence. Defaults to 64."""
    validation_percent: float = 5.0
    """Share of files (by path hash) in the validation split, in percent. Defaults to 5.0."""
    max_bytes: int = 0
    """Read only the first this many bytes of the split; 0 reads all. Defaults to 0."""

    def check(self) -> None:
        super().check()
        if self.split not in _SPLITS:
            key = self.field_path("split")
            raise ConfigError(f"{key} must be train, validation or empty, received "
                              f"{self.split!r}", key=key)
        if self.seq_length < 2:
            key = self.field_path("seq_length")
            raise ConfigError(f"{key} must be >= 2, received {self.seq_length}", key=key)
        if not 0 < self.validation_percent < 100:
            key = self.field_path("validation_percent")
            raise ConfigError(f"{key} must be in (0, 100), received "
                              f"{self.validation_percent}", key=key)


def _small_gpt2() -> dict[str, Any]:
    return {"n_layer": 2, "n_embd": 128, "n_head": 4, "resid_pdrop": 0.0, "embd_pdrop": 0.0,
            "attn_pdrop": 0.0}


@dataclasses.dataclass
class LanguageModelModelConfig(LibraryModelConfig):
    """A transformers causal LM; ``vocab_size`` (256 bytes) and the position count come
    from the task."""

    name: str = "transformers/gpt2"
    """``transformers/<model_type>`` of a causal LM (``gpt2``, ``llama``, ``bert``).
    Defaults to "transformers/gpt2"."""
    library_config: dict[str, Any] = dataclasses.field(default_factory=_small_gpt2)
    """The model config's keywords. Defaults to a 2-layer, 128-wide GPT-2 without dropout;
    GPT-2-small is ``{n_layer: 12, n_embd: 768, n_head: 12}``."""
    activation_checkpointing: bool = False
    """Recompute each block's activations in the backward pass (transformers'
    gradient checkpointing): less memory, about a third more compute. Defaults to False."""

    def check(self) -> None:
        super().check()
        if not self.name.startswith("transformers/"):
            key = self.field_path("name")
            raise ConfigError(f"{key} must name a transformers causal LM "
                              f"(transformers/gpt2, transformers/llama), received "
                              f"{self.name!r}", key=key)


@dataclasses.dataclass
class LanguageModelConfig(TaskConfig):
    """Next-byte prediction with a decoder-only Transformer."""

    model: LanguageModelModelConfig = dataclasses.field(default_factory=LanguageModelModelConfig)
    train_data: LanguageModelDataConfig = dataclasses.field(
        default_factory=lambda: LanguageModelDataConfig(is_training=True))
    validation_data: LanguageModelDataConfig = dataclasses.field(
        default_factory=lambda: LanguageModelDataConfig(is_training=False))
    peak_flops: float = 0.0
    """Peak FLOP/s of one device for ``mfu``; 0 = the bf16 data-sheet peak of a known
    CUDA GPU, or the measured fp32 matmul rate of a CPU. Defaults to 0.0."""


def _trainer(train_steps: int) -> TrainerConfig:
    return TrainerConfig(
        train_steps=train_steps, steps_per_loop=50, summary_interval=50,
        checkpoint_interval=train_steps, validation_interval=train_steps,
        validation_steps=20, max_to_keep=2,
        best_checkpoint_export_subdir="best_ckpt", best_checkpoint_eval_metric="bits_per_byte",
        best_checkpoint_metric_comp="lower",
        optimizer_config=OptimizationConfig.from_dict({
            "optimizer": {"type": "adamw", "adamw": {
                "beta_2": 0.99, "epsilon": 1e-8, "weight_decay_rate": 0.1,
                "exclude_from_weight_decay": ["bias", r"ln_", "norm", "wte", "wpe"],
                "gradient_clip_norm": 0.0}},  # no clip (Model Garden's default is 1.0)
            "learning_rate": {"type": "cosine", "cosine": {
                "initial_learning_rate": 3e-3, "decay_steps": train_steps, "alpha": 0.1}},
            "warmup": {"type": "linear", "linear": {"warmup_steps": 30}},
        }),
    )


@register_experiment("language_model")
def language_model() -> ExperimentConfig:
    """A 2-layer GPT-2 on the standard library, 300 steps of 32 x 64 bytes (about two
    minutes on 2 CPU cores)."""
    return ExperimentConfig(
        task=LanguageModelConfig(
            train_data=LanguageModelDataConfig(is_training=True, global_batch_size=32, seed=0),
            validation_data=LanguageModelDataConfig(
                is_training=False, global_batch_size=64, drop_remainder=False),
        ),
        trainer=_trainer(train_steps=300),
        runtime=RuntimeConfig(seed=0),
    )
