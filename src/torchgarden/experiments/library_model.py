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
from torchgarden.models.names import check_no_download, parse_model_name

__all__ = ["LibraryModelConfig"]


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
