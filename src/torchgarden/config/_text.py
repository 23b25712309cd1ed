"""How config messages print an annotation (`float | None`) and a value (bounded)."""

from __future__ import annotations

import reprlib
import types
from typing import Any, Literal, Union, get_args, get_origin

from torchgarden.config import _classes

__all__ = ["format_type", "show"]

NoneType = type(None)
_UNIONS = (Union, types.UnionType)


def format_type(tp: Any) -> str:
    """Returns an annotation as a user would write it: `int`, `float | None`, `list[int]`."""
    if tp is Any:
        return "Any"
    if tp is NoneType or tp is None:
        return "None"
    origin = get_origin(tp)
    args = get_args(tp)
    if origin in _UNIONS:
        parts = [format_type(arg) for arg in args if arg is not NoneType]
        return " | ".join(parts + (["None"] if NoneType in args else []))
    if origin is Literal:
        return f"one of {', '.join(repr(arg) for arg in args)}"
    if origin is not None:
        name = getattr(origin, "__name__", str(origin))
        if not args:
            return name
        return f"{name}[{', '.join('...' if a is Ellipsis else format_type(a) for a in args)}]"
    if isinstance(tp, type):
        return tp.__name__
    return str(tp).replace("typing.", "")


_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxlist, _REPR.maxtuple, _REPR.maxdict = 2, 4, 4, 4
_REPR.maxstring, _REPR.maxother = 40, 40


def show(value: Any) -> str:
    """Returns `repr(value) (type)` for error messages, shortened to one line.

    The repr is bounded (`reprlib`): a value built from YAML aliases may be huge, and
    a message must never expand it.
    """
    if _classes.is_config_class(type(value)):
        return f"a {type(value).__name__}"
    text = _REPR.repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{text} ({type(value).__name__})"
