"""Shape helpers shared by the built-in metrics (Keras' weight broadcasting, safe division)."""

from __future__ import annotations

import torch


def broadcast_weight(values: torch.Tensor, sample_weight: torch.Tensor | float,
                     owner: str) -> torch.Tensor:
    """Returns ``sample_weight`` broadcast to ``values``' shape, Keras style.

    A weight of shape ``[N]`` or ``[N, 1]`` applies to every element of example ``n``.

    Raises:
        ValueError: If the shapes cannot be broadcast; the message names ``owner``.
    """
    weight = torch.as_tensor(sample_weight, dtype=values.dtype, device=values.device)
    if weight.ndim == values.ndim + 1 and weight.shape[-1] == 1:
        weight = weight.squeeze(-1)
    while weight.ndim < values.ndim:
        weight = weight.unsqueeze(-1)
    try:
        return weight.expand_as(values)
    except RuntimeError:
        raise ValueError(f"{owner}: sample_weight of shape {tuple(weight.shape)} cannot be "
                         f"broadcast to values of shape {tuple(values.shape)}.") from None


def divide_no_nan(numerator: torch.Tensor, denominator: torch.Tensor) -> torch.Tensor:
    """``numerator / denominator`` with 0 where the denominator is 0 (no host sync)."""
    nonzero = denominator != 0
    return torch.where(nonzero, numerator / torch.where(nonzero, denominator, 1), 0.0)
