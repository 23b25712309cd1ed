"""``LibraryModelConfig``: a model (or backbone) named from a model library.

Shared by the built-in experiments: ``name`` is ``transformers/<model_type>``,
``torchvision/<builder>`` or ``timm/<model>`` (see `torchgarden.models`), and
``library_config`` holds that library's own config keywords, so sizes read as the
library documents them::

    task:
      model:
        name: transformers/resnet
        library_config: {layer_type: basic, hidden_sizes: [64, 128, 256, 512], depths: [2, 2, 2, 2]}
        pretrained_path: /weights/resnet18.safetensors   # optional, local only

This module is torch-free.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from torchgarden.config import Config
from torchgarden.config.errors import ConfigError, not_one_of
from torchgarden.models.backbones import Backbone
from torchgarden.models.names import check_no_download, parse_model_name

__all__ = ["AdapterConfig", "LibraryBackbone", "LibraryModelConfig"]

_ADAPTERS = ("", "lora")


@dataclasses.dataclass
class AdapterConfig(Config):
    """Parameter-efficient fine-tuning through PEFT (the ``peft`` extra;
    docs/fine_tuning.md): only the adapter (and ``modules_to_save``) trains."""

    type: str = ""
    """``lora``, or "" for none. Defaults to ""."""
    r: int = 8
    """LoRA rank. Defaults to 8."""
    alpha: float = 16.0
    """LoRA scaling numerator (PEFT's ``lora_alpha``; the update is scaled by alpha / r).
    Defaults to 16."""
    dropout: float = 0.0
    """Dropout on the LoRA branch's input. Defaults to 0."""
    target_modules: list[str] = dataclasses.field(default_factory=list)
    """Names (suffixes) of the modules that get adapters (``query``, ``value``,
    ``c_attn``, or ``1`` of an ``nn.Sequential``); [] uses PEFT's default for the
    transformers model type. Defaults to []."""
    modules_to_save: list[str] = dataclasses.field(default_factory=list)
    """Modules trained in full beside the adapters (a new head: ``classifier``).
    Defaults to []."""

    def check(self) -> None:
        if self.type not in _ADAPTERS:
            raise not_one_of(self.field_path("type"), self.type, _ADAPTERS[1:])
        if self.type and (self.r < 1 or self.alpha <= 0 or not 0 <= self.dropout < 1):
            key = self.field_path("r")
            raise ConfigError(f"{key}, alpha, dropout: r must be >= 1, alpha > 0 and "
                              f"dropout in [0, 1); received r={self.r}, alpha={self.alpha}, "
                              f"dropout={self.dropout}", key=key)


@dataclasses.dataclass
class LibraryModelConfig(Config):
    """Which library model to build, its sizes and its local weights."""

    name: str = ""
    """``library/model`` (``transformers/resnet``, ``transformers/vit``,
    ``transformers/gpt2``, ``timm/resnet18``, ``torchvision/resnet18``); empty = the
    experiment's built-in model. Defaults to ""."""
    library_config: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Keywords of the library's model config (``hidden_sizes``, ``depths``,
    ``hidden_size``, ``n_layer``, ...); the task fills in class counts, channels and
    lengths. Defaults to {} (the library's defaults)."""
    pretrained_path: str = ""
    """Local weights of the library model itself (its own key names): a ``.safetensors``
    file, a ``model.safetensors.index.json``, a state-dict file or a Hugging Face model
    directory, whose ``config.json`` gives the architecture (``library_config`` overrides
    it); loaded when the model is built. ``task.init_checkpoint`` instead loads into the
    whole task model, on a fresh model_dir only (docs/fine_tuning.md). Empty = random
    initialisation. Nothing is downloaded. Defaults to ""."""
    ignore_mismatched_sizes: bool = False
    """Keep freshly initialised weights where the file's shapes differ (a new
    classifier head) instead of failing. Defaults to False."""
    adapter: AdapterConfig = dataclasses.field(default_factory=AdapterConfig)
    """A LoRA adapter over the model (library or built-in); unset: none."""

    def check(self) -> None:
        if not self.name:
            if self.pretrained_path or self.library_config:
                key = self.field_path("name")
                raise ConfigError(f"{key} is empty but pretrained_path/library_config are set; "
                                  "name the library model (e.g. transformers/resnet)", key=key)
            return
        key = self.field_path("name")
        try:
            parse_model_name(self.name, key=key)
            check_no_download(self.library_config, key=self.field_path("library_config"))
        except ValueError as e:
            raise ConfigError(str(e), key=key) from e


#: The library-model keys a `LibraryBackbone` keeps beside Model Garden's one-of.
_LIBRARY_KEYS = ("name", "library_config", "pretrained_path", "ignore_mismatched_sizes")


@dataclasses.dataclass
class LibraryBackbone(Backbone):
    """A RetinaNet or segmentation backbone: Model Garden's one-of, or a library model.

    ``type: resnet`` or ``mobilenet`` (with its block) builds Model Garden's ResNet or
    MobileNetV1/V2 with transformers (RetinaNet's; a task's subclass may build others);
    ``type`` unset builds the library model ``name`` names, or the task's small built-in
    backbone when ``name`` is empty.
    """

    PYRAMID_TYPES: ClassVar[tuple[str, ...]] = ("resnet", "mobilenet")
    """The one-of types built as a multi-level backbone by this task."""

    name: str = ""
    """``library/model`` when ``type`` is unset (``transformers/resnet``, ``timm/resnet18``);
    empty = the built-in backbone. Defaults to ""."""
    library_config: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Keywords of the library's model config. Defaults to {}."""
    pretrained_path: str = ""
    """A local weights file of the library model (or of Model Garden's ResNet); empty =
    random initialisation. Defaults to ""."""
    ignore_mismatched_sizes: bool = False
    """Keep fresh weights where the file's shapes differ. Defaults to False."""

    @classmethod
    def alternatives(cls) -> tuple[str, ...]:
        return tuple(name for name in super().alternatives() if name not in _LIBRARY_KEYS)

    def _export_names(self) -> list[str]:
        return [*super()._export_names(), *_LIBRARY_KEYS]

    def check(self) -> None:
        super().check()
        if self.type is None:
            LibraryModelConfig.check(self)  # type: ignore[arg-type]
        elif self.type not in self.PYRAMID_TYPES:
            key = self.field_path("type")
            raise ConfigError(f"{key}: {self.type!r} has no multi-level (feature pyramid) "
                              f"backbone in transformers here; use "
                              f"{' or '.join(self.PYRAMID_TYPES)}", key=key)
        elif self.name or self.library_config:
            key = self.field_path("name")
            raise ConfigError(f"{key} ({self.name!r}) and type ({self.type!r}) both name the "
                              "backbone; keep one", key=key)
