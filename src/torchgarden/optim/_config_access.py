"""Reading one-of sections of an ``OptimizationConfig`` with helpful errors."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from torchgarden.utils.suggest import did_you_mean

# Config paths as users write them in YAML and --params_override.
OPTIMIZATION_PATH = "trainer.optimizer_config"


def selected(oneof: Any, path: str, choices: Iterable[str]) -> tuple[str, Any]:
    """Returns ``(type, sub_config)`` of a one-of config section.

    Args:
        oneof: A one-of config with a ``type`` attribute naming the chosen field.
        path: The dotted config path of ``oneof``, used in error messages.
        choices: The valid types.

    Raises:
        ValueError: If the type is unset or not one of ``choices``.
    """
    choices = sorted(choices)
    kind = getattr(oneof, "type", None)
    if kind not in choices:
        what = "is not set" if kind in (None, "") else f"is {kind!r}"
        hint = did_you_mean(kind, choices, cutoff=0.5)
        raise ValueError(f"{path}.type {what}; expected one of {choices}.{hint}")
    sub_config = getattr(oneof, kind, None)
    if sub_config is None:
        raise ValueError(f"{path}.{kind} is missing; set it or choose another {path}.type.")
    return kind, sub_config
