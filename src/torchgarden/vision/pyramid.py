"""Model Garden's feature pyramid (FPN decoder) and Keras' separable convolution.

`FeaturePyramid` is the decoder of `torchgarden.vision.RetinaNet` (and of the backbone
segmentation model); `SeparableConv2d` is what Model Garden's ``use_separable_conv``
builds in the FPN and the RetinaNet head.

Example:
    >>> import torch
    >>> fpn = FeaturePyramid({"3": 8, "4": 16}, channels=4, max_level=5, separable=True)
    >>> {k: tuple(v.shape) for k, v in fpn({"3": torch.zeros(1, 8, 8, 8),
    ...                                     "4": torch.zeros(1, 16, 4, 4)}).items()}
    {'3': (1, 4, 8, 8), '4': (1, 4, 4, 4), '5': (1, 4, 2, 2)}
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from torchgarden.models.activations import activation_module

__all__ = ["FeaturePyramid", "SeparableConv2d", "conv2d", "l2_kernels"]


class SeparableConv2d(nn.Sequential):
    """Keras' ``SeparableConv2D``: a depthwise ``kernel_size`` convolution (no bias), then a
    1x1 pointwise one (``bias``), both Glorot-uniform as Keras initialises them.

    Args:
        in_channels: Input channels.
        out_channels: Output channels.
        kernel_size: Depthwise kernel size (odd; padded to keep the size).
        stride: Depthwise stride. Defaults to 1.
        bias: A bias on the pointwise convolution. Defaults to True.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, *,
                 stride: int = 1, bias: bool = True) -> None:
        super().__init__(
            nn.Conv2d(in_channels, in_channels, kernel_size, stride=stride,
                      padding=kernel_size // 2, groups=in_channels, bias=False),
            nn.Conv2d(in_channels, out_channels, 1, bias=bias))
        for conv in self:
            nn.init.xavier_uniform_(conv.weight)
        if bias:
            nn.init.zeros_(self[1].bias)

    @property
    def bias(self) -> torch.Tensor | None:
        """The pointwise convolution's bias."""
        return self[1].bias


def conv2d(c_in: int, c_out: int, kernel_size: int, *, separable: bool, stride: int = 1,
           bias: bool = True) -> nn.Module:
    """A ``kernel_size`` convolution keeping the size (halving it with ``stride`` 2)."""
    if separable:
        return SeparableConv2d(c_in, c_out, kernel_size, stride=stride, bias=bias)
    return nn.Conv2d(c_in, c_out, kernel_size, stride=stride, padding=kernel_size // 2,
                     bias=bias)


class FeaturePyramid(nn.Module):
    """Top-down feature pyramid (Lin et al., 2017) over levels ``min_level..max_level``.

    Each backbone level gets a 1x1 lateral projection to ``channels``; coarser levels are
    upsampled (nearest) and added; a 3x3 conv smooths each sum. Levels above the
    backbone's coarsest (RetinaNet's P6, P7) are stride-2 3x3 convs on the level below
    (after the ``activation`` from the second one on), and ``batch_norm`` normalises every
    output level: Model Garden's FPN.

    Args:
        in_channels: ``{str(level): channels}`` of the backbone features used.
        channels: Output channels of every level. Defaults to 64.
        max_level: Coarsest output level; defaults to the backbone's coarsest.
        batch_norm: Batch norm on each output level (Model Garden's FPN). Defaults to
            False (torchgarden's small pyramid).
        activation: Model Garden's name of the activation before P7 (its Keras layer:
            ``gelu`` is exact). Defaults to relu.
        separable: Every conv a `SeparableConv2d` (``use_separable_conv``). Defaults to
            False.
    """

    def __init__(self, in_channels: dict[str, int], channels: int = 64, *,
                 max_level: int | None = None, batch_norm: bool = False,
                 activation: str = "relu", separable: bool = False) -> None:
        super().__init__()
        self.levels = sorted(in_channels, key=int)
        self.lateral = nn.ModuleDict({level: conv2d(in_channels[level], channels, 1,
                                                   separable=separable)
                                      for level in self.levels})
        self.smooth = nn.ModuleDict({level: conv2d(channels, channels, 3, separable=separable)
                                     for level in self.levels})
        top = int(self.levels[-1])
        self.coarser = nn.ModuleDict({
            str(level): conv2d(channels, channels, 3, stride=2, separable=separable)
            for level in range(top + 1, (max_level or top) + 1)})
        self.activation = activation_module(activation, keras_layer=True)
        self.output_levels = [*self.levels, *self.coarser]
        self.norms = nn.ModuleDict({level: nn.BatchNorm2d(channels)
                                    for level in self.output_levels} if batch_norm else {})

    def forward(self, features: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Maps backbone features to ``{str(level): [B, channels, H_l, W_l]}``."""
        outputs: dict[str, torch.Tensor] = {}
        top: torch.Tensor | None = None
        for level in reversed(self.levels):
            lateral = self.lateral[level](features[level])
            if top is not None:
                lateral = lateral + F.interpolate(top, size=lateral.shape[-2:], mode="nearest")
            top = lateral
            outputs[level] = self.smooth[level](lateral)
        for i, (level, conv) in enumerate(self.coarser.items()):
            below = outputs[str(int(level) - 1)]
            outputs[level] = conv(self.activation(below) if i else below)
        return {level: self.norms[level](outputs[level]) if self.norms else outputs[level]
                for level in self.output_levels}


def l2_kernels(model: nn.Module) -> list[nn.Parameter]:
    """The conv kernels Model Garden's ``l2_weight_decay`` regularises: all but depthwise
    kernels (its MobileNet leaves them out) and separable convs (its FPN and head give them
    no regularizer)."""
    separable = {id(conv) for module in model.modules() if isinstance(module, SeparableConv2d)
                 for conv in module}
    return [m.weight for m in model.modules() if isinstance(m, nn.Conv2d)
            and id(m) not in separable and not (m.groups > 1 and m.groups == m.in_channels)]
