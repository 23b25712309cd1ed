"""Public names that moved or were removed: the one table of them, and the module
``__getattr__`` that answers an old name with where it went (torch-free).

A name stays here for at least one release after it moved, so a ported launch script
that still reads ``torchgarden.serialize_config`` fails with the replacement in the
message instead of a bare ``AttributeError``.
"""

from __future__ import annotations

import dis
import sys
from collections.abc import Callable
from typing import Any, NoReturn

__all__ = ["MOVED", "MovedImportError", "MovedNameError", "moved_name_error", "raise_moved"]

_IMPORT_FROM = dis.opmap["IMPORT_FROM"]

#: ``module -> {old name: what to use instead}``; "moved to X" when X is the same object
#: under another home, else a sentence saying what replaces it.
MOVED: dict[str, dict[str, str]] = {
    "torchgarden": {
        "serialize_config": "moved to torchgarden.train_lib.serialize_config (run_experiment "
                            "writes model_dir/params.yaml itself)",
        "OneOfConfig": "moved to torchgarden.config.OneOfConfig",
    },
    "torchgarden.config.errors": {
        "closest": "moved to torchgarden.utils.suggest.closest",
    },
}


class MovedNameError(AttributeError):
    """An old public name: the message says what replaces it."""


class MovedImportError(ImportError):
    """``from module import old_name``: Python turns any AttributeError raised there into
    a bare "cannot import name", so that statement gets this error (same message)."""


def moved_name_error(module: str, name: str, *, depth: int = 2) -> Exception | None:
    """The error for ``module.name`` if it moved or was removed, else None.

    Args:
        module: The module's ``__name__``.
        name: The attribute asked for.
        depth: Frames from here up to the code that asked (the caller of the module's
            ``__getattr__``). Defaults to 2.
    """
    where = MOVED.get(module, {}).get(name)
    if where is None:
        return None
    message = f"{module}.{name} was {where}."
    frame = sys._getframe(depth)
    asked_by_import = frame.f_code.co_code[frame.f_lasti] == _IMPORT_FROM
    return MovedImportError(message, name=module) if asked_by_import else (
        MovedNameError(message))


def raise_moved(module: str) -> Callable[[str], NoReturn]:
    """A module ``__getattr__`` for a module without lazy names: an old name raises with
    its replacement, any other the usual ``AttributeError``.

    Example (at the end of a module):
        >>> __getattr__ = raise_moved(__name__)  # doctest: +SKIP
    """
    def __getattr__(name: str) -> Any:
        raise moved_name_error(module, name) or AttributeError(
            f"module {module!r} has no attribute {name!r}")

    return __getattr__
