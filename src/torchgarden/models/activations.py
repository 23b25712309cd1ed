"""Model Garden's activation names (``task.model.norm_activation.activation``) in torch.

One table for every place that builds an activation from a Model Garden name: the torch
module of the same function (`activation_module`: RetinaNet's FPN and head), and the
``hidden_act`` name of the same function in transformers (`ACTIVATIONS`: the ResNet and
EfficientNet backbones), where transformers has one. Model Garden's ``gelu`` is the tanh
approximation where it calls the function (its RetinaNet head) and the exact GELU where it
builds a Keras layer (its FPN and ResNet), as ``tf_utils.get_activation`` does.

This module is torch-free until `activation_module` is called.

Example:
    >>> activation_module("relu6")
    ReLU6()
    >>> activation_module("gelu")
    GELU(approximate='tanh')
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import nn

__all__ = ["ACTIVATIONS", "TORCH_ACTIVATIONS", "activation_module"]

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
