"""The error types of the config package, and the value checks the definitions share.

Every config error is a `ConfigError` (a `ValueError`, as Model Garden raises for a
locked config). Two kinds also subclass the exception Model Garden raises for them, so
ported `except KeyError:` / `except TypeError:` code still catches them:

* `ConfigKeyError` (also a `KeyError`): an unknown or reserved key;
* `ConfigTypeError` (also a `TypeError`): a value of the wrong type.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from torchgarden.utils.moved import raise_moved
from torchgarden.utils.suggest import did_you_mean

__all__ = ["ConfigError", "ConfigKeyError", "ConfigTypeError", "choose", "not_one_of", "require"]

_NEWLINES = re.compile(r"\s*\n\s*")


class ConfigError(ValueError):
    """A config key, type, value or file is wrong.

    The message is always a single line that names the dotted key, what was
    expected, what was received and, where one exists, the closest valid choice.

    Args:
        message: What went wrong; newlines are folded into spaces.
        key: The dotted key the error is about, if any. Defaults to None.
    """

    def __init__(self, message: str, *, key: str | None = None) -> None:
        super().__init__(_NEWLINES.sub(" ", str(message)))
        self.key = key

    def __str__(self) -> str:
        # KeyError's __str__ would quote the message; every ConfigError reads the same.
        return str(self.args[0]) if self.args else ""


class ConfigKeyError(ConfigError, KeyError):
    """An unknown or reserved config key (Model Garden raises `KeyError` here)."""


class ConfigTypeError(ConfigError, TypeError):
    """A config value of the wrong type (Model Garden raises `TypeError` here)."""


def require(config: Any, name: str, ok: bool, requirement: str) -> None:
    """Raises a ``ConfigError`` saying field ``name`` must be ``requirement`` unless ``ok``."""
    if not ok:
        key = config.field_path(name)
        raise ConfigError(
            f"{key} must be {requirement}, received {getattr(config, name)!r}", key=key
        )


def choose(
    config: Any, name: str, choices: Iterable[str], hints: dict[str, str] | None = None
) -> None:
    """Raises :func:`not_one_of` unless field ``name`` is None or one of ``choices``
    (``hints`` map well-known wrong names to the right one)."""
    value = getattr(config, name)
    choices = tuple(choices)
    if value is not None and value not in choices:
        raise not_one_of(config.field_path(name), value, choices, (hints or {}).get(value))


def not_one_of(
    key: str, value: str, choices: tuple[str, ...], hint: str | None = None
) -> ConfigError:
    """Returns the error for ``value`` at ``key``: the choices and ``hint`` or the closest."""
    hint = f"; did you mean {hint!r}?" if hint else did_you_mean(value, choices, style="clause")
    return ConfigError(f"{key}: {value!r} is not one of {', '.join(choices)}{hint}", key=key)


__getattr__ = raise_moved(__name__)  # Names that moved say where (utils.moved.MOVED).
