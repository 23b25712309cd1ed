"""Moving nested batches of tensors to a device, with a no-work path."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def _move(obj: Any, device: torch.device, non_blocking: bool) -> Any:
    if isinstance(obj, torch.Tensor):
        if obj.device == device:
            return obj
        return obj.to(device, non_blocking=non_blocking)
    if isinstance(obj, (tuple, list)):
        moved = [_move(item, device, non_blocking) for item in obj]
        if all(new is old for new, old in zip(moved, obj)):
            return obj  # Nothing moved: keep the caller's container, allocate nothing new.
        if isinstance(obj, tuple) and hasattr(obj, "_fields"):
            return type(obj)(*moved)  # namedtuple
        return type(obj)(moved) if type(obj) in (tuple, list) else moved
    if isinstance(obj, dict):
        moved_items = {key: _move(value, device, non_blocking) for key, value in obj.items()}
        if all(moved_items[key] is value for key, value in obj.items()):
            return obj
        return type(obj)(moved_items) if type(obj) is dict else moved_items
    return obj


def _resolve(device: torch.device | str) -> torch.device:
    device = torch.device(device)
    if device.type == "cuda" and device.index is None and torch.cuda.is_available():
        # Compare against the concrete index so tensors already there are not copied.
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def move_to_device(batch: Any, device: torch.device | str, non_blocking: bool = True) -> Any:
    """Moves every tensor in a nested tuple/list/dict batch to `device`.

    Containers whose tensors are all already on `device` are returned as they
    are (the same objects), so a CPU batch headed for the CPU costs one walk
    and no copies. Non-tensor leaves are returned unchanged. Copies to the CPU
    are always blocking (a non-blocking device-to-host copy could be read before
    it lands).

    Args:
        batch: A tensor or a nest of tuples (incl. namedtuples), lists and dicts.
        device: Target device, e.g. `"cuda"` or `torch.device("cuda", 1)`.
        non_blocking: Use asynchronous host-to-device copies (effective for
            pinned memory). Defaults to True.

    Returns:
        The batch with the same structure, its tensors on `device`.
    """
    device = _resolve(device)
    return _move(batch, device, non_blocking and device.type != "cpu")


def _identity(batch: Any) -> Any:
    return batch


def make_batch_mover(device: torch.device | str, non_blocking: bool = True) -> Callable[[Any], Any]:
    """Decides once how batches reach `device`; call the result every step.

    For a CPU target it returns the identity function (loaders yield CPU
    batches, so there is nothing to walk); otherwise it returns a
    `move_to_device` bound to `device`.

    Args:
        device: Target device.
        non_blocking: Passed to `move_to_device`. Defaults to True.

    Returns:
        `batch -> batch on device`.
    """
    target = _resolve(device)
    if target.type == "cpu":
        return _identity

    def mover(batch: Any) -> Any:
        return _move(batch, target, non_blocking)

    return mover
