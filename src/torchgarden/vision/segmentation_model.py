"""A small U-Net-style encoder-decoder for semantic segmentation."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["SegmentationModel", "conv_block"]


def conv_block(in_channels: int, out_channels: int, stride: int = 1) -> nn.Sequential:
    """Two 3x3 conv + BatchNorm + ReLU layers; the first has `stride` (default 1)."""
    return nn.Sequential(
        nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=False),
        nn.BatchNorm2d(out_channels),
        nn.ReLU(inplace=True),
        nn.Conv2d(out_channels, out_channels, 3, padding=1, bias=False),
        nn.BatchNorm2d(out_channels),
        nn.ReLU(inplace=True),
    )


class SegmentationModel(nn.Module):
    """Encoder (conv blocks, 2x max-pool between them) and decoder (upsample + skip).

    Level `i` of the encoder runs at `1 / 2**i` of the input resolution with
    `widths[i]` channels. The decoder upsamples each level bilinearly to the size
    of the one above, concatenates that level's encoder output and applies a
    conv block; a 1x1 conv gives per-pixel logits. Any input size works (odd
    sizes are upsampled to the skip's exact size). With `stem_stride` 2 the first
    level already runs at half resolution and the logits are upsampled
    (bilinear) to the input size: about 4x less compute for slightly softer edges.

    Args:
        num_classes: Output classes, background included (>= 2).
        in_channels: Input channels. Defaults to 3.
        widths: Channels per level, shallow to deep (>= 1 level). Defaults to
            (16, 32, 64).
        stem_stride: Stride of the first convolution, 1 or 2. Defaults to 1.
        dropout: Dropout probability before the classifier. Defaults to 0.0.

    Example:
        >>> model = SegmentationModel(num_classes=4)
        >>> model(torch.rand(2, 3, 64, 64)).shape
        torch.Size([2, 4, 64, 64])
    """

    def __init__(
        self,
        num_classes: int,
        *,
        in_channels: int = 3,
        widths: Sequence[int] = (16, 32, 64),
        stem_stride: int = 1,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        if num_classes < 2:
            raise ValueError(
                f"SegmentationModel num_classes must be >= 2 (background included), got "
                f"{num_classes}."
            )
        if not widths or min(widths) < 1:
            raise ValueError(f"SegmentationModel widths must be positive ints, got {list(widths)}.")
        if stem_stride not in (1, 2):
            raise ValueError(f"SegmentationModel stem_stride must be 1 or 2, got {stem_stride}.")
        widths = list(widths)
        self.stem_stride = stem_stride
        self.encoder = nn.ModuleList()
        channels = in_channels
        for level, width in enumerate(widths):
            self.encoder.append(conv_block(channels, width, stride=1 if level else stem_stride))
            channels = width
        self.decoder = nn.ModuleList(
            conv_block(widths[i] + widths[i + 1], widths[i]) for i in range(len(widths) - 1)
        )
        self.dropout = nn.Dropout2d(dropout) if dropout else nn.Identity()
        self.classifier = nn.Conv2d(widths[0], num_classes, 1)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Maps images `[N, C_in, H, W]` to logits `[N, num_classes, H, W]`."""
        skips: list[torch.Tensor] = []
        x = images
        for level, block in enumerate(self.encoder):
            if level:
                x = F.max_pool2d(x, 2, ceil_mode=True)
            x = block(x)
            skips.append(x)
        for level in range(len(self.decoder) - 1, -1, -1):
            skip = skips[level]
            x = F.interpolate(x, size=skip.shape[-2:], mode="bilinear", align_corners=False)
            x = self.decoder[level](torch.cat([skip, x], dim=1))
        logits = self.classifier(self.dropout(x))
        if logits.shape[-2:] != images.shape[-2:]:
            logits = F.interpolate(
                logits, size=images.shape[-2:], mode="bilinear", align_corners=False
            )
        return logits
