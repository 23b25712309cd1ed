"""Did-you-mean suggestions for unknown names: the one home of ``difflib`` matching."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["closest", "did_you_mean"]


def closest(word: object, choices: Iterable[object], *, cutoff: float = 0.6) -> str | None:
    """Returns the choice that ``word`` most likely misspells, or None.

    Args:
        word: The unknown word (converted with ``str``).
        choices: The valid words (converted with ``str``).
        cutoff: The lowest ``difflib`` similarity ratio accepted (0.0 always returns
            the best match when there are choices). Defaults to 0.6.

    Returns:
        A case-insensitive exact match if there is one, else the best ``difflib``
        match with a ratio of at least ``cutoff``, else None.

    Example:
        >>> closest("adamw", ["sgd", "adam", "AdamW"])
        'AdamW'
    """
    text = str(word)
    options = [str(choice) for choice in choices]
    lowered = {option.lower(): option for option in options}
    if text.lower() in lowered:
        return lowered[text.lower()]
    matches = difflib.get_close_matches(text, options, n=1, cutoff=cutoff)
    return matches[0] if matches else None


def did_you_mean(
    word: object,
    choices: Iterable[object],
    *,
    prefix: str = "",
    cutoff: float = 0.6,
    style: str = "sentence",
) -> str:
    """Returns a suggestion to append to an error message, or ``""`` if nothing is close.

    Args:
        word: The unknown word.
        choices: The valid words.
        prefix: Prepended to the suggested word (e.g. a dotted config path). Defaults
            to ``""``.
        cutoff: See :func:`closest`. Defaults to 0.6.
        style: ``"sentence"`` gives ``" Did you mean 'x'?"`` (after a full stop);
            ``"clause"`` gives ``"; did you mean 'x'?"`` (inside a sentence).
            Defaults to ``"sentence"``.

    Example:
        >>> did_you_mean("trian", ["train", "eval"])
        " Did you mean 'train'?"
    """
    match = closest(word, choices, cutoff=cutoff)
    if match is None:
        return ""
    if style == "clause":
        return f"; did you mean {prefix + match!r}?"
    return f" Did you mean {prefix + match!r}?"
