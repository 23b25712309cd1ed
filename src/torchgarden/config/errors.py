"""The error type of the config package and its did-you-mean helper."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable

__all__ = ["ConfigError", "closest", "did_you_mean"]

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


def closest(word: str, choices: Iterable[str]) -> str | None:
    """Returns the choice that `word` most likely misspells, or None.

    Args:
        word: The unknown word.
        choices: The valid words.

    Returns:
        A case-insensitive exact match if there is one, else the best
        `difflib` match with a ratio of at least 0.6, else None.
    """
    options = [str(choice) for choice in choices]
    lowered = {option.lower(): option for option in options}
    if word.lower() in lowered:
        return lowered[word.lower()]
    matches = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    return matches[0] if matches else None


def did_you_mean(word: str, choices: Iterable[str], *, prefix: str = "") -> str:
    """Returns `"; did you mean 'x'?"` for the closest choice, or `""`.

    Args:
        word: The unknown word.
        choices: The valid words.
        prefix: Prepended to the suggestion (for dotted paths). Defaults to "".
    """
    match = closest(word, choices)
    return f"; did you mean {prefix + match!r}?" if match is not None else ""
