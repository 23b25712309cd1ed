"""Tensor shape helpers shared by losses and metrics (Keras' rank matching)."""

from __future__ import annotations

import torch

__all__ = ["match_rank"]


def match_rank(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Squeezes a trailing size-1 axis so that ``x`` and ``y`` have the same rank.

    ``[N]`` against ``[N, 1]`` becomes ``[N]`` and ``[N]`` (Keras' rule); other rank
    differences are left for broadcasting.
    """
    if x.ndim == y.ndim + 1 and x.shape[-1] == 1:
        x = x.squeeze(-1)
    elif y.ndim == x.ndim + 1 and y.shape[-1] == 1:
        y = y.squeeze(-1)
    return x, y
