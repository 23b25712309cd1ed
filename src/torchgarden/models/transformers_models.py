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

from torchgarden.models.names import check_no_download, quiet_transformers, require_library
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
                             key: str = "task.model.name", pretrained_dir: str = "",
                             ignore_mismatched_sizes: bool = False) -> nn.Module:
    """Builds ``transformers/<model_type>`` for ``head``, random or from a model directory.

    Args:
        model_type: A transformers model type (``resnet``, ``gpt2``, ...).
        head: A key of `HEADS`.
        settings: Keyword arguments of the model's config class (sizes, ``num_labels``,
            ``out_features``, ...).
        key: The config key named in errors.
        pretrained_dir: A local directory written by ``save_pretrained``: its weights are
            loaded by transformers' ``from_pretrained`` (which reads the names it saves
            under), one line reports what was loaded. Defaults to "" (random weights).
        ignore_mismatched_sizes: Keep fresh weights where the directory's shapes differ
            (a new head). Defaults to False.

    Raises:
        ValueError: Unknown model type, the type has no model for ``head``, or the
            directory's weights do not fit.
    """
    config = transformers_config(model_type, settings, key=key)
    auto = getattr(require_library("transformers"), HEADS[head])
    try:
        if not pretrained_dir:
            return auto.from_config(config)
        with quiet_transformers():
            model, info = auto.from_pretrained(
                pretrained_dir, config=config, local_files_only=True, output_loading_info=True,
                ignore_mismatched_sizes=ignore_mismatched_sizes)
    except ValueError as e:
        raise ValueError(f"{key}: transformers/{model_type} has no {head.replace('_', ' ')} "
                         f"model ({str(e).splitlines()[0][:120]}).") from e
    except RuntimeError as e:  # transformers' size-mismatch report
        raise ValueError(f"{key.rsplit('.', 1)[0]}.pretrained_path={pretrained_dir!r} does not "
                         f"fit: {str(e).splitlines()[-1][:200]}; fix the sizes or set "
                         "task.model.ignore_mismatched_sizes=true.") from e
    _check_loading(model, info, pretrained_dir, key.rsplit(".", 1)[0] + ".pretrained_path")
    return model


def _check_loading(model: nn.Module, info: Mapping[str, Any], path: str, key: str) -> None:
    """Refuses a load that left weights missing; prints the one line of what was loaded."""
    from torchgarden.models.weights import report_loaded

    missing = sorted(info.get("missing_keys") or [])
    skipped = sorted(name for name, *_ in (info.get("mismatched_keys") or []))
    missing = [k for k in missing if k not in skipped]
    if missing:
        raise ValueError(f"{key}={path!r} does not fit the model: missing {missing[:3]} "
                         f"({len(missing)} in all); check task.model.name and its "
                         "library_config.")
    total = len(model.state_dict())
    report_loaded(key, path, total - len(skipped), skipped, "shape differs")
