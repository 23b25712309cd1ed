"""The error types of the config package and its did-you-mean helper (see `utils.suggest`).

Every config error is a `ConfigError` (a `ValueError`, as Model Garden raises for a
locked config). Two kinds also subclass the exception Model Garden raises for them, so
ported `except KeyError:` / `except TypeError:` code still catches them:

* `ConfigKeyError` (also a `KeyError`): an unknown or reserved key;
* `ConfigTypeError` (also a `TypeError`): a value of the wrong type.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from torchgarden.utils import suggest
from torchgarden.utils.suggest import closest

__all__ = ["ConfigError", "ConfigKeyError", "ConfigTypeError", "closest", "did_you_mean"]

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


def did_you_mean(word: str, choices: Iterable[str], *, prefix: str = "") -> str:
    """Returns `"; did you mean 'x'?"` for the closest choice, or `""` (config's clause style).

    Args:
        word: The unknown word.
        choices: The valid words.
        prefix: Prepended to the suggestion (for dotted paths). Defaults to "".
    """
    return suggest.did_you_mean(word, choices, prefix=prefix, style="clause")
