"""Which checkpoints are read: a restore's resume point, an evaluator's next checkpoint.

``<name>-<N>`` is a resume point only if it verifies (``layout.verify``), its state records
global step ``N`` too, and the model's parameters are finite: a checkpoint written after a
blow-up is not resumed. (A sharded checkpoint's tensors are read only when applied, so
they are checked before either format is written.) :func:`checkpoints_iterator` follows
a directory as a trainer writes it.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from torch import nn

from torchgarden.checkpoint import _direct, layout
from torchgarden.checkpoint.errors import (
    CheckpointError,
    CorruptCheckpointError,
    NonFiniteCheckpointError,
)

__all__ = [
    "checkpoints_iterator", "nonfinite_parameter", "read_state", "recorded_step", "select",
]

logger = logging.getLogger("torchgarden")


def recorded_step(state: Mapping[str, Any]) -> int | None:
    """The global step a loaded state records (``state["global_step"]["value"]``), if any."""
    item = state.get("global_step")
    value = item.get("value") if isinstance(item, Mapping) else None
    return value if type(value) is int else None


def nonfinite_parameter(items: Mapping[str, Any], state: Mapping[str, Any]) -> str | None:
    """Names the first model parameter in ``state`` (of ``items``, on any device) holding
    NaN or inf, or returns None. Only the parameters of module items (or of an item
    wrapping one as ``.model``: FSDP's full-state item) count: buffers may hold inf on
    purpose (attention masks)."""
    by_device: dict[torch.device, dict[str, torch.Tensor]] = {}
    for item_name, item in items.items():
        module = _module_of(item)
        saved = state.get(item_name)
        if module is None or not isinstance(saved, Mapping):
            continue
        for name, _ in module.named_parameters():
            value = saved.get(name)
            value = value.to_local() if hasattr(value, "to_local") else value  # DTensor shard
            if isinstance(value, torch.Tensor) and value.is_floating_point() and value.numel():
                by_device.setdefault(value.device, {})[f"{item_name}[{name!r}]"] = value
    for named in by_device.values():
        # A sum is NaN or inf when any element is, and it reads the tensor once without the
        # boolean copy `isfinite` makes (10x faster on a large state: the async save's stall).
        # A finite tensor whose sum overflows is told apart by the exact check below.
        sums = torch.stack([torch.isfinite(tensor.sum()) for tensor in named.values()])
        for (where, tensor), finite in zip(named.items(), sums.tolist()):  # Sync: once a device.
            if not finite and not bool(torch.isfinite(tensor).all()):
                return where
    return None


def _module_of(item: Any) -> nn.Module | None:
    if isinstance(item, nn.Module):
        return item
    wrapped = getattr(item, "model", None)
    if isinstance(wrapped, nn.Module) and not hasattr(item, "optimizer"):
        return wrapped  # distribute.FullModelState
    return None


def select(
    directory: str, name: str, items: Mapping[str, Any], unusable: set[str], *, hashes: bool
) -> tuple[str, dict[str, Any]] | None:
    """The newest resume point in ``directory`` and its loaded state, or None if there is no
    entry. Each newer entry that is not one is named in a warning and added to ``unusable``.

    Raises:
        CorruptCheckpointError: There are entries, but none is a resume point.
    """
    candidates = [path for _, path in reversed(layout.entries(directory, name))
                  if path not in unusable]
    for candidate in candidates:
        if (link := layout.link_problem(candidate)) is not None:
            logger.warning("skipping checkpoint %s: %s", candidate, link)
            unusable.add(candidate)
            continue
        try:
            return candidate, read_state(candidate, items, hashes=hashes, finite=True)
        except CorruptCheckpointError as e:
            logger.warning("skipping corrupt checkpoint %s: %s", candidate, e)
        except NonFiniteCheckpointError as e:
            logger.warning("skipping checkpoint %s: %s", candidate, e)
        unusable.add(candidate)
    if candidates:
        raise CorruptCheckpointError(
            f"all {len(candidates)} checkpoints in {directory!r} failed verification or hold "
            f"non-finite weights (each is named in a warning); move them aside to start over, "
            f"or load one anyway with CheckpointManager.restore(path).")
    return None


def read_state(
    path: str, items: Mapping[str, Any], *, hashes: bool, finite: bool
) -> dict[str, Any]:
    """Checks the manifest (with ``hashes`` the files' sizes and checksums too), loads the
    state (a sharded checkpoint's items as ``dcp.LoadedShards``, read when applied) and
    checks its recorded step and (raising with ``finite``, else warning) its parameters.

    Raises:
        CorruptCheckpointError: A bad manifest or file, or a recorded step not the name's.
        NonFiniteCheckpointError: ``finite`` and a parameter holds NaN or inf.
    """
    meta = layout.read_manifest(path)
    if layout.is_sharded(meta):
        from torchgarden.checkpoint import dcp  # torch.distributed.checkpoint: 0.4 s to import.

        state = dcp.read_state(path, meta, hashes=hashes)
    else:  # With hashes, the files are checked on a second thread while torch.load reads.
        state = _direct.load_state(path, verify_files=hashes)
    step = recorded_step(state)
    if step is not None and step != layout.checkpoint_number(path):
        raise CorruptCheckpointError(
            f"{path!r} records global step {step} but is named for step "
            f"{layout.checkpoint_number(path)}.")
    where = nonfinite_parameter(items, state)
    if where is not None:
        message = f"{where} is NaN or inf; it is not a resume point."
        if finite:
            raise NonFiniteCheckpointError(message)
        logger.warning("restoring %s as asked, although %s", path, message)
    return state


def _is_complete(path: str) -> bool:
    try:
        return layout.problem(path) is None
    except CheckpointError:  # Written by a newer torchgarden.
        return False


def _wait_for_new(
    directory: str, name: str, last_number: int, deadline: float | None, poll_interval: float
) -> tuple[int, str] | None:
    while True:
        found = layout.list_checkpoints(directory, name)
        if found and found[-1][0] > last_number and _is_complete(found[-1][1]):
            return found[-1]
        if deadline is not None and time.monotonic() + poll_interval > deadline:
            return None
        time.sleep(poll_interval)


def checkpoints_iterator(
    directory: str | os.PathLike[str], *, timeout: float | None = None,
    timeout_fn: Callable[[], bool] | None = None, min_interval_secs: float = 0,
    poll_interval: float = 1.0, checkpoint_name: str = "ckpt",
) -> Iterator[str]:
    """Yields the path of each new complete checkpoint as it appears (``tf.train`` semantics).

    Only the newest checkpoint is yielded each time, so a slow consumer skips intermediate
    ones; a checkpoint is yielded once it is renamed into place and its files have the
    sizes meta.json records, never half-written.

    Args:
        directory: The checkpoint directory to follow.
        timeout: Seconds to wait for a new checkpoint before calling ``timeout_fn``;
            None waits forever. Defaults to None.
        timeout_fn: Called on timeout; returning True stops the iterator, False
            keeps waiting. Without it, a timeout stops the iterator. Defaults to None.
        min_interval_secs: The least seconds between two yields. Defaults to 0.
        poll_interval: Seconds between directory scans. Defaults to 1.0.
        checkpoint_name: The checkpoint name prefix. Defaults to ``"ckpt"``.

    Yields:
        Checkpoint directory paths, in increasing number.
    """
    directory = os.fspath(directory)
    last_number = -1
    while True:
        deadline = None if timeout is None else time.monotonic() + timeout
        found = _wait_for_new(directory, checkpoint_name, last_number, deadline, poll_interval)
        if found is None:
            if timeout_fn is not None and not timeout_fn():
                continue
            # The writer may have saved its last checkpoint just after the scan above and
            # then signalled the end: one more scan, so it is never missed.
            found = _wait_for_new(directory, checkpoint_name, last_number, 0.0, 0.0)
            if found is None:
                return
        started = time.monotonic()
        last_number = found[0]
        yield found[1]
        remaining = started + min_interval_secs - time.monotonic()
        if remaining > 0:
            time.sleep(remaining)
