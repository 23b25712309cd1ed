"""Models from the field's model libraries, by name: ``transformers``, ``torchvision``, ``timm``.

``transformers/<model_type>`` builds a Hugging Face model class from its config (pure
PyTorch, random weights or a local ``pretrained_path``); ``torchvision/<builder>`` and
``timm/<model>`` build those libraries' models where torchvision imports. Every library
is an optional extra, imported on first use; names load lazily, so importing this package
costs nothing.

Example:
    >>> from torchgarden.models import build_image_classifier
    >>> model = build_image_classifier("transformers/vit", num_classes=10, input_size=(1, 8, 8),
    ...     settings={"patch_size": 2, "hidden_size": 32, "num_hidden_layers": 1,
    ...               "num_attention_heads": 2, "intermediate_size": 64})
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS: dict[str, str] = {
    "build_backbone": "torchgarden.models.library",
    "build_causal_lm": "torchgarden.models.library",
    "build_image_classifier": "torchgarden.models.library",
    "CausalLM": "torchgarden.models.adapters",
    "FeatureLevels": "torchgarden.models.adapters",
    "Logits": "torchgarden.models.adapters",
    "ModelName": "torchgarden.models.names",
    "parse_model_name": "torchgarden.models.names",
    "load_pretrained": "torchgarden.models.weights",
    "read_state_dict": "torchgarden.models.weights",
}

__all__ = [
    "CausalLM",
    "FeatureLevels",
    "Logits",
    "ModelName",
    "build_backbone",
    "build_causal_lm",
    "build_image_classifier",
    "load_pretrained",
    "parse_model_name",
    "read_state_dict",
]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'torchgarden.models' has no attribute '{name}'")


def __dir__() -> list[str]:
    return __all__


if TYPE_CHECKING:
    from torchgarden.models.adapters import CausalLM, FeatureLevels, Logits
    from torchgarden.models.library import build_backbone, build_causal_lm, build_image_classifier
    from torchgarden.models.names import ModelName, parse_model_name
    from torchgarden.models.weights import load_pretrained, read_state_dict
