"""Semantic segmentation on a library backbone: a feature pyramid merged at its finest level.

The semantic-FPN layout (Kirillov et al., 2019, trimmed): the backbone's levels go
through `FeaturePyramid`; every level is upsampled to the finest one and summed; a
3x3 conv, batch norm and ReLU, then a 1x1 classifier give logits that are upsampled
(bilinear) to the input size.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from torchgarden.vision.retinanet_model import FeaturePyramid

__all__ = ["BackboneSegmentationModel"]


class BackboneSegmentationModel(nn.Module):
    """``images [N, C, H, W] -> logits [N, num_classes, H, W]`` over a feature backbone.

    Args:
        backbone: Maps images to ``{str(level): features}`` and has ``channels``
            (`torchgarden.models.build_backbone`).
        num_classes: Output classes, background included (>= 2).
        levels: The backbone levels used. Defaults to None (all of them).
        channels: Width of the pyramid and the head. Defaults to 64.
        dropout: Dropout before the classifier. Defaults to 0.0.

    Raises:
        ValueError: Fewer than 2 classes, or a level the backbone lacks.
    """

    def __init__(self, backbone: nn.Module, num_classes: int, *,
                 levels: list[str] | None = None, channels: int = 64,
                 dropout: float = 0.0) -> None:
        super().__init__()
        if num_classes < 2:
            raise ValueError(f"BackboneSegmentationModel num_classes must be >= 2 (background "
                             f"included), got {num_classes}.")
        found = dict(backbone.channels)
        levels = levels or sorted(found, key=int)
        if any(level not in found for level in levels):
            raise ValueError(f"BackboneSegmentationModel: levels {levels} are not all among the "
                             f"backbone's {sorted(found, key=int)}.")
        self.backbone = backbone
        self.fpn = FeaturePyramid({level: found[level] for level in levels}, channels=channels)
        self.head = nn.Sequential(nn.Conv2d(channels, channels, 3, padding=1, bias=False),
                                  nn.BatchNorm2d(channels), nn.ReLU(inplace=True),
                                  nn.Dropout2d(dropout) if dropout else nn.Identity(),
                                  nn.Conv2d(channels, num_classes, 1))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Returns per-pixel logits at the input's resolution."""
        features = self.backbone(images)
        pyramid = self.fpn({level: features[level] for level in self.fpn.levels})
        finest = pyramid[self.fpn.levels[0]]
        merged = finest
        for level in self.fpn.levels[1:]:
            merged = merged + F.interpolate(pyramid[level], size=finest.shape[-2:],
                                            mode="bilinear", align_corners=False)
        logits = self.head(merged)
        return F.interpolate(logits, size=images.shape[-2:], mode="bilinear",
                             align_corners=False)
