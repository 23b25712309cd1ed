"""Mixed precision: ``runtime.mixed_precision_dtype`` -> ``torch.autocast`` around forward."""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import nn

__all__ = ["precision_dtype", "autocast_forward"]

_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": None, None: None}


def precision_dtype(name: str | None) -> torch.dtype | None:
    """Maps ``runtime.mixed_precision_dtype`` to the autocast dtype (None = full precision)."""
    try:
        return _DTYPES[name]
    except KeyError:
        raise ValueError(
            "runtime.mixed_precision_dtype must be one of float16, bfloat16, float32 or null, "
            f"got '{name}'."
        ) from None


def _to_float32(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.float() if value.is_floating_point() else value
    if isinstance(value, dict):
        return {k: _to_float32(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_to_float32(v) for v in value)
    return value


def autocast_forward(model: nn.Module, device_type: str, dtype: torch.dtype) -> nn.Module:
    """Runs ``model.forward`` under ``torch.autocast`` and returns float32 outputs.

    Only the forward pass is autocast (backward runs in the dtypes forward chose, as
    PyTorch recommends), and outputs are cast back to float32 so losses and metrics
    are computed in full precision, like Model Garden's vision tasks.
    """
    forward = model.forward

    @functools.wraps(forward)
    def autocast_forward_fn(*args: Any, **kwargs: Any) -> Any:
        with torch.autocast(device_type=device_type, dtype=dtype):
            outputs = forward(*args, **kwargs)
        return _to_float32(outputs)

    model.forward = autocast_forward_fn  # type: ignore[method-assign]
    return model
