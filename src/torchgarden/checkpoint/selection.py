"""Which checkpoints may be resumed from: decided by verified content, never by name alone.

A directory ``<name>-<N>`` is a resume point only if

* its ``meta.json`` is a well-formed manifest (every listed file with an integer size and
  a sha256, ``state.pt`` among them, or DCP's ``.metadata`` for the sharded format)
  recording step ``N`` — a renamed or copied checkpoint whose name and step disagree is
  not one;
* its files have the recorded sizes and hashes (:func:`verify`);
* ``state.pt`` records global step ``N`` too, and the model's parameters are finite
  (:func:`nonfinite_parameter`): a checkpoint written after a blow-up is not resumed.
  (A sharded checkpoint's tensors are read only when applied, so its parameters are
  checked when it is saved: :func:`refuse_nonfinite` runs before either format is written.)

Anything else named like a checkpoint (a directory without ``meta.json``, a plain file)
is skipped with one warning by the manager and set aside when its step is saved again.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from torchgarden.checkpoint import _dcp_io, _ranks, _storage, dcp
from torchgarden.checkpoint.errors import (
    CheckpointFormatError,
    CorruptCheckpointError,
    NonFiniteCheckpointError,
)

__all__ = [
    "entries",
    "nonfinite_parameter",
    "problem",
    "read_manifest",
    "read_state",
    "select",
    "set_aside",
    "sizes_match",
    "verify",
]

logger = logging.getLogger("torchgarden")

#: Checksum fields of a manifest entry and their hex forms (sha256: checkpoints before XXH3).
_CHECKSUMS = {"xxh3_128": re.compile(r"^[0-9a-f]{32}$"), "sha256": re.compile(r"^[0-9a-f]{64}$")}


def _has_checksum(info: Mapping[str, Any]) -> bool:
    return any(isinstance(info.get(name), str) and form.match(info[name])
               for name, form in _CHECKSUMS.items())


def entries(directory: str, name: str) -> list[tuple[int, str]]:
    """Every entry named ``<name>-<N>`` (directory or not, complete or not), oldest first."""
    pattern = re.compile(rf"^{re.escape(name)}-(\d+)$")
    try:
        found = [
            (int(match.group(1)), entry.path)
            for entry in os.scandir(directory)
            if (match := pattern.match(entry.name))
        ]
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(found)


def read_manifest(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Reads ``meta.json`` and checks its structure and that its step matches the name.

    Raises:
        CorruptCheckpointError: ``path`` is not a directory, ``meta.json`` is missing,
            unreadable or malformed, or records another step than the name's.
        CheckpointFormatError: The checkpoint was written in a newer format.
    """
    path = os.fspath(path)
    if not os.path.isdir(path):
        raise CorruptCheckpointError(f"{path!r} is not a checkpoint directory.")
    meta = _storage.read_meta(path)
    meta_path = os.path.join(path, _storage.META_FILE)
    kind = meta.get("format", "single")
    if kind not in ("single", _dcp_io.FORMAT):
        raise CheckpointFormatError(
            f"{meta_path!r} records format {kind!r}; this torchgarden reads 'single' and "
            f"'{_dcp_io.FORMAT}': upgrade torchgarden."
        )
    required = _dcp_io.METADATA_FILE if kind == _dcp_io.FORMAT else _storage.STATE_FILE
    files = meta.get("files")
    if not isinstance(files, dict) or required not in files:
        raise CorruptCheckpointError(f"{meta_path!r} does not list {required} under 'files'.")
    for file_name, info in files.items():
        if not isinstance(file_name, str) or os.path.basename(file_name) != file_name:
            raise CorruptCheckpointError(f"{meta_path!r} lists {file_name!r}, not a file name.")
        if not (isinstance(info, dict) and type(info.get("bytes")) is int
                and _has_checksum(info)):
            raise CorruptCheckpointError(
                f"{meta_path!r}: the entry of {file_name!r} needs an integer 'bytes' and a "
                f"hex checksum ('xxh3_128', or 'sha256' in older checkpoints)."
            )
    step = meta.get("step")
    number = _storage.checkpoint_number(path)
    if type(step) is not int or step != number:
        raise CorruptCheckpointError(
            f"{meta_path!r} records step {step!r} but the directory is named for step {number} "
            f"(renamed or copied?); rename it to match its step to use it."
        )
    return meta


def sizes_match(path: str, meta: Mapping[str, Any]) -> bool:
    """Whether every file of a read manifest is present with its recorded size (no hashing)."""
    return all(
        os.path.isfile(os.path.join(path, name))
        and os.path.getsize(os.path.join(path, name)) == info["bytes"]
        for name, info in meta["files"].items()
    )


def verify(path: str | os.PathLike[str]) -> dict[str, Any]:
    """:func:`read_manifest`, then every file's size and sha256; returns the manifest.

    Raises:
        CorruptCheckpointError: As :func:`read_manifest`, or a file is missing, truncated
            or altered.
        CheckpointFormatError: The checkpoint was written in a newer format.
    """
    read_manifest(path)
    return _storage.verify(path)


def recorded_step(state: Mapping[str, Any]) -> int | None:
    """The global step a loaded state records (``state["global_step"]["value"]``), if any."""
    item = state.get("global_step")
    value = item.get("value") if isinstance(item, Mapping) else None
    return value if type(value) is int else None


def nonfinite_parameter(items: Mapping[str, Any], state: Mapping[str, Any]) -> str | None:
    """Names the first model parameter in ``state`` holding NaN or inf, or returns None.

    Only parameters of the checkpoint's modules are checked (an ``nn.Module`` item, or an
    item wrapping one as ``.model`` such as FSDP's full-state item): buffers may hold inf
    on purpose (attention masks).

    Args:
        items: The checkpoint's items by name (``Checkpoint.items``).
        state: A state dict of those items, on any device.
    """
    tensors, names = [], []
    for item_name, item in items.items():
        module = _module_of(item)
        saved = state.get(item_name)
        if module is None or not isinstance(saved, Mapping):
            continue
        for name, _ in module.named_parameters():
            value = saved.get(name)
            value = value.to_local() if hasattr(value, "to_local") else value  # DTensor shard
            if isinstance(value, torch.Tensor) and value.is_floating_point() and value.numel():
                tensors.append(value)
                names.append(f"{item_name}[{name!r}]")
    # A sum is NaN or inf when any element is, and it reads the tensor once without the
    # boolean copy `isfinite` makes (10x faster on a large state: the async save's stall).
    # A finite tensor whose sum overflows is told apart by the exact check below.
    flags = [torch.isfinite(tensor.sum()) for tensor in tensors]
    if not flags:
        return None
    by_device: dict[torch.device, list[int]] = {}
    for index, flag in enumerate(flags):
        by_device.setdefault(flag.device, []).append(index)
    for indices in by_device.values():
        finite = torch.stack([flags[i] for i in indices]).cpu()  # Sync point: once per device.
        for position in (~finite).nonzero().flatten().tolist():
            index = indices[position]
            if not bool(torch.isfinite(tensors[index]).all()):
                return names[index]
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
    """The newest resume point in ``directory`` and its loaded state, or None if none exists.

    Each newer entry that is not a resume point is named in one warning and added to
    ``unusable``.

    Raises:
        CorruptCheckpointError: There are entries, but none is a resume point.
    """
    tried = 0
    for _, candidate in reversed(entries(directory, name)):
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
            f"one anyway with CheckpointManager.restore(path)."
        )
    return None


def read_state(
    path: str, items: Mapping[str, Any], *, hashes: bool, finite: bool
) -> dict[str, Any]:
    """Checks the manifest (and hashes), loads ``state.pt`` and checks its contents.

    Args:
        path: The checkpoint directory.
        items: The checkpoint's items, whose module parameters must be finite.
        hashes: Check sizes and sha256 sums (else only the manifest).
        finite: Raise on non-finite parameters (else only warn).

    A sharded (DCP) checkpoint's hashes are checked by every rank together, and its
    sharded items come as ``dcp.LoadedShards`` that read their tensors when applied.

    Raises:
        CorruptCheckpointError: A bad manifest or file, or a recorded global step that
            disagrees with the name.
        NonFiniteCheckpointError: ``finite`` and a parameter holds NaN or inf.
    """
    meta = read_manifest(path)
    if dcp.is_dcp(meta):
        return dcp.read_state(path, meta, hashes=hashes)
    # With hashes, the files are checked on a second thread while torch.load reads them.
    state = _storage.load_state(path, verify_files=hashes)
    step, number = recorded_step(state), _storage.checkpoint_number(path)
    if step is not None and step != number:
        raise CorruptCheckpointError(
            f"{_storage.STATE_FILE} records global step {step} but the checkpoint is named "
            f"for step {number}."
        )
    where = nonfinite_parameter(items, state)
    if where is not None:
        message = f"{where} is NaN or inf; it is not a resume point."
        if finite:
            raise NonFiniteCheckpointError(message)
        logger.warning("restoring %s as asked, although %s", path, message)
    return state


def problem(path: str) -> str | None:
    """Why an existing entry is no complete checkpoint (manifest and sizes), or None."""
    try:
        meta = read_manifest(path)
    except CorruptCheckpointError as e:
        return str(e)
    return None if sizes_match(path, meta) else "a file has the wrong size"


def set_aside(directory: str, path: str, reason: str | None) -> str:
    """Renames a bad entry to a hidden ``.<name>.corrupt-<random>`` (never listed), kept
    for inspection, and returns the new path.

    Args:
        directory: The checkpoint directory.
        path: The entry.
        reason: Why, for a warning; None when a warning already named the entry.
    """
    aside = os.path.join(directory, f".{os.path.basename(path)}.corrupt-{secrets.token_hex(4)}")
    os.rename(path, aside)
    log = logger.info if reason is None else logger.warning
    log("set %s aside as %s (%s); saving this step afresh.", path, aside, reason or "see above")
    return aside


def refuse_nonfinite(
    items: Mapping[str, Any], state: Mapping[str, Any], name: str,
    latest: Callable[[], str | None], *, collective: bool = False,
) -> None:
    """Raises before a state with non-finite model parameters is saved as ``name``.

    With ``collective`` (a sharded save, every rank calling with its own shards) the ranks'
    findings are gathered, so every rank raises alike.

    Raises:
        NonFiniteCheckpointError: Naming the parameter and the last finite checkpoint.
    """
    where = nonfinite_parameter(items, state)
    if collective:
        where = next((found for found in _ranks.gather(where) if found), None)
    if where is not None:
        last = latest()
        raise NonFiniteCheckpointError(
            f"not saving {name}: {where} is NaN or inf, so training diverged by then; the last "
            f"finite checkpoint {os.path.basename(last) if last else '(none)'} is intact."
        )
