"""Dotted config keys: joining them, nesting `{"a.b": 1}`, and the unknown-key error."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torchgarden.config._types import show
from torchgarden.config.errors import ConfigError, ConfigKeyError, ConfigTypeError, did_you_mean

__all__ = ["join_key", "nest_dotted", "unknown_key_error"]


def join_key(prefix: str, key: str) -> str:
    """Returns `prefix.key`, or `key` at the top level (empty `prefix`)."""
    return f"{prefix}.{key}" if prefix else key


def unknown_key_error(
    key: str, names: tuple[str, ...], prefix: str, cls: type
) -> ConfigKeyError:
    """Returns the error for `key` under `prefix`: the closest valid key, or all of them."""
    path = join_key(prefix, key)
    hint = did_you_mean(key, names, prefix=prefix + "." if prefix else "")
    if not hint:
        hint = f"; valid keys of {prefix or cls.__name__}: {', '.join(names)}"
    return ConfigKeyError(f"unknown key {path!r}{hint}", key=path)


def nest_dotted(data: Mapping[str, Any], fields: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    """Turns `{"a.b": 1}` into `{"a": {"b": 1}}` for keys that are not fields themselves."""
    result: dict[str, Any] = {}
    for key, value in data.items():
        if not isinstance(key, str):
            raise ConfigTypeError(
                f"keys must be strings, received {show(key)} under {prefix or 'the top level'}"
            )
        head, dot, rest = key.partition(".")
        if not dot or key in fields:
            result[key] = value
            continue
        present = result.get(head, {})
        if not isinstance(present, Mapping):
            raise ConfigError(
                f"key {join_key(prefix, key)!r} conflicts with {join_key(prefix, head)!r}"
            )
        result[head] = {**present, rest: value}
    return result
