"""Walking a config's values: sub-configs, validation of every value, export to plain data.

Torch-free helpers of `Config` (`base.py`); a value is a sub-config when its class is a
registered config class.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from torchgarden.config import _classes
from torchgarden.config._classes import TYPE_KEY, key_of
from torchgarden.config._types import config_classes_in, element_type
from torchgarden.config.errors import ConfigError

__all__ = ["configs_in", "export", "validate_value"]


def _is_config(value: Any) -> bool:
    return _classes.is_config_class(type(value))


def configs_in(value: Any) -> Iterator[Any]:
    """The configs held by a value (itself, or inside lists, tuples and dicts)."""
    if _is_config(value):
        yield value
    elif isinstance(value, list | tuple):
        for item in value:
            yield from configs_in(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from configs_in(item)


def validate_value(value: Any, path: str) -> None:
    """Validates the configs inside ``value`` and refuses NaN anywhere in it."""
    if isinstance(value, float) and math.isnan(value):
        # NaN compares false with everything, so a NaN bound or rate silently disables
        # the check or poisons the run; no config field means anything by it.
        raise ConfigError(f"{path} is NaN; give a number", key=path)
    if _is_config(value):
        value._validate(path)
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            validate_value(item, f"{path}[{i}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            validate_value(item, f"{path}.{key}")


def export(value: Any, tp: Any, include_type: bool) -> Any:
    """``value`` as plain data for `as_dict`; ``tp`` is its field's annotation."""
    if _is_config(value):
        data = value.as_dict(include_type=include_type)
        if include_type and type(value) not in config_classes_in(tp):
            data = {TYPE_KEY: key_of(type(value)), **data}
        return data
    if isinstance(value, list | tuple):  # A tuple stays a tuple (YAML writes both as lists).
        return type(value)(
            export(item, element_type(tp, i), include_type) for i, item in enumerate(value)
        )
    if isinstance(value, dict):
        return {
            key: export(item, element_type(tp, key), include_type) for key, item in value.items()
        }
    return value
