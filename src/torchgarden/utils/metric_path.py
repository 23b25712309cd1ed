"""Naming one value of nested logs: ``"accuracy"``, ``"clean/accuracy"``, ``"coco|AP"``.

Evaluation logs nest: named validation sets and multi-task runs put each set's or
task's logs under its name (``{"digits": {"accuracy": 0.9}}``), which TensorBoard
shows as ``validation/digits`` and ``metrics.jsonl`` as ``digits/accuracy``. A metric
path walks them with ``/`` or ``|`` between levels; a key that itself holds a ``/``
(``"image/input"``) is matched whole first.

Example:
    >>> find_metric({"digits": {"accuracy": 0.9}}, "digits/accuracy")
    0.9
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["find_metric", "has_metric", "metric_paths"]

_SEPARATORS = "/|"


def _walk(node: Any, name: str) -> tuple[bool, Any]:
    if not isinstance(node, Mapping):
        return False, None
    if name in node:
        return True, node[name]
    for index, char in enumerate(name):
        if char in _SEPARATORS and name[:index] in node:
            found, value = _walk(node[name[:index]], name[index + 1:])
            if found:
                return True, value
    return False, None


def has_metric(logs: Mapping[str, Any], name: str) -> bool:
    """Whether ``name`` names a value of ``logs``."""
    return _walk(logs, name)[0]


def metric_paths(logs: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Every leaf of ``logs`` as a ``/`` path, in order."""
    paths: list[str] = []
    for key, value in logs.items():
        path = f"{prefix}/{key}" if prefix else str(key)
        paths += metric_paths(value, path) if isinstance(value, Mapping) else [path]
    return paths


def find_metric(logs: Mapping[str, Any], name: str) -> Any:
    """Returns the value ``name`` names in ``logs``.

    Raises:
        KeyError: Naming the metric and the paths the logs hold.
    """
    found, value = _walk(logs, name)
    if not found:
        raise KeyError(f"metric {name!r} is not in the logs; they hold: "
                       f"{', '.join(metric_paths(logs)) or 'nothing'}.")
    return value
