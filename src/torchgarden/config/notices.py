"""Model Garden keys a config maps or ignores, and the notices they leave.

A Model Garden key with no torchgarden field of the same name and meaning is declared on the
config class that would hold it, in ``MODEL_GARDEN_KEYS``::

    @dataclasses.dataclass
    class TrainerConfig(Config):
        MODEL_GARDEN_KEYS: ClassVar[Mapping[str, ModelGardenKey]] = {
            "train_tf_function": ignored("TF graph tracing; torch runs the step eagerly"),
            "distribution_strategy": mapped(values={"mirrored": "auto"}),
        }

``ignored(reason)`` accepts the key and drops its value; ``mapped(target)`` sets the value on
another field (a path relative to the same config) and ``mapped(values=...)`` reads Model
Garden's spelling of a value. Either way the override leaves a `Notice`: never silently. The
CLI prints them once before a run (`collect_notices`); `torchgarden port` lists them per key.
Outside a `collect_notices` block (a Python caller), each notice is a `UserWarning`.

This module is torch-free.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any

__all__ = ["ModelGardenKey", "Notice", "collect_notices", "ignored", "mapped", "notice"]

_NOTICES: contextvars.ContextVar[list[Notice] | None] = contextvars.ContextVar(
    "torchgarden_notices", default=None
)


@dataclasses.dataclass(frozen=True)
class Notice:
    """A Model Garden key read in a torchgarden way: what the user set and what it became."""

    key: str
    """The dotted key as the user set it (``runtime.all_reduce_alg``)."""
    action: str
    """``mapped`` (the value is used under another key or spelling) or ``ignored``."""
    detail: str
    """What it became, or why it has no effect here."""

    def __str__(self) -> str:
        return f"{self.key} {self.action}: {self.detail}"


@dataclasses.dataclass(frozen=True)
class ModelGardenKey:
    """How a config reads one Model Garden key; build it with `ignored` or `mapped`."""

    reason: str = ""
    """Why an ignored key has no effect here (empty for a mapped key)."""
    target: str = ""
    """For a mapped key: the field (relative dotted path) that receives the value."""
    values: Mapping[Any, Any] = dataclasses.field(default_factory=dict)
    """Model Garden's spellings of values and what each is here; others pass unchanged."""
    convert: Callable[[Any], Any] | None = None
    """Turns the value into the target field's value (after ``values``)."""
    note: str = ""
    """Said with the notice of a mapped key (what differs, what to do)."""

    def rewrite(self, key: str, value: Any, *, path: str) -> tuple[str, Any] | None:
        """The (key, value) to set instead of ``key: value`` (None drops it), with its notice."""
        if self.reason:
            notice(path, "ignored", self.reason)
            return None
        target = self.target or key
        new = self.values.get(value, value) if _hashable(value) else value
        if self.convert is not None:
            new = self.convert(new)
        if target == key and _same(new, value):
            return key, value  # Model Garden's spelling is also ours: nothing to say
        where = f"{path.rpartition('.')[0]}.{target}".lstrip(".")
        shown = f"{where}={new!r}" if target != key else f"{value!r} runs as {new!r}"
        notice(path, "mapped", f"{shown}{'; ' + self.note if self.note else ''}")
        return target, new


def ignored(reason: str) -> ModelGardenKey:
    """A Model Garden key accepted and dropped, with why it has no effect here."""
    return ModelGardenKey(reason=reason)


def mapped(
    target: str = "",
    *,
    values: Mapping[Any, Any] | None = None,
    convert: Callable[[Any], Any] | None = None,
    note: str = "",
) -> ModelGardenKey:
    """A Model Garden key (or value spelling) read as ``target`` (default: the same field)."""
    return ModelGardenKey(target=target, values=dict(values or {}), convert=convert, note=note)


def notice(key: str, action: str, detail: str) -> None:
    """Records that ``key`` was ``mapped`` or ``ignored`` (a warning outside a collector)."""
    item = Notice(key=key, action=action, detail=detail)
    notes = _NOTICES.get()
    if notes is None:
        warnings.warn(str(item), UserWarning, stacklevel=4)
    elif item not in notes:
        notes.append(item)


@contextlib.contextmanager
def collect_notices() -> Iterator[list[Notice]]:
    """Collects the notices of the overrides made inside the block, in order, once each."""
    notes: list[Notice] = []
    token = _NOTICES.set(notes)
    try:
        yield notes
    finally:
        _NOTICES.reset(token)


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b
