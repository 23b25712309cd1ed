"""The ``Logs`` type: what steps, loops and evaluations return."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["Logs", "flatten"]

Logs = dict[str, Any]
"""Step, loop and evaluation outputs: ``name -> scalar | tensor | array | Logs``.

Values may be device tensors until the Controller reads them once per loop; a nested
``Logs`` becomes a TensorBoard sub-directory (``validation/iou/...``).
"""


def flatten(tree: Mapping[str, Any], sep: str = "/", prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a/b": 1}`` with ``sep`` between levels; an empty
    mapping stays a leaf."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{sep}{key}" if prefix else str(key)
        if isinstance(value, Mapping) and value:
            flat.update(flatten(value, sep, name))
        else:
            flat[name] = value
    return flat
