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
from typing import Any

from torchgarden.config import Config
from torchgarden.config.errors import ConfigError
from torchgarden.models.backbones import Backbone
from torchgarden.models.names import check_no_download, parse_model_name

__all__ = ["LibraryBackbone", "LibraryModelConfig"]


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
    """A local ``.safetensors`` or state-dict file with the library model's weights;
    empty = random initialisation. Nothing is downloaded. Defaults to ""."""
    ignore_mismatched_sizes: bool = False
    """Keep freshly initialised weights where the file's shapes differ (a new
    classifier head) instead of failing. Defaults to False."""

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

    ``type: resnet`` (with its ``resnet`` block) builds Model Garden's ResNet with
    transformers; ``type`` unset builds the library model ``name`` names, or the task's
    small built-in backbone when ``name`` is empty.
    """

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
        elif self.type != "resnet":
            key = self.field_path("type")
            raise ConfigError(f"{key}: {self.type!r} has no multi-level (feature pyramid) "
                              "backbone in transformers here; use resnet", key=key)
        elif self.name or self.library_config:
            key = self.field_path("name")
            raise ConfigError(f"{key} ({self.name!r}) and type ({self.type!r}) both name the "
                              "backbone; keep one", key=key)
