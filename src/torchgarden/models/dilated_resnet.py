"""Model Garden's dilated (DeepLab) ResNet and its squeeze-and-excitation blocks, built
from transformers' ResNet.

`dilated_resnet_settings` gives transformers' ``ResNetConfig`` keywords with Model Garden's
depth for ``model_id`` (the last stage repeated ``last_stage_repeats`` times);
`dilate_resnet` then changes the built model in place, as Model Garden builds it:

- the ``v1`` stem: three 3x3 convolutions (64 stride 2, 64, 128) instead of one 7x7, and
  ``replace_stem_max_pool``: a stride-2 3x3 convolution (64) instead of the max pool, both
  made of transformers' own ``ResNetConvLayer``;
- every stage past ``log2(output_stride) - 2`` keeps its input's resolution: its strides
  become 1 and its 3x3 convolutions dilate by 2, 4, ... (one doubling per stage), the blocks
  of the last stage (and its repeats) times ``multigrid``. With the ``v0`` stem the
  parameters are those of the undilated network.

`add_squeeze_excitation` adds Model Garden's ``se_ratio`` blocks to a ResNet of either kind,
`resnetd_shortcuts` its ResNet-D shortcuts (``resnetd_shortcut``: a 2x2 average pool with the
block's stride, "same" padding, then the 1x1 convolution at stride 1), and `resnet_stem`
its stems (``stem_type: v1``: three 3x3 convolutions, 32, 32 and 64 filters scaled with the
stem for ``resnet``, 64, 64 and 128 for the dilated ResNet; ``replace_stem_max_pool``).

Example:
    >>> block = DilatedResNet(model_id=50, output_stride=16, multigrid=[1, 2, 4])
    >>> model = transformers.ResNetModel(ResNetConfig(**dilated_resnet_settings(block, "relu")))
    >>> dilate_resnet(model, block, activation="relu")
    >>> model(torch.zeros(1, 3, 64, 64)).last_hidden_state.shape[-1]  # stride 16
    4
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from torchgarden.models.backbones import RESNET_SPECS, DilatedResNet, ResNet

__all__ = ["SameAvgPool2d", "SqueezeExcitation", "add_squeeze_excitation", "apply_resnet_options",
           "dilate_resnet", "dilated_resnet_settings", "resnet_options", "resnet_stem",
           "resnetd_shortcuts"]


def dilated_resnet_settings(block: DilatedResNet, activation: str, *,
                            channels: int = 3) -> dict[str, Any]:
    """transformers ``ResNetConfig`` keywords of Model Garden's dilated ResNet ``block``."""
    _, depths = RESNET_SPECS[block.model_id]
    depths = [*depths, *[depths[-1]] * (block.last_stage_repeats - 1)]
    widths = [64, 128, 256, *[512] * (len(depths) - 3)]
    stem = 64 if block.replace_stem_max_pool or block.stem_type == "v0" else 128
    return {"layer_type": "bottleneck", "depths": depths, "hidden_act": activation,
            "hidden_sizes": [w * 4 for w in widths], "embedding_size": stem,
            "num_channels": channels}


def dilate_resnet(model: nn.Module, block: DilatedResNet, *, activation: str) -> None:
    """Turns a transformers ``ResNetModel``/``ResNetBackbone`` of `dilated_resnet_settings`
    into Model Garden's dilated ResNet (stem, strides, dilations), in place."""
    resnet_stem(model, widths=(64, 64, 128) if block.stem_type == "v1" else None,
                pool_width=64 if block.replace_stem_max_pool else None, activation=activation)
    stages = list(model.encoder.stages)
    normal = int(math.log2(block.output_stride)) - 2  # stages 0..normal keep their strides
    for i, stage in enumerate(stages[normal + 1:], start=normal + 1):
        grid = block.multigrid if i >= 3 and block.multigrid else [1] * len(stage.layers)
        for layer, factor in zip(stage.layers, grid, strict=True):
            _dilate_layer(layer, 2 ** (i - normal) * factor)
    if block.resnetd_shortcut:
        resnetd_shortcuts(model)


def apply_resnet_options(model: nn.Module, block: ResNet | DilatedResNet, *,
                         activation: str) -> None:
    """Every Model Garden option of ``block`` that changes the architecture, on a
    transformers ResNet built from its settings, in place: the dilated ResNet's or the
    ResNet's stem and shortcuts, then squeeze-and-excitation."""
    if isinstance(block, DilatedResNet):
        dilate_resnet(model, block, activation=activation)
    else:
        resnet_options(model, block, activation=activation)
    add_squeeze_excitation(model, block.se_ratio)


def resnet_options(model: nn.Module, block: ResNet, *, activation: str) -> None:
    """Model Garden's ``resnet`` stem and shortcut options on a transformers ``ResNetModel``
    built with ``embedding_size = int(64 * stem multiplier)``, in place."""
    stem = 64 * (block.depth_multiplier if block.scale_stem else 1.0)
    resnet_stem(model, widths=(int(stem / 2), int(stem / 2), int(stem))
                if block.stem_type == "v1" else None,
                pool_width=int(64 * block.depth_multiplier) if block.replace_stem_max_pool
                else None, activation=activation)
    if block.resnetd_shortcut:
        resnetd_shortcuts(model)


def _dilate_layer(layer: nn.Module, rate: int) -> None:
    """Stride 1 everywhere in ``layer``; its 3x3 convolutions dilate by ``rate``."""
    for module in layer.modules():
        if isinstance(module, nn.Conv2d):
            module.stride = (1, 1)
            if module.kernel_size == (3, 3):
                module.dilation, module.padding = (rate, rate), (rate, rate)


class SqueezeExcitation(nn.Module):
    """Model Garden's ``SqueezeExcitation`` as its ResNet blocks use it: the spatial mean,
    a 1x1 convolution to ``max(1, int(channels * se_ratio))`` channels, ReLU, a 1x1
    convolution back, and the input scaled by the sigmoid of that.

    Args:
        channels: Channels in and out.
        se_ratio: Reduction ratio, in (0, 1].
    """

    def __init__(self, channels: int, se_ratio: float) -> None:
        super().__init__()
        reduced = max(1, int(channels * se_ratio))
        self.reduce = nn.Conv2d(channels, reduced, 1)
        self.expand = nn.Conv2d(reduced, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        squeezed = x.mean((2, 3), keepdim=True)
        return x * torch.sigmoid(self.expand(torch.relu(self.reduce(squeezed))))


def add_squeeze_excitation(model: nn.Module, se_ratio: float) -> None:
    """Appends a `SqueezeExcitation` to every block's residual branch of a transformers
    ResNet, after its last batch norm (before stochastic depth and the shortcut, as in Model
    Garden's blocks); the convolutions start as the library's do, their biases at zero."""
    if not se_ratio:
        return
    init = getattr(model, "_init_weights", None)
    for stage in model.encoder.stages:
        for block in stage.layers:
            excite = SqueezeExcitation(block.layer[-1].convolution.out_channels, se_ratio)
            if init is not None:
                excite.apply(init)
            for conv in (excite.reduce, excite.expand):
                nn.init.zeros_(conv.bias)
            block.layer.append(excite)


class SameAvgPool2d(nn.Module):
    """Keras' ``AveragePooling2D(pool_size, strides, padding="same")``: the input padded as
    TensorFlow pads (the extra row and column at the end), each output the mean of the
    window's pixels inside the image."""

    def __init__(self, pool_size: int, stride: int) -> None:
        super().__init__()
        self.pool_size, self.stride = pool_size, stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pads = []
        for size in (x.shape[-1], x.shape[-2]):  # F.pad's order: last dimension first
            total = max((math.ceil(size / self.stride) - 1) * self.stride + self.pool_size
                        - size, 0)
            pads += [total // 2, total - total // 2]
        ones = torch.ones_like(x[:1, :1])
        sums = F.avg_pool2d(F.pad(x, pads), self.pool_size, self.stride)
        return sums / F.avg_pool2d(F.pad(ones, pads), self.pool_size, self.stride)


def resnetd_shortcuts(model: nn.Module) -> None:
    """ResNet-D shortcuts on every projecting block of a transformers ResNet (after any
    dilation: the pool takes the block's stride, the 1x1 convolution none)."""
    for stage in model.encoder.stages:
        for block in stage.layers:
            shortcut = block.shortcut
            convolution = getattr(shortcut, "convolution", None)
            if convolution is None:  # An identity shortcut.
                continue
            stride = convolution.stride[0]
            convolution.stride = (1, 1)
            block.shortcut = nn.Sequential(SameAvgPool2d(2, stride), shortcut)


def resnet_stem(model: nn.Module, *, widths: tuple[int, int, int] | None,
                pool_width: int | None, activation: str) -> None:
    """A Model Garden stem on a transformers ``ResNetModel`` in place: three 3x3
    convolutions of ``widths`` (the first at stride 2; None: the 7x7 convolution stays), and
    a stride-2 3x3 convolution to ``pool_width`` instead of the max pool (None: it stays)."""
    from transformers.models.resnet.modeling_resnet import ResNetConvLayer

    embeddings = model.embedder
    channels = embeddings.embedder.convolution.in_channels
    if widths is not None:
        embeddings.embedder = nn.Sequential(
            ResNetConvLayer(channels, widths[0], stride=2, activation=activation),
            ResNetConvLayer(widths[0], widths[1], activation=activation),
            ResNetConvLayer(widths[1], widths[2], activation=activation))
    if pool_width is not None:
        width = widths[2] if widths is not None else embeddings.embedder.convolution.out_channels
        embeddings.pooler = ResNetConvLayer(width, pool_width, stride=2, activation=activation)
    init = getattr(model, "_init_weights", None)  # new layers start as the library's do
    if init is not None and (widths is not None or pool_width is not None):
        embeddings.apply(init)
