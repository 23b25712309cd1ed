"""Which checkpoints may be resumed from: decided by verified content, never by name alone.

``<name>-<N>`` is a resume point only if it verifies (``layout.verify``), its state records
global step ``N`` too, and the model's parameters are finite: a checkpoint written after a
blow-up is not resumed. (A sharded checkpoint's tensors are read only when applied, so
:func:`refuse_nonfinite` checks them before either format is written.)
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from torchgarden.checkpoint import _direct, dcp, layout
from torchgarden.checkpoint.errors import CorruptCheckpointError, NonFiniteCheckpointError
from torchgarden.distribute.collectives import all_gather_object

__all__ = ["nonfinite_parameter", "read_state", "recorded_step", "refuse_nonfinite", "select"]

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
    tried = 0
    for _, candidate in reversed(layout.entries(directory, name)):
        if candidate in unusable:
            continue
        tried += 1
        try:
            return candidate, read_state(candidate, items, hashes=hashes, finite=True)
        except CorruptCheckpointError as e:
            logger.warning("skipping corrupt checkpoint %s: %s", candidate, e)
        except NonFiniteCheckpointError as e:
            logger.warning("skipping checkpoint %s: %s", candidate, e)
        unusable.add(candidate)
    if tried:
        raise CorruptCheckpointError(
            f"all {tried} checkpoints in {directory!r} failed verification or hold non-finite "
            f"weights (each is named in a warning); move them aside to start over, or load "
            f"one anyway with CheckpointManager.restore(path).")
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


def refuse_nonfinite(
    items: Mapping[str, Any], state: Mapping[str, Any], name: str,
    latest: Callable[[], str | None], *, collective: bool = False,
) -> None:
    """Raises ``NonFiniteCheckpointError`` (naming the parameter and the last finite
    checkpoint) before a state with non-finite model parameters is saved as ``name``. With
    ``collective`` (every rank calls it with its own shards) every rank raises alike."""
    where = nonfinite_parameter(items, state)
    if collective:
        where = next((found for found in all_gather_object(where) if found), None)
    if where is not None:
        last = latest()
        raise NonFiniteCheckpointError(
            f"not saving {name}: {where} is NaN or inf, so training diverged by then; the last "
            f"finite checkpoint {os.path.basename(last) if last else '(none)'} is intact.")
