"""Model Garden's segmentation model: backbone levels, a decoder, a segmentation head.

`ASPP` is DeepLabV3's atrous spatial pyramid pooling (a 1x1 branch, one dilated 3x3 branch
per rate, an image-pooling branch; concatenated and projected); `SegmentationHead` fuses
(DeepLabV3+: the reduced low-level backbone feature; pyramid fusion: every decoder level),
convolves and classifies; `DeepLabModel` chains them on a ``{str(level): map}`` backbone
(`torchgarden.models.garden.build_pyramid_backbone`). Logits come out at the head's level
(e.g. stride 4 for DeepLabV3+); the task resizes them to the masks.

Example:
    >>> head = SegmentationHead(num_classes=3, in_channels=8, level="4", num_convs=1,
    ...                         num_filters=8)
    >>> head({}, {"4": torch.zeros(1, 8, 4, 4)}).shape
    torch.Size([1, 3, 4, 4])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from torchgarden.models.activations import activation_module
from torchgarden.models.garden import KERNEL_INITIALIZERS
from torchgarden.vision.pyramid import FeaturePyramid

__all__ = ["ASPP", "DeepLabModel", "SegmentationHead", "build_deeplab"]

def _conv_bn(in_channels: int, out_channels: int, kernel_size: int, activation: str, *,
             dilation: int = 1, groups: int = 1, separable: bool = False) -> nn.Sequential:
    """Convolution (no bias, 'same' padding), batch norm, activation; ``separable``: first a
    depthwise ``kernel_size`` convolution with no norm, then a 1x1 one (ASPP's form)."""
    padding = dilation * (kernel_size // 2)
    layers: list[nn.Module] = []
    if separable:
        layers.append(nn.Conv2d(in_channels, in_channels, kernel_size, padding=padding,
                                dilation=dilation, groups=in_channels, bias=False))
        kernel_size, padding = 1, 0
    layers.append(nn.Conv2d(in_channels, out_channels, kernel_size, padding=padding,
                            dilation=dilation, groups=groups, bias=False))
    return nn.Sequential(*layers, nn.BatchNorm2d(out_channels), activation_module(activation))


class ASPP(nn.Module):
    """Atrous spatial pyramid pooling on one backbone level (Model Garden's ``v1`` layer).

    Args:
        in_channels: Channels of the level.
        level: The backbone level it reads (``str``).
        dilation_rates: One dilated 3x3 branch per rate.
        num_filters: Width of each branch and of the output.
        activation: Activation name.
        pool_kernel_size: ``[h, w]`` of the pooling branch's average pool in input pixels
            (divided by ``2**level``; at most the map's size); None = global average pooling.
        dropout_rate: Dropout after the projection.
        depthwise: Depthwise-separable dilated branches (a depthwise convolution, then a
            1x1 one, as Model Garden's v1 layer).
    """

    def __init__(self, in_channels: int, *, level: str, dilation_rates: Sequence[int],
                 num_filters: int, activation: str, pool_kernel_size: Sequence[int] | None,
                 dropout_rate: float = 0.0, depthwise: bool = False) -> None:
        super().__init__()
        self.level = level
        self.branches = nn.ModuleList(
            [_conv_bn(in_channels, num_filters, 1, activation)]
            + [_conv_bn(in_channels, num_filters, 3, activation, dilation=rate,
                        separable=depthwise) for rate in dilation_rates])
        self.pool_kernel = [int(p) // 2 ** int(level) for p in pool_kernel_size] \
            if pool_kernel_size else None
        self.pool = _conv_bn(in_channels, num_filters, 1, activation)
        self.projection = nn.Sequential(
            _conv_bn(num_filters * (len(self.branches) + 1), num_filters, 1, activation),
            nn.Dropout(dropout_rate))
        for module in self.modules():  # Keras' VarianceScaling, Model Garden's initializer
            if isinstance(module, nn.Conv2d):
                KERNEL_INITIALIZERS["VarianceScaling"](module.weight)

    def forward(self, features: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """``{level: map}`` -> ``{level: [B, num_filters, h, w]}``."""
        x = features[self.level]
        if self.pool_kernel is None:
            pooled = x.mean(dim=(2, 3), keepdim=True)
        else:  # a map smaller than the kernel (where Model Garden fails) is pooled whole
            pooled = F.avg_pool2d(x, [min(k, n) for k, n in zip(self.pool_kernel, x.shape[-2:],
                                                               strict=True)])
        pooled = F.interpolate(self.pool(pooled), size=x.shape[-2:], mode="bilinear",
                               align_corners=False)
        outputs = [branch(x) for branch in self.branches] + [pooled]
        return {self.level: self.projection(torch.cat(outputs, dim=1))}


class SegmentationHead(nn.Module):
    """Model Garden's segmentation head: optional fusion, ``num_convs`` conv + batch norm +
    activation layers, nearest upsampling by ``upsample_factor``, a classifier.

    Args:
        num_classes: Logit channels.
        in_channels: Channels of the decoder level ``level``.
        level: The decoder level read.
        num_convs, num_filters: The convolution layers. Defaults to 2 and 256.
        activation: Activation name. Defaults to relu.
        depthwise: Each layer a depthwise 3x3 and a 1x1 convolution, each with batch norm
            and activation. Defaults to False.
        prediction_kernel_size: Classifier kernel. Defaults to 1.
        upsample_factor: Nearest upsampling before the classifier. Defaults to 1.
        feature_fusion: None, ``deeplabv3plus``, ``deeplabv3plus_sum_to_merge`` or
            ``pyramid_fusion``. Defaults to None.
        low_level, low_level_channels, low_level_num_filters: The backbone level fused by
            DeepLabV3+, its channels and the width it is reduced to.
    """

    def __init__(self, num_classes: int, in_channels: int, *, level: str, num_convs: int = 2,
                 num_filters: int = 256, activation: str = "relu", depthwise: bool = False,
                 prediction_kernel_size: int = 1, upsample_factor: int = 1,
                 feature_fusion: str | None = None, low_level: str = "2",
                 low_level_channels: int = 0, low_level_num_filters: int = 48) -> None:
        super().__init__()
        self.level, self.low_level, self.fusion = level, low_level, feature_fusion
        self.upsample_factor = upsample_factor
        self.reduce = None
        if feature_fusion in ("deeplabv3plus", "deeplabv3plus_sum_to_merge"):
            self.reduce = _conv_bn(low_level_channels, low_level_num_filters, 1, activation)
            if feature_fusion == "deeplabv3plus":
                in_channels += low_level_num_filters
        convs: list[nn.Module] = []
        for _ in range(num_convs):  # depthwise: depthwise 3x3 + norm + act, then 1x1 + ...
            if depthwise:
                convs.append(_conv_bn(in_channels, in_channels, 3, activation,
                                      groups=in_channels))
            convs.append(_conv_bn(in_channels, num_filters, 1 if depthwise else 3, activation))
            in_channels = num_filters
        self.convs = nn.Sequential(*convs)
        self.classifier = nn.Conv2d(in_channels, num_classes, prediction_kernel_size,
                                    padding=prediction_kernel_size // 2)
        for module in self.modules():  # Model Garden: normal(0.01) kernels, zero bias
            if isinstance(module, nn.Conv2d):
                nn.init.normal_(module.weight, std=0.01)
        nn.init.zeros_(self.classifier.bias)

    def forward(self, backbone: dict[str, torch.Tensor],
                decoder: dict[str, torch.Tensor]) -> torch.Tensor:
        """Returns ``[B, num_classes, h, w]`` logits at the head's level (times
        ``upsample_factor``)."""
        x = decoder[self.level]
        if self.reduce is not None:
            low = self.reduce(backbone[self.low_level])
            x = F.interpolate(x, size=low.shape[-2:], mode="bilinear", align_corners=False)
            x = torch.cat([x, low], dim=1) if self.fusion == "deeplabv3plus" else x + low
        elif self.fusion == "pyramid_fusion":
            x = sum(F.interpolate(m, size=x.shape[-2:], mode="bilinear", align_corners=False)
                    for m in decoder.values())
        x = self.convs(x)
        if self.upsample_factor > 1:
            x = F.interpolate(x, scale_factor=self.upsample_factor, mode="nearest")
        return self.classifier(x)


class DeepLabModel(nn.Module):
    """``images [B, C, H, W] -> logits [B, num_classes, h, w]``: backbone levels, a decoder
    (`ASPP`, a feature pyramid, or None for the backbone levels as they are), a head.

    Args:
        backbone: ``images -> {str(level): map}`` with ``channels``.
        decoder: ``{level: map} -> {level: map}``, or None.
        head: The `SegmentationHead`.
    """

    def __init__(self, backbone: nn.Module, decoder: nn.Module | None,
                 head: SegmentationHead) -> None:
        super().__init__()
        self.backbone, self.decoder, self.head = backbone, decoder, head

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Returns the head's logits."""
        features = self.backbone(images)
        decoded = features if self.decoder is None else self.decoder(features)
        return self.head(features, decoded)


def build_deeplab(model: Any, backbone: nn.Module) -> DeepLabModel:
    """The `DeepLabModel` of a checked ``SegmentationModelConfig`` on its built ``backbone``."""
    channels = dict(backbone.channels)
    decoder_cfg, head_cfg = model.decoder, model.head
    activation = model.norm_activation.activation
    decoder: nn.Module | None = None
    width = dict(channels)
    if decoder_cfg.type == "aspp":
        aspp = decoder_cfg.aspp
        level = str(aspp.level)
        decoder = ASPP(channels[level], level=level, dilation_rates=aspp.dilation_rates,
                       num_filters=aspp.num_filters, activation=activation,
                       pool_kernel_size=aspp.pool_kernel_size, dropout_rate=aspp.dropout_rate,
                       depthwise=aspp.use_depthwise_convolution)
        width = {level: aspp.num_filters}
    elif decoder_cfg.type == "fpn":
        fpn = decoder_cfg.fpn
        levels = {lv: c for lv, c in channels.items() if int(lv) >= model.min_level}
        decoder = FeaturePyramid(levels, fpn.num_filters, max_level=model.max_level,
                                 batch_norm=fpn.batch_norm, activation=activation,
                                 separable=fpn.use_separable_conv)
        width = {str(lv): fpn.num_filters for lv in range(model.min_level, model.max_level + 1)}
    head = SegmentationHead(
        model.num_classes, width[str(head_cfg.level)], level=str(head_cfg.level),
        num_convs=head_cfg.num_convs, num_filters=head_cfg.num_filters, activation=activation,
        depthwise=head_cfg.use_depthwise_convolution,
        prediction_kernel_size=head_cfg.prediction_kernel_size,
        upsample_factor=head_cfg.upsample_factor, feature_fusion=head_cfg.feature_fusion,
        low_level=str(head_cfg.low_level), low_level_channels=channels.get(
            str(head_cfg.low_level), 0), low_level_num_filters=head_cfg.low_level_num_filters)
    return DeepLabModel(backbone, decoder, head)
