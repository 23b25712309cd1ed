"""`diff(a, b)`: the dotted keys whose values differ between two configs."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from torchgarden.config._classes import TYPE_KEY, key_of
from torchgarden.utils.logs import flatten

if TYPE_CHECKING:
    from torchgarden.config.base import Config

__all__ = ["MISSING", "diff"]


class _Missing:
    """Marks a key present on one side of a `diff` only."""

    def __repr__(self) -> str:
        return "<missing>"


MISSING: Any = _Missing()
"""Stands for "no such key" in the result of `diff`."""


def diff(a: Config, b: Config) -> dict[str, tuple[Any, Any]]:
    """Returns the dotted keys whose values differ between two configs.

    Used to refuse resuming under an incompatible config and to record how a run's
    config differs from the registered default.

    Args:
        a: The first config (e.g. the registered default).
        b: The second config (e.g. the resolved one).

    Returns:
        `{dotted_key: (value_in_a, value_in_b)}` in field order; a key present on
        one side only has `MISSING` on the other. Lists compare as whole values.
        If the classes differ, `_type` maps to both class names.
    """
    left, right = flatten(a.as_dict(), sep="."), flatten(b.as_dict(), sep=".")
    result: dict[str, tuple[Any, Any]] = {}
    if type(a) is not type(b):
        result[TYPE_KEY] = (key_of(type(a)), key_of(type(b)))
    for key in [*left, *(k for k in right if k not in left)]:
        old, new = left.get(key, MISSING), right.get(key, MISSING)
        if not _same(old, new):
            result[key] = (old, new)
    return result


def _same(old: Any, new: Any) -> bool:
    if isinstance(old, float) and isinstance(new, float) and math.isnan(old) and math.isnan(new):
        return True
    return type(old) is type(new) and old == new
