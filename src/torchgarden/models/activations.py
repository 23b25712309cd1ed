"""Model Garden's ``task.model.norm_activation`` block (`NormActivation`) and its activation
names in torch.

One table for every place that builds an activation from a Model Garden name: the torch
module of the same function (`activation_module`: RetinaNet's FPN and head), and the
``hidden_act`` name of the same function in transformers (`ACTIVATIONS`: the ResNet and
EfficientNet backbones), where transformers has one. Model Garden's ``gelu`` is the tanh
approximation where it calls the function (its RetinaNet head) and the exact GELU where it
builds a Keras layer (its FPN and ResNet), as ``tf_utils.get_activation`` does.

This module is torch-free until `activation_module` is called (`NormActivation` is also
importable from `torchgarden.models.backbones`, beside the backbone it configures).

Example:
    >>> activation_module("relu6")
    ReLU6()
    >>> activation_module("gelu")
    GELU(approximate='tanh')
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from torchgarden.config import Config
from torchgarden.config.errors import ConfigError, not_one_of

if TYPE_CHECKING:
    from torch import nn

__all__ = ["ACTIVATIONS", "NormActivation", "TORCH_ACTIVATIONS", "activation_module",
           "check_activation", "follow_activation"]

#: Model Garden's activation names -> the ``torch.nn`` module of the same function.
TORCH_ACTIVATIONS: dict[str, str] = {
    "relu": "ReLU", "relu6": "ReLU6", "swish": "SiLU", "silu": "SiLU", "simple_swish": "SiLU",
    "hard_swish": "Hardswish", "hard_sigmoid": "Hardsigmoid", "gelu": "GELU",
    "sigmoid": "Sigmoid", "tanh": "Tanh", "linear": "Identity", "identity": "Identity",
    "mish": "Mish",
}

#: Model Garden's activation names -> the transformers ``hidden_act`` of the same function
#: (``hard_swish``, ``hard_sigmoid``: none; a transformers backbone refuses them).
ACTIVATIONS: dict[str, str] = {
    "relu": "relu", "relu6": "relu6", "swish": "swish", "silu": "silu", "simple_swish": "silu",
    "gelu": "gelu", "sigmoid": "sigmoid", "tanh": "tanh", "linear": "linear",
    "identity": "linear", "mish": "mish",
}


@dataclasses.dataclass
class NormActivation(Config):
    """Normalisation and activation of the backbone's layers (Model Garden's common block)."""

    activation: str = "relu"
    """Model Garden's activation name (``relu``, ``relu6``, ``swish``, ``hard_swish``, ``gelu``,
    ...: `TORCH_ACTIVATIONS`) of the ResNet and EfficientNet backbones and of RetinaNet's FPN
    and head; MobileNet keeps its own (relu6) and ViT its GELU, as in Model Garden.
    Defaults to relu."""
    use_sync_bn: bool = True
    """Batch statistics over all replicas (``torch.nn.SyncBatchNorm`` when the run has more
    than one process). Defaults to True (Model Garden's default; its classification model
    sets False)."""
    norm_momentum: float = 0.99
    """Keras' moving-average momentum of batch norm: the running statistics keep this
    fraction (torch's ``momentum`` is ``1 - norm_momentum``). Defaults to 0.99."""
    norm_epsilon: float = 0.001
    """Added to the variance in batch norm. Defaults to 0.001."""

    def check(self) -> None:
        if self.activation not in TORCH_ACTIVATIONS:
            raise not_one_of(self.field_path("activation"), self.activation,
                             tuple(TORCH_ACTIVATIONS))
        if not 0.0 <= self.norm_momentum <= 1.0:
            key = self.field_path("norm_momentum")
            raise ConfigError(f"{key} must be in [0, 1], received {self.norm_momentum}", key=key)
        if self.norm_epsilon <= 0:
            key = self.field_path("norm_epsilon")
            raise ConfigError(f"{key} must be > 0, received {self.norm_epsilon}", key=key)


def check_activation(backbone_type: str | None, activation: str,
                     key: str = "task.model.norm_activation.activation") -> str:
    """Refuses an activation a transformers ResNet or EfficientNet has no ``hidden_act`` for
    (``hard_swish``), in one line; MobileNet and ViT keep their own activation, as in Model
    Garden, so any name is read the same there.

    Args:
        backbone_type: ``task.model.backbone.type``.
        activation: ``norm_activation.activation``.
        key: The dotted key of ``activation``, named in the error. Defaults to Model
            Garden's place.

    Returns:
        The transformers ``hidden_act`` of ``activation`` ("" where there is none and the
        backbone does not read it).
    """
    if backbone_type in ("resnet", "dilated_resnet", "efficientnet") \
            and activation in TORCH_ACTIVATIONS and activation not in ACTIVATIONS:
        raise ConfigError(f"{key}: {activation!r} needs a {backbone_type} backbone with "
                          f"{activation}, which no installed library builds (transformers' "
                          f"{backbone_type} has no {activation} hidden_act)", key=key)
    return ACTIVATIONS.get(activation, "")


def follow_activation(model: nn.Module, hidden_act: str) -> None:
    """Gives a transformers ResNet Model Garden's activation after every batch norm but a
    block's last: transformers applies ``hidden_act`` at the stem and each block's end only,
    its other convs are ReLU; those become ``hidden_act`` too (no weights change)."""
    from torch import nn
    from transformers.activations import ACT2FN

    if hidden_act != "relu":
        for module in model.modules():
            if type(getattr(module, "activation", None)) is nn.ReLU:
                module.activation = ACT2FN[hidden_act]


def activation_module(name: str, *, keras_layer: bool = False) -> nn.Module:
    """The torch module of Model Garden's activation ``name``.

    Args:
        name: A key of `TORCH_ACTIVATIONS`.
        keras_layer: Model Garden builds a Keras layer here (``use_keras_layer=True``):
            ``gelu`` is then the exact GELU, else the tanh approximation. Defaults to False.

    Raises:
        KeyError: ``name`` is not a Model Garden activation (configs refuse it first).
    """
    from torch import nn

    module = getattr(nn, TORCH_ACTIVATIONS[name])
    if module is nn.GELU:
        return nn.GELU(approximate="none" if keras_layer else "tanh")
    return module()
