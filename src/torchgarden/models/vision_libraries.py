"""torchvision and timm models by name (``torchvision/<builder>``, ``timm/<model>``).

Random weights only (``weights=None``, ``pretrained=False``); local weights come from
``pretrained_path``. These two libraries need a torchvision build that matches the
installed torch: the CPU torch wheels and the CUDA torchvision wheels on the package
index do not load together (``operator torchvision::nms does not exist``), so this path
is tested on a GPU machine only (``tests/gpu/test_library_models_gpu.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import nn

from torchgarden.models.names import check_no_download, require_library
from torchgarden.utils.suggest import did_you_mean

__all__ = ["build_timm", "build_torchvision", "torchvision_feature_maps"]


def build_torchvision(model: str, *, num_classes: int | None, settings: Mapping[str, Any],
                      key: str) -> nn.Module:
    """``torchvision.models.get_model(model, weights=None, **settings)``.

    Args:
        model: A torchvision builder name (``resnet18``, ``convnext_tiny``, ...).
        num_classes: Classifier outputs; None keeps the builder's default.
        settings: More builder keywords.
        key: The config key named in errors.
    """
    check_no_download(settings, key=f"{key}.library_config")
    torchvision = require_library("torchvision")
    known = torchvision.models.list_models()
    if model not in known:
        raise ValueError(f"{key}: torchvision has no model {model!r}.{did_you_mean(model, known)}")
    extra = {} if num_classes is None else {"num_classes": num_classes}
    return torchvision.models.get_model(model, weights=None, **extra, **dict(settings))


def torchvision_feature_maps(model: nn.Module) -> nn.Module:
    """A torchvision classifier as a feature extractor returning its stages in order.

    ResNet-style models return ``layer1..layer4``; models with a ``features`` sequence
    (ConvNeXt, EfficientNet, MobileNet, VGG) return every block of it.

    Raises:
        ValueError: The model has neither layout.
    """
    feature_extraction = require_library("torchvision").models.feature_extraction
    if all(hasattr(model, f"layer{i}") for i in range(1, 5)):
        nodes = {f"layer{i}": str(i) for i in range(1, 5)}
    elif isinstance(getattr(model, "features", None), nn.Sequential):
        nodes = {f"features.{i}": str(i) for i in range(len(model.features))}
    else:
        raise ValueError(f"{type(model).__name__} has neither layer1..layer4 nor a `features` "
                         "sequence; use a transformers or timm backbone.")
    return feature_extraction.create_feature_extractor(model, return_nodes=nodes)


def build_timm(model: str, *, num_classes: int | None, in_channels: int,
               features_only: bool, settings: Mapping[str, Any], key: str) -> nn.Module:
    """``timm.create_model(model, pretrained=False, ...)``.

    Args:
        model: A timm model name (``resnet18``, ``vit_tiny_patch16_224``, ...).
        num_classes: Classifier outputs (ignored for ``features_only``).
        in_channels: Input channels (timm adapts the stem).
        features_only: Return the feature maps of every stage.
        settings: More ``create_model`` keywords.
        key: The config key named in errors.
    """
    check_no_download(settings, key=f"{key}.library_config")
    timm = require_library("timm")
    if not timm.is_model(model):
        raise ValueError(f"{key}: timm has no model {model!r}; see timm.list_models().")
    extra: dict[str, Any] = {"in_chans": in_channels}
    if features_only:
        extra["features_only"] = True
    elif num_classes is not None:
        extra["num_classes"] = num_classes
    return timm.create_model(model, pretrained=False, **extra, **dict(settings))
