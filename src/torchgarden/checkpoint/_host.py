"""State on the host for a checkpoint write: device copies, snapshot copies, checks."""

from __future__ import annotations

import collections
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch

__all__ = ["HostStaging", "to_host"]

# Exact types: subclasses (np.float64, IntEnum) pickle as classes weights_only refuses.
_PRIMITIVES = frozenset(
    {int, float, bool, complex, str, bytes, type(None), torch.dtype, torch.device, torch.Size}
)


def _is_safe_global(cls: type) -> bool:
    return any(entry is cls or (isinstance(entry, tuple) and entry[0] is cls)
               for entry in torch.serialization.get_safe_globals())


class HostStaging:
    """Host buffers reused by every asynchronous save of one writer (the owner must not
    stage a new state while a write still reads the previous one): a copy into memory
    already mapped costs one memcpy; a fresh clone of a few hundred MB also page-faults
    every page in, 4-5x slower here."""

    _PIECE = 4 << 20  # Elements (16 MiB of float32) per copy task.

    def __init__(self) -> None:
        self._buffers: dict[str, torch.Tensor] = {}
        self._queued: list[tuple[torch.Tensor, torch.Tensor]] = []
        self._pool: ThreadPoolExecutor | None = None

    def copy(self, tensor: torch.Tensor, where: str) -> torch.Tensor:
        """The buffer kept for ``where`` (a key path), holding ``tensor`` after :meth:`finish`."""
        if tensor.layout != torch.strided:
            return tensor.to("cpu", copy=True)
        buffer = self._buffers.get(where)
        if buffer is None or buffer.shape != tensor.shape or buffer.dtype != tensor.dtype:
            buffer = torch.empty(tensor.shape, dtype=tensor.dtype,
                                 pin_memory=tensor.device.type == "cuda")
            self._buffers[where] = buffer
        if tensor.device.type != "cpu" or not tensor.is_contiguous():
            buffer.copy_(tensor, non_blocking=True)
        else:
            flat, source = buffer.view(-1), tensor.view(-1)
            self._queued.extend((flat[i:i + self._PIECE], source[i:i + self._PIECE])
                                for i in range(0, flat.numel(), self._PIECE))
        return buffer

    def finish(self) -> None:
        """Does the queued CPU copies in 16 MiB pieces on up to 4 threads (``copy_``
        releases the GIL)."""
        queued, self._queued = self._queued, []
        if self._pool is None:
            self._pool = ThreadPoolExecutor(min(4, os.cpu_count() or 1), "ckpt-stage")
        for done in [self._pool.submit(target.copy_, source) for target, source in queued]:
            done.result()


def to_host(state: Any, *, copy: bool, staging: HostStaging | None = None) -> Any:
    """Returns ``state`` (nested dicts, lists, tuples, tensors, primitives) with every
    tensor on CPU; raises ``TypeError`` naming the key path of a leaf that
    ``torch.load(weights_only=True)`` would refuse.

    Args:
        copy: Clone CPU tensors too, so training going on while a background thread
            writes does not change the saved copy.
        staging: Copy into these reused buffers instead of new ones (with ``copy``).
    """
    moved_from: list[str] = []  # Device types.

    def visit(obj: Any, where: str) -> Any:
        if isinstance(obj, torch.Tensor):
            tensor = obj.detach()
            if tensor.device.type != "cpu":
                moved_from.append(tensor.device.type)
            if staging is not None:
                return staging.copy(tensor, where)
            if tensor.device.type != "cpu":
                return tensor.to("cpu", non_blocking=True)
            # A view is cloned too: torch.save would write its whole base storage.
            if copy or (tensor.layout == torch.strided
                        and tensor.untyped_storage().nbytes() > tensor.nbytes):
                return tensor.clone()
            return tensor
        if type(obj) in (dict, collections.OrderedDict):
            return type(obj)((k, visit(v, f"{where}[{k!r}]")) for k, v in obj.items())
        if type(obj) in (list, tuple):
            return type(obj)(visit(v, f"{where}[{i}]") for i, v in enumerate(obj))
        if type(obj) is set:
            return set(obj)
        if type(obj) in _PRIMITIVES or _is_safe_global(type(obj)):
            return obj
        raise TypeError(
            f"cannot checkpoint {where}: a {type(obj).__module__}.{type(obj).__qualname__}, "
            f"which torch.load(weights_only=True) refuses; return tensors, numbers, strings, "
            f"lists, tuples and dicts from state_dict() (numpy arrays: torch.from_numpy(x) or "
            f"x.tolist()), or register the class with torch.serialization.add_safe_globals.")

    host = visit(state, "state")
    if staging is not None:
        staging.finish()
    if moved_from:
        # Sync point: device->host copies were issued non-blocking; wait for them once.
        synchronize = getattr(getattr(torch, moved_from[0], None), "synchronize", None)
        if synchronize is not None:
            synchronize()
    return host
