"""Shared value checks of the config definitions: one-line errors naming the key."""

from __future__ import annotations

from collections.abc import Iterable

from torchgarden.config.base import Config
from torchgarden.config.errors import ConfigError, did_you_mean

__all__ = ["choose", "choose_item", "require"]


def require(config: Config, name: str, ok: bool, requirement: str) -> None:
    """Raises a ``ConfigError`` saying ``name`` must be ``requirement`` unless ``ok``."""
    if not ok:
        key = config.field_path(name)
        raise ConfigError(
            f"{key} must be {requirement}, received {getattr(config, name)!r}", key=key
        )


def choose(
    config: Config, name: str, choices: Iterable[str], hints: dict[str, str] | None = None
) -> None:
    """Raises a ``ConfigError`` unless ``name`` is None or one of ``choices`` (``hints``
    map well-known wrong names to the right one)."""
    value = getattr(config, name)
    choices = tuple(choices)
    if value is None or value in choices:
        return
    key = config.field_path(name)
    hint = (
        f"; did you mean {hints[value]!r}?"
        if hints and value in hints
        else did_you_mean(value, choices)
    )
    raise ConfigError(f"{key}: {value!r} is not one of {', '.join(choices)}{hint}", key=key)


def choose_item(config: Config, name: str, item: str, choices: tuple[str, ...]) -> None:
    """Like :func:`choose` for one ``item`` of a list-valued field."""
    if item not in choices:
        key = config.field_path(name)
        raise ConfigError(
            f"{key}: {item!r} is not one of {', '.join(choices)}{did_you_mean(item, choices)}",
            key=key,
        )
