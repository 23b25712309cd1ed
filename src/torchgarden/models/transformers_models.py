"""Hugging Face ``transformers`` models built from their configs (pure PyTorch, no hub).

``transformers.AutoConfig.for_model(model_type, **settings)`` makes the config and an
``AutoModelFor*`` class the model; the weights are random unless ``pretrained_path``
names a local file. Model types are transformers' own (``resnet``, ``vit``, ``convnext``,
``gpt2``, ``llama``, ``bert``, ...).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import nn

from torchgarden.models.names import check_no_download, require_library
from torchgarden.utils.suggest import did_you_mean

__all__ = ["HEADS", "build_transformers_model", "transformers_config"]

#: What the model is for -> the transformers auto class that builds it.
HEADS: dict[str, str] = {
    "image_classification": "AutoModelForImageClassification",
    "causal_lm": "AutoModelForCausalLM",
    "sequence_classification": "AutoModelForSequenceClassification",
    "masked_lm": "AutoModelForMaskedLM",
    "backbone": "AutoBackbone",
    "base": "AutoModel",
}


def transformers_config(model_type: str, settings: Mapping[str, Any], *, key: str) -> Any:
    """``AutoConfig.for_model(model_type, **settings)`` with torchgarden's errors."""
    transformers = require_library("transformers")
    check_no_download(settings, key=f"{key}.library_config")
    known = list(transformers.CONFIG_MAPPING.keys())
    if model_type not in known:
        raise ValueError(f"{key}: transformers has no model type {model_type!r}."
                         f"{did_you_mean(model_type, known)}")
    return transformers.AutoConfig.for_model(model_type, **dict(settings))


def build_transformers_model(model_type: str, *, head: str, settings: Mapping[str, Any],
                             key: str = "task.model.name") -> nn.Module:
    """Builds ``transformers/<model_type>`` for ``head`` with random weights.

    Args:
        model_type: A transformers model type (``resnet``, ``gpt2``, ...).
        head: A key of `HEADS`.
        settings: Keyword arguments of the model's config class (sizes, ``num_labels``,
            ``out_features``, ...).
        key: The config key named in errors.

    Raises:
        ValueError: Unknown model type, or the type has no model for ``head``.
    """
    config = transformers_config(model_type, settings, key=key)
    auto = getattr(require_library("transformers"), HEADS[head])
    try:
        return auto.from_config(config)
    except ValueError as e:
        raise ValueError(f"{key}: transformers/{model_type} has no {head.replace('_', ' ')} "
                         f"model ({str(e).splitlines()[0][:120]}).") from e
