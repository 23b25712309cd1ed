"""The ``Logs`` type: what steps, loops and evaluations return."""

from __future__ import annotations

from typing import Any

__all__ = ["Logs"]

Logs = dict[str, Any]
"""Step, loop and evaluation outputs: ``name -> scalar | tensor | array | Logs``.

Values may be device tensors until the Controller reads them once per loop; a nested
``Logs`` becomes a TensorBoard sub-directory (``validation/iou/...``).
"""
