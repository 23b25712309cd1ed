"""Thin modules that give library models torchgarden's calling conventions.

A Task calls ``model(features)`` and expects a tensor (logits) or, for detection and
segmentation backbones, ``{str(level): feature map}``; library models return their own
output objects. Each adapter keeps the library model as ``self.model`` (so its state-dict
keys are the library's, prefixed with ``model.``) and changes nothing else.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

__all__ = ["CausalLM", "FeatureLevels", "Logits"]


def _logits_of(output: Any) -> torch.Tensor:
    if isinstance(output, torch.Tensor):
        return output
    logits = getattr(output, "logits", None)
    if logits is None and isinstance(output, (tuple, list)):
        logits = output[0]
    if not isinstance(logits, torch.Tensor):
        raise TypeError(f"the library model returned {type(output).__name__} without logits.")
    return logits


class Logits(nn.Module):
    """``model(x) -> logits`` for a classifier or language model.

    Args:
        model: The library model (returns a tensor or an output with ``.logits``).
        in_channels: Channels the model expects; a 1-channel input is repeated to it
            (grayscale digits into an RGB network). Defaults to None (no change).
    """

    def __init__(self, model: nn.Module, *, in_channels: int | None = None) -> None:
        super().__init__()
        self.model = model
        self.in_channels = in_channels

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        """Returns the logits of ``inputs``."""
        if self.in_channels and inputs.ndim == 4 and inputs.shape[1] == 1 != self.in_channels:
            inputs = inputs.expand(-1, self.in_channels, -1, -1)
        return _logits_of(self.model(inputs))


class FeatureLevels(nn.Module):
    """A backbone as ``images -> {str(level): [B, C_level, H / 2**level, W / 2**level]}``.

    The level of each feature map is measured once at construction with a dry forward
    pass (``level = log2(input size / map size)``; of several maps at one level the last
    is kept), so any library's backbone fits the
    feature pyramid of `torchgarden.vision.RetinaNet` and the segmentation model.

    Args:
        model: The library backbone.
        feature_maps: Turns the backbone's output into a sequence of feature maps.
        in_channels: Input channels of the dry run. Defaults to 3.
        probe_size: Height and width of the dry run; a multiple of the largest stride.
            Defaults to 64.

    Attributes:
        channels: ``{str(level): channels}`` of every level the backbone produces.
    """

    def __init__(self, model: nn.Module, feature_maps: Callable[[Any], Sequence[torch.Tensor]],
                 *, in_channels: int = 3, probe_size: int = 64) -> None:
        super().__init__()
        self.model = model
        self._feature_maps = feature_maps
        was_training = model.training
        model.eval()
        with torch.no_grad():
            maps = feature_maps(model(torch.zeros(1, in_channels, probe_size, probe_size)))
        model.train(was_training)
        levels = [str(round(math.log2(probe_size / m.shape[-1]))) for m in maps]
        # Several blocks may share a stride: the last one of each level is kept.
        self._keep = {level: index for index, level in enumerate(levels)}
        self.channels = {lv: int(maps[i].shape[1]) for lv, i in self._keep.items()}

    def forward(self, images: torch.Tensor) -> dict[str, torch.Tensor]:
        """Returns ``{str(level): feature map}``."""
        maps = self._feature_maps(self.model(images))
        return {level: maps[index] for level, index in self._keep.items()}


class CausalLM(nn.Module):
    """``model(token ids [B, T]) -> logits [B, T, vocab]`` for a transformers causal LM.

    Only the logits leave the forward pass (no cache objects or output classes), so the
    compiled whole step, DDP and autocast see a plain tensor; ``generate`` is the library
    model's own.

    Args:
        model: The transformers ``*ForCausalLM`` model.
    """

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Returns next-token logits for every position."""
        return _logits_of(self.model(input_ids=input_ids))

    def generate(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        """transformers' ``generate`` of the wrapped model."""
        return self.model.generate(*args, **kwargs)
