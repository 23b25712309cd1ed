"""Turning step/loop outputs (device tensors, nested dicts) into host values."""

from __future__ import annotations

import pprint
from typing import Any

import numpy as np
import torch

from torchgarden.utils.logs import flatten

__all__ = ["flatten_logs", "format_output", "to_host"]


def to_host(logs: Any) -> Any:
    """Returns ``logs`` with every tensor replaced by a float (0-d) or a NumPy array.

    All scalar tensors are copied to the host in one transfer per device, so a loop
    end costs one synchronisation however many metrics there are.
    """
    scalars: dict[torch.device, list[tuple[dict[str, Any], str, torch.Tensor]]] = {}

    def walk(value: Any) -> Any:
        if isinstance(value, dict):
            out: dict[str, Any] = {}
            for key, item in value.items():
                if isinstance(item, torch.Tensor) and item.numel() == 1 and item.ndim <= 1:
                    scalars.setdefault(item.device, []).append((out, key, item))
                    out[key] = None  # Filled in below; keeps the key order.
                else:
                    out[key] = walk(item)
            return out
        if isinstance(value, torch.Tensor):
            return value.detach().cpu().numpy()
        if isinstance(value, np.generic):
            return value.item()
        if isinstance(value, (list, tuple)):
            return type(value)(walk(v) for v in value)
        return value

    result = walk(logs)
    for entries in scalars.values():
        stacked = torch.stack([t.detach().reshape(()).double() for _, _, t in entries])
        for (out, key, _), value in zip(entries, stacked.tolist()):  # Host sync.
            out[key] = value
    return result


def flatten_logs(logs: dict[str, Any], prefix: str = "", sep: str = "/") -> dict[str, Any]:
    """Flattens nested dicts into ``{"a/b": value}`` (``utils.logs.flatten``)."""
    return flatten(logs, sep, prefix)


def _printable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _printable(v) for k, v in value.items()}
    shape = getattr(value, "shape", None)
    if shape is not None and len(shape) > 1:
        # Images and other arrays go to summaries; the log line names them only.
        return f"<{getattr(value, 'dtype', '')} array {'x'.join(map(str, shape))}>"
    return value


def format_output(logs: dict[str, Any]) -> str:
    """The ``output: ...`` part of an Orbit log line: arrays named by shape only."""
    text = pprint.pformat(_printable(logs), width=100, compact=True)
    if "\n" in text:
        return "\n" + "\n".join("    " + line for line in text.splitlines())
    return text

