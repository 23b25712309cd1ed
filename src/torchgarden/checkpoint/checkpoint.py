"""``Checkpoint``: a named group of stateful objects saved and restored together
(the PyTorch counterpart of ``tf.train.Checkpoint``)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import torch

from torchgarden.checkpoint._host import to_host
from torchgarden.checkpoint.errors import CheckpointError, CheckpointMismatchError

__all__ = ["Checkpoint", "Value"]

_MAX_LISTED_KEYS = 5
#: The Python remedy a mismatch names; a caller that offers no ``strict`` (the experiment
#: runner, the CLI) replaces it with its own.
STRICT_HINT = (" (in Python, Checkpoint.load_state_dict or CheckpointManager.restore with "
               "strict=False skips missing/unexpected keys)")
_RESERVED_NAMES = frozenset({"add", "items", "load_state_dict", "names", "snapshot", "state_dict"})


class Value:
    """A plain value (an int, a tensor, a list...) made checkpointable.

    Read ``.value`` after a restore; a tensor value is restored in place (``copy_``).

    Example:
        >>> epoch = Value(0)
        >>> ckpt = Checkpoint(model=model, epoch=epoch)
        >>> epoch.value = 3  # saved with the next checkpoint

    Args:
        value: The initial value: tensors, numbers, strings, and lists / tuples / dicts of
            them (what ``torch.load(weights_only=True)`` reads back).
    """

    def __init__(self, value: Any) -> None:
        self.value = value

    def state_dict(self) -> dict[str, Any]:
        return {"value": self.value}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restores the value (in place for a tensor of the same shape)."""
        if "value" not in state_dict:
            raise KeyError(f"Value state must have the key 'value', got keys {sorted(state_dict)}.")
        new = state_dict["value"]
        if isinstance(self.value, torch.Tensor) and isinstance(new, torch.Tensor):
            if self.value.shape != new.shape:
                raise ValueError(
                    f"Value holds a tensor of shape {tuple(self.value.shape)}, the checkpoint "
                    f"has shape {tuple(new.shape)}.")
            with torch.no_grad():
                self.value.copy_(new)
        else:
            self.value = new

    def __repr__(self) -> str:
        return f"Value({self.value!r})"


class _DictItem:
    """Wraps a user ``dict`` so a restore updates it in place."""

    def __init__(self, target: dict[str, Any]) -> None:
        self.target = target

    def state_dict(self) -> dict[str, Any]:
        return dict(self.target)

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        self.target.clear()
        self.target.update(state_dict)


def _wrap(name: str, item: Any) -> Any:
    if not isinstance(name, str) or not name.isidentifier() or name.startswith("_"):
        raise ValueError(
            f"checkpoint item names must be identifiers not starting with '_', got {name!r}.")
    if name in _RESERVED_NAMES:
        raise ValueError(
            f"checkpoint item name {name!r} is reserved (a Checkpoint method); "
            f"pick another, e.g. {name + '_'!r}.")
    if callable(getattr(item, "state_dict", None)) and callable(
            getattr(item, "load_state_dict", None)):
        return item
    if isinstance(item, dict):
        return _DictItem(item)
    return Value(item)


def _shape(value: Any) -> tuple[int, ...] | None:
    """A tensor's shape (or a saved tensor's ``torch.Size``), else None."""
    if isinstance(value, torch.Tensor):
        return tuple(value.shape)
    return tuple(value) if isinstance(value, torch.Size) else None


def _list_keys(keys: list[str], *, quote: bool = True) -> str:
    shown = ", ".join(repr(k) if quote else k for k in keys[:_MAX_LISTED_KEYS])
    more = len(keys) - _MAX_LISTED_KEYS
    return shown + (f", ... and {more} more" if more > 0 else "")


def _key_problems(
    expected: Mapping[str, Any], found: Mapping[str, Any], *, missing: bool = True,
    unexpected: bool = False,
) -> list[str]:
    """Names the keys of ``expected`` that ``found`` lacks (with ``missing``), those of
    ``found`` not expected (with ``unexpected``) and the tensors of another shape."""
    absent = [k for k in expected if k not in found] if missing else []
    extra = [k for k in found if k not in expected] if unexpected else []
    shapes = [(k, _shape(found[k]), _shape(v)) for k, v in expected.items() if k in found]
    misshaped = [f"'{k}': checkpoint {saved} vs model {here}" for k, saved, here in shapes
                 if here is not None and saved != here]
    kinds = [("missing", absent, True), ("unexpected", extra, True),
             ("mis-shaped", misshaped, False)]
    return [f"{kind} keys ({len(keys)}): {_list_keys(keys, quote=quote)}"
            for kind, keys, quote in kinds if keys]


class Checkpoint:
    """A named group of stateful objects saved and restored together.

    Items are passed by keyword. An item with ``state_dict()`` and ``load_state_dict(sd)``
    (a module, an optimizer, an EMA, a metric, any user object) is used as is; a ``dict``
    is restored in place; any other value is wrapped in :class:`Value` and read back as
    ``ckpt.<name>``.

    Example:
        >>> ckpt = Checkpoint(model=model, optimizer=optimizer, step=0)
        >>> state = ckpt.state_dict()  # {"model": {...}, "optimizer": {...}, "step": {...}}
        >>> ckpt.load_state_dict(state)
        >>> ckpt.step  # a plain value reads back through its name
        0

    Args:
        **items: The objects to checkpoint, by name. Names must be identifiers that
            do not start with ``_``.
    """

    def __init__(self, **items: Any) -> None:
        self._items: dict[str, Any] = {}
        self._plain: set[str] = set()
        self._optional: set[str] = set()
        self.add(**items)

    def add(self, **items: Any) -> None:
        """Adds (or replaces) items by name, with the same rules as the constructor."""
        for name, item in items.items():
            wrapped = self._items[name] = _wrap(name, item)
            self._plain.discard(name)
            self._optional.discard(name)
            if isinstance(wrapped, Value) and wrapped is not item:
                self._plain.add(name)

    def add_optional(self, **items: Any) -> None:
        """Adds items that a checkpoint written before they existed may lack: restored
        when the checkpoint has them, left as they are when it does not (e.g. a tracker's
        run id, once a tracker is switched on for a run that had none)."""
        self.add(**items)
        self._optional.update(items)

    @property
    def items(self) -> dict[str, Any]:
        """The items by name (plain values appear as their :class:`Value` wrapper)."""
        return dict(self._items)

    def names(self) -> list[str]:
        """The item names, in insertion order."""
        return list(self._items)

    def __getattr__(self, name: str) -> Any:
        items = self.__dict__.get("_items")
        if items is None or name not in items:
            raise AttributeError(f"Checkpoint has no item {name!r}; items: {sorted(items or {})}.")
        return items[name].value if name in self.__dict__["_plain"] else items[name]

    def __getitem__(self, name: str) -> Any:
        if name not in self._items:
            raise KeyError(f"Checkpoint has no item {name!r}; items: {sorted(self._items)}.")
        return getattr(self, name)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def state_dict(self) -> dict[str, Any]:
        """Returns ``{name: item.state_dict()}`` for every item (tensors stay where they are)."""
        return {name: item.state_dict() for name, item in self._items.items()}

    def snapshot(self) -> dict[str, Any]:
        """Returns :meth:`state_dict` with every tensor copied to the host, so training
        going on never changes it (an in-memory restore point)."""
        return to_host(self.state_dict(), copy=True)

    def load_state_dict(self, state_dict: Mapping[str, Any], *, strict: bool = True) -> None:
        """Restores every item from ``state_dict``.

        Every item is checked before any is changed, so a mismatch leaves them untouched.

        Args:
            state_dict: ``{name: item_state}``, as returned by :meth:`state_dict`.
            strict: When True (the default), an item missing from ``state_dict`` and
                missing or unexpected module keys are errors; when False they are skipped.
                Items this Checkpoint does not track are always ignored (partial restore);
                mis-shaped tensors are always errors.

        Raises:
            CheckpointMismatchError: Items or module keys do not match; the message lists
                missing, unexpected and mis-shaped keys.
        """
        self._check_fits(state_dict, strict)
        for name, item in self._items.items():
            if name not in state_dict:
                continue
            # An entry read lazily (a sharded checkpoint's tensors) applies itself.
            apply_to = getattr(state_dict[name], "apply_to", None)
            try:
                if apply_to is not None:
                    apply_to(item, strict=strict)
                elif isinstance(item, torch.nn.Module):
                    item.load_state_dict(state_dict[name], strict=strict)
                else:
                    item.load_state_dict(state_dict[name])
            except CheckpointError:
                raise
            except (RuntimeError, ValueError, KeyError, TypeError) as e:
                raise CheckpointMismatchError(
                    f"restoring item '{name}' ({type(item).__name__}) failed: {e}") from e

    def _check_fits(self, state_dict: Mapping[str, Any], strict: bool) -> None:
        problems = []
        skippable = False
        # Items in the file that this Checkpoint does not track (an evaluation job
        # reading a training checkpoint has no optimizer) are ignored, as in TF.
        missing = [n for n in self._items if n not in state_dict and n not in self._optional]
        if strict and missing:
            skippable = True
            problems.append(
                f"items missing from the checkpoint ({len(missing)}): {_list_keys(missing)}; "
                f"checkpoint items: {sorted(state_dict)}")
        for name, item in self._items.items():
            saved = state_dict.get(name)
            if isinstance(item, torch.nn.Module) and isinstance(saved, Mapping):
                expected = item.state_dict()
                found = _key_problems(expected, saved, missing=strict, unexpected=strict)
                if found:
                    title = f"item '{name}' ({type(item).__name__}) does not match the checkpoint:"
                    problems.append("\n  ".join([title, *found]))
                    skippable = skippable or (strict and expected.keys() != saved.keys())
        if problems:
            hint = STRICT_HINT if skippable else ""
            raise CheckpointMismatchError(
                "checkpoint does not match" + hint + ":\n" + "\n".join(problems))

    def __repr__(self) -> str:
        inner = ", ".join(f"{n}={type(i).__name__}" for n, i in self._items.items())
        return f"Checkpoint({inner})"
