"""Reading one-of sections of an ``OptimizationConfig`` with helpful errors."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

# Config paths as users write them in YAML and --params_override.
OPTIMIZATION_PATH = "trainer.optimizer_config"


def did_you_mean(value: object, choices: Iterable[str]) -> str:
    """Returns ``" Did you mean 'x'?"`` for the closest choice, or ``""`` if none is close."""
    matches = difflib.get_close_matches(str(value), list(choices), n=1, cutoff=0.5)
    return f" Did you mean {matches[0]!r}?" if matches else ""


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
        raise ValueError(
            f"{path}.type {what}; expected one of {choices}.{did_you_mean(kind, choices)}"
        )
    sub_config = getattr(oneof, kind, None)
    if sub_config is None:
        raise ValueError(f"{path}.{kind} is missing; set it or choose another {path}.type.")
    return kind, sub_config


def read_fields(sub_config: Any, path: str, fields: dict[str, Any]) -> dict[str, Any]:
    """Reads the named attributes of ``sub_config``.

    Args:
        sub_config: The chosen sub-config.
        path: Its dotted config path, used in error messages.
        fields: Attribute name -> default; ``REQUIRED`` marks fields without a default.

    Raises:
        ValueError: If a required field is missing or None.
    """
    values = {}
    for name, default in fields.items():
        value = getattr(sub_config, name, default)
        if default is REQUIRED and (value is REQUIRED or value is None):
            found = "None" if value is None else "no such field"
            raise ValueError(f"{path}.{name} must be set; got {found}.")
        values[name] = value
    return values


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()
