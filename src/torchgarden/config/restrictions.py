"""String restrictions between config values, checked by `Config.validate()`.

A restriction is a binary relation `a <op> b` where each side is a dotted key
(relative to the config that declares it) or a constant: a number, a quoted string, or a
word an override reads as a bool or None (`None`, `null`, `true`, `False`, ...); `<op>`
is one of `==, !=, <, <=, >, >=`. For example `'task.train_data.is_training != None'` or
`'trainer.steps_per_loop <= trainer.train_steps'`.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from typing import Any

from torchgarden.config.errors import ConfigError
from torchgarden.config.overrides import WORDS

__all__ = ["check_restriction"]

_OPERATORS: dict[str, Callable[[Any, Any], bool]] = {
    "==": operator.eq,
    "!=": operator.ne,
    "<=": operator.le,
    ">=": operator.ge,
    "<": operator.lt,
    ">": operator.gt,
}
# Longer operators first: `<=` must not read as `<` followed by `=`.
_RELATION = re.compile(rf"^\s*(?P<lhs>.+?)\s*(?P<op>{'|'.join(_OPERATORS)})\s*(?P<rhs>.+?)\s*$")


def check_restriction(config: Any, text: str, *, prefix: str = "") -> None:
    """Raises if the restriction `text` (keys relative to `config`) does not hold.

    Args:
        prefix: Dotted key of `config` inside the validated root, for the messages.

    Raises:
        ConfigError: If the restriction is malformed, names an unknown key, compares
            incomparable values, or is violated (the message lists the values).
    """
    match = _RELATION.match(text)
    if match is None:
        raise ConfigError(
            f"restriction {text!r} is not 'a <op> b' with <op> one of {', '.join(_OPERATORS)}"
        )
    lhs, lhs_key = _operand(config, match["lhs"], text)
    rhs, rhs_key = _operand(config, match["rhs"], text)
    try:
        holds = _OPERATORS[match["op"]](lhs, rhs)
    except TypeError:
        raise ConfigError(
            f"restriction {text!r} cannot compare {lhs!r} ({type(lhs).__name__}) "
            f"with {rhs!r} ({type(rhs).__name__})"
        ) from None
    if not holds:
        facts = [_describe(f"{prefix}.{key}" if prefix else key, value)
                 for key, value in ((lhs_key, lhs), (rhs_key, rhs)) if key is not None]
        detail = ", ".join(facts) if facts else "the constants differ"
        raise ConfigError(f"restriction {text!r} failed: {detail}")


def _operand(config: Any, token: str, text: str) -> tuple[Any, str | None]:
    """Returns (value, dotted key or None for a constant)."""
    if token in WORDS:
        return WORDS[token], None
    if len(token) >= 2 and token[0] == token[-1] and token[0] in "'\"":
        return token[1:-1], None
    for parse in (int, float):
        try:
            return parse(token), None
        except ValueError:
            pass
    if token not in config:
        raise ConfigError(f"restriction {text!r} names the unknown key {token!r}")
    return config[token], token


def _describe(key: str, value: Any) -> str:
    return f"{key} is None" if value is None else f"{key} = {value!r}"
