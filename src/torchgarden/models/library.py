"""Library models by name, shaped for torchgarden's tasks.

* :func:`build_image_classifier`: ``images [B, C, H, W] -> logits [B, num_classes]``;
* :func:`build_backbone`: ``images -> {str(level): feature map}`` for the feature
  pyramids of RetinaNet and segmentation;
* :func:`build_causal_lm`: ``token ids [B, T] -> logits [B, T, vocab]``.

Names are ``transformers/<model_type>``, ``torchvision/<builder>`` or ``timm/<model>``
(:mod:`torchgarden.models.names`); ``settings`` are the library's own config keywords
(``hidden_sizes``, ``depths``, ``hidden_size``, ``n_layer``, ...). Weights are random
unless ``pretrained_path`` names local weights (a ``.safetensors`` file, a sharded
``model.safetensors.index.json``, a state-dict file or a Hugging Face model directory;
:mod:`torchgarden.models.weights`), loaded into the library model itself (so what
``save_pretrained`` or ``torch.save(model.state_dict())`` writes loads as it is). A
model directory's ``config.json`` gives the architecture; ``settings`` override it.

Example:
    >>> model = build_image_classifier(
    ...     "transformers/resnet", num_classes=10, input_size=(1, 8, 8),
    ...     settings={"embedding_size": 16, "hidden_sizes": [16, 32], "depths": [1, 1]})
    >>> model(torch.zeros(2, 1, 8, 8)).shape
    torch.Size([2, 10])
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from torchgarden.models.adapters import CausalLM, FeatureLevels, Logits
from torchgarden.models.names import parse_model_name
from torchgarden.models.transformers_models import (
    build_transformers_model,
    transformers_config,
)
from torchgarden.models.vision_libraries import (
    build_timm,
    build_torchvision,
    torchvision_feature_maps,
)
from torchgarden.models.weights import hf_model_config, load_pretrained

__all__ = ["build_backbone", "build_causal_lm", "build_image_classifier"]


def _maybe_load(model: nn.Module, pretrained_path: str, ignore_mismatched_sizes: bool,
                key: str) -> nn.Module:
    """Loads a weights file (a model directory of transformers was loaded at build)."""
    from_directory = os.path.isdir(pretrained_path) and \
        type(model).__module__.startswith("transformers.")
    if pretrained_path and not from_directory:
        load_pretrained(model, pretrained_path, ignore_mismatched_sizes=ignore_mismatched_sizes,
                        key=f"{key}.pretrained_path")
    return model


def _directory_settings(pretrained_path: str, model_type: str, key: str) -> dict[str, Any]:
    """The architecture in ``config.json`` of a model directory ``pretrained_path`` ({}
    for a file), checked against the configured model type."""
    found = hf_model_config(pretrained_path, key=f"{key}.pretrained_path") \
        if pretrained_path else {}
    found_type = found.pop("model_type", model_type)
    if found_type != model_type:
        raise ValueError(f"{key}.pretrained_path={pretrained_path!r} holds a {found_type!r} "
                         f"model but {key}.name is transformers/{model_type}; set it to "
                         f"transformers/{found_type}.")
    return found


def _transformers(model_type: str, head: str, settings: dict[str, Any], pretrained_path: str,
                  ignore_mismatched_sizes: bool, key: str) -> nn.Module:
    """A transformers model; from ``pretrained_path`` when it is a model directory."""
    directory = pretrained_path if os.path.isdir(pretrained_path) else ""
    return build_transformers_model(model_type, head=head, settings=settings,
                                    key=f"{key}.name", pretrained_dir=directory,
                                    ignore_mismatched_sizes=ignore_mismatched_sizes)


def _has_default(model_type: str, attribute: str, key: str) -> bool:
    """Whether transformers' default config of ``model_type`` has ``attribute``."""
    return hasattr(transformers_config(model_type, {}, key=key), attribute)


def build_image_classifier(name: str, *, num_classes: int, input_size: Sequence[int],
                           settings: Mapping[str, Any] | None = None, pretrained_path: str = "",
                           ignore_mismatched_sizes: bool = False, key: str = "task.model"
                           ) -> nn.Module:
    """An image classifier from a model library.

    Args:
        name: ``library/model``.
        num_classes: Logits per image (the library's ``num_labels`` / ``num_classes``).
        input_size: ``(channels, height, width)`` of the inputs; transformers configs get
            ``num_channels`` (and ``image_size`` where they have one), timm ``in_chans``;
            torchvision models take 3 channels and a 1-channel input is repeated.
        settings: The library's config keywords. Defaults to None.
        pretrained_path: Local weights. Defaults to "" (random).
        ignore_mismatched_sizes: Keep fresh weights where the file's shapes differ (a
            new head). Defaults to False.
        key: The config section named in errors. Defaults to "task.model".

    Raises:
        ValueError: Bad name or settings, or the model cannot run on ``input_size``.
    """
    parsed = parse_model_name(name, key=f"{key}.name")
    settings = dict(settings or {})
    channels, height, _ = (int(v) for v in input_size)
    if parsed.library == "transformers":
        defaults: dict[str, Any] = {
            **_directory_settings(pretrained_path, parsed.model, key),
            "num_labels": num_classes, "num_channels": channels}
        if _has_default(parsed.model, "image_size", f"{key}.name"):
            defaults["image_size"] = height
        model = _transformers(parsed.model, "image_classification", {**defaults, **settings},
                              pretrained_path, ignore_mismatched_sizes, key)
        in_channels = None
    elif parsed.library == "timm":
        model = build_timm(parsed.model, num_classes=num_classes, in_channels=channels,
                           features_only=False, settings=settings, key=key)
        in_channels = None
    else:
        model = build_torchvision(parsed.model, num_classes=num_classes, settings=settings,
                                  key=key)
        in_channels = 3
    model = Logits(_maybe_load(model, pretrained_path, ignore_mismatched_sizes, key),
                   in_channels=in_channels)
    _check_runs(model, (1, channels, *(int(v) for v in input_size[1:])), (1, num_classes),
                name, key)
    return model


def _check_runs(model: nn.Module, input_shape: tuple[int, ...], output_shape: tuple[int, ...],
                name: str, key: str) -> None:
    """One forward pass on zeros, so a size mismatch fails now, naming the config."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            shape = tuple(model(torch.zeros(input_shape)).shape)
    except (RuntimeError, ValueError, IndexError) as e:
        raise ValueError(f"{key}: {name} cannot run on inputs {list(input_shape[1:])}: "
                         f"{str(e).splitlines()[0][:160]}; adjust {key}.library_config or "
                         f"{key}.input_size.") from e
    finally:
        model.train(was_training)
    if shape != output_shape:
        raise ValueError(f"{key}: {name} returns shape {list(shape)} for inputs "
                         f"{list(input_shape)}, expected {list(output_shape)}.")


def build_backbone(name: str, *, in_channels: int = 3,
                   settings: Mapping[str, Any] | None = None, pretrained_path: str = "",
                   ignore_mismatched_sizes: bool = False, key: str = "task.model.backbone",
                   prepare: Callable[[nn.Module], None] | None = None) -> FeatureLevels:
    """A feature backbone from a model library: ``images -> {str(level): map}``.

    Every stage is returned, keyed by its level (``log2`` of its stride: a ResNet's
    ``stage2..stage4`` are levels 3, 4, 5); ``.channels`` maps levels to channels.

    Args:
        name: ``library/model`` (``transformers/resnet``, ``timm/resnet18``, ...).
        in_channels: Input channels. Defaults to 3.
        settings: The library's config keywords. Defaults to None.
        pretrained_path: Local weights of the backbone. Defaults to "" (random).
        ignore_mismatched_sizes: As in `build_image_classifier`. Defaults to False.
        key: The config section named in errors.
        prepare: Changes the library model in place before weights are loaded and levels
            measured (Model Garden's dilated ResNet). Defaults to None.
    """
    parsed = parse_model_name(name, key=f"{key}.name")
    settings = dict(settings or {})
    if parsed.library == "transformers":
        settings = {**_directory_settings(pretrained_path, parsed.model, key),
                    "num_channels": in_channels, **settings}
        if "out_features" not in settings and "out_indices" not in settings:
            stages = transformers_config(parsed.model, settings, key=f"{key}.name").stage_names
            settings["out_features"] = list(stages[1:])
        model = _transformers(parsed.model, "backbone", settings, pretrained_path,
                              ignore_mismatched_sizes, key)
        maps = _hf_feature_maps
    elif parsed.library == "timm":
        model = build_timm(parsed.model, num_classes=None, in_channels=in_channels,
                           features_only=True, settings=settings, key=key)
        maps = list
    else:
        model = torchvision_feature_maps(build_torchvision(parsed.model, num_classes=None,
                                                           settings=settings, key=key))
        maps = _dict_values
    if prepare is not None:
        prepare(model)
    model = _maybe_load(model, pretrained_path, ignore_mismatched_sizes, key)
    return FeatureLevels(model, maps, in_channels=in_channels)


def _hf_feature_maps(output: Any) -> list[torch.Tensor]:
    return list(output.feature_maps)


def _dict_values(output: Mapping[str, torch.Tensor]) -> list[torch.Tensor]:
    return list(output.values())


def build_causal_lm(name: str, *, vocab_size: int, max_length: int,
                    settings: Mapping[str, Any] | None = None, pretrained_path: str = "",
                    ignore_mismatched_sizes: bool = False, key: str = "task.model") -> CausalLM:
    """A decoder-only language model from ``transformers`` (``gpt2``, ``llama``, ``bert``
    as a decoder, ...) as a `CausalLM`: ``model(ids) -> logits``, ``model.generate``,
    the library model as ``model.model``.

    Args:
        name: ``transformers/<model_type>``.
        vocab_size: Tokens in the vocabulary.
        max_length: Longest sequence (``n_positions`` / ``max_position_embeddings``).
        settings: The config's keywords (``n_layer``, ``hidden_size``, ...).
        pretrained_path: Local weights. Defaults to "" (random).
        ignore_mismatched_sizes: As in `build_image_classifier`. Defaults to False.
        key: The config section named in errors.
    """
    parsed = parse_model_name(name, key=f"{key}.name")
    if parsed.library != "transformers":
        raise ValueError(f"{key}.name={name!r}: language models come from transformers "
                         "(transformers/gpt2, transformers/llama, transformers/bert).")
    # Special-token ids of the library's tokenizer do not exist in a local vocabulary.
    defaults: dict[str, Any] = {**_directory_settings(pretrained_path, parsed.model, key),
                                "vocab_size": vocab_size, "is_decoder": True,
                                "bos_token_id": None, "eos_token_id": None, "pad_token_id": None}
    for length_key in ("n_positions", "max_position_embeddings"):
        if _has_default(parsed.model, length_key, f"{key}.name"):
            defaults[length_key] = max_length
    model = _transformers(parsed.model, "causal_lm", {**defaults, **dict(settings or {})},
                          pretrained_path, ignore_mismatched_sizes, key)
    return CausalLM(_maybe_load(model, pretrained_path, ignore_mismatched_sizes, key))
