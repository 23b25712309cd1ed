"""The sharded checkpoint format (``checkpoint_format="dcp"``): ``torch.distributed.checkpoint``.

```
<name>-<N>/__<rank>_<i>.distcp   each rank's shards (and a share of the replicated tensors)
<name>-<N>/.metadata             DCP's index: every key, its global shape and its chunks
<name>-<N>/meta.json             torchgarden's manifest: checksum and size of every file, written last
```

Every rank writes its own shards, so no process ever holds the whole state: saving an
FSDP2 model costs each rank its shard, not rank 0 the full model. The directory keeps the
guarantees of the single-file format (``state.pt``): it appears only once every rank has
written and ``meta.json`` lists every file (``_dcp_writer``), a damaged newest checkpoint
is skipped on resume, retention and the best-checkpoint export work alike.

What goes where, item by item (``Checkpoint.items``):

* an item with ``sharded_state_dict()`` / ``load_sharded_state_dict(state)`` (the
  ``torchgarden.distribute`` items of an FSDP2 model, optimizer and EMA) or an
  ``nn.Module``: its tensors, written by the rank that holds them;
* any other item (global step, RNG states, the data position, callbacks): the state rank 0
  holds, pickled into one ``_host`` entry.

Loading reshards: a checkpoint written by 2 ranks resumes at 1, 2 or 4 (DCP reads each
rank's part of every tensor from whichever files hold it), and an item saved sharded is
read in full by an item that has no sharded state (a plain optimizer of one process gets
torch's index-keyed layout back). :func:`read_full_state` gives what a single process
would have saved, and :func:`convert_to_single` writes it as a ``state.pt`` checkpoint.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from torch import nn

from torchgarden.checkpoint import _dcp_io, _ranks, _storage
from torchgarden.checkpoint._background import package_version
from torchgarden.checkpoint._dcp_io import FORMAT, METADATA_FILE
from torchgarden.checkpoint._dcp_writer import DcpWriter
from torchgarden.checkpoint._host import to_host
from torchgarden.checkpoint.errors import (
    CheckpointMismatchError,
    CorruptCheckpointError,
)

__all__ = [
    "FORMAT",
    "METADATA_FILE",
    "DcpWriter",
    "LoadedShards",
    "convert_to_single",
    "is_dcp",
    "read_full_state",
    "read_state",
    "save_state",
]


def is_dcp(meta: Mapping[str, Any]) -> bool:
    """Whether a checkpoint's meta.json describes the sharded (DCP) format."""
    return meta.get("format") == FORMAT


class _ModuleShards:
    """A plain ``nn.Module`` seen as a sharded item: its ``state_dict()`` tensors."""

    def __init__(self, module: nn.Module) -> None:
        self.module = module

    def sharded_state_dict(self) -> dict[str, Any]:
        return self.module.state_dict()

    def load_sharded_state_dict(self, state: Mapping[str, Any], strict: bool = True) -> None:
        self.module.load_state_dict(state, strict=strict)


def _sharded_view(item: Any) -> Any:
    """The item as something with a sharded state, or None (a host item)."""
    if callable(getattr(item, "sharded_state_dict", None)):
        return item
    if isinstance(item, nn.Module):
        return _ModuleShards(item)
    return None


def save_state(items: Mapping[str, Any]) -> dict[str, Any]:
    """This rank's part of a DCP checkpoint of ``items`` (every rank calls it).

    Sharded items give their ``sharded_state_dict()``; the others' ``state_dict()`` is
    taken on every rank (it may be a collective, e.g. a per-rank data position) and rank
    0's is pickled under ``_host``.
    """
    rank = _ranks.process_rank()[0]
    state: dict[str, Any] = {}
    host: dict[str, Any] = {}
    for name, item in items.items():
        view = _sharded_view(item)
        if view is not None:
            state[name] = view.sharded_state_dict()
        else:
            host[name] = item.state_dict()
    if rank == 0:
        state[_dcp_io.HOST_KEY] = _dcp_io.host_blob(to_host(host, copy=True))
    return state


def verify_files(path: str, meta: Mapping[str, Any]) -> None:
    """Checks sizes and checksums, each rank a share of the files; raises on every rank.

    Raises:
        CorruptCheckpointError: A file is missing, truncated or altered.
    """
    rank, world_size = _ranks.process_rank()
    names = sorted(meta["files"])
    problem = None
    for name in names[rank::world_size]:
        file_path = os.path.join(path, name)
        info = meta["files"][name]
        if not os.path.isfile(file_path):
            problem = f"{file_path!r} is missing."
        elif os.path.getsize(file_path) != info["bytes"]:
            problem = (f"{file_path!r} has {os.path.getsize(file_path)} bytes but "
                       f"{_storage.META_FILE} records {info['bytes']} (truncated or altered).")
        else:
            algorithm = next((a for a in _storage._DIGESTS if a in info), None)
            if algorithm is None or _storage._file_digest(file_path, algorithm) != info[algorithm]:
                problem = (f"{file_path!r} does not match its checksum in {_storage.META_FILE} "
                           "(altered).")
        if problem:
            break
    problems = [p for p in _ranks.gather(problem) if p]
    if problems:
        raise CorruptCheckpointError(problems[0])


class LoadedShards:
    """A sharded item's entry in a DCP checkpoint, read when it is applied to the item.

    ``Checkpoint.load_state_dict`` calls :meth:`apply_to` (a collective for sharded items:
    every rank applies the same items in the same order).

    Args:
        path: The checkpoint directory.
        name: The item's name (its top-level key in the checkpoint).
        metadata: DCP's index of the checkpoint.
    """

    def __init__(self, path: str, name: str, metadata: Any) -> None:
        self.path, self.name, self.metadata = path, name, metadata

    def apply_to(self, item: Any, *, strict: bool = True) -> None:
        """Loads the entry into ``item``: resharded into its template when it has a
        sharded state, else in full through its ``load_state_dict``.

        Raises:
            CheckpointMismatchError: The item's keys or shapes differ from the checkpoint's.
        """
        view = _sharded_view(item)
        if view is None:
            full = _dcp_io.load_full(self.path, {self.name})[self.name]
            item.load_state_dict(_dcp_io.index_layout(full))
            return
        template = {self.name: view.sharded_state_dict()}
        try:
            _dcp_io.check_fits(template, self.metadata, strict=strict)
        except CheckpointMismatchError as e:
            message = f"item {self.name!r} ({type(item).__name__}) does not match {self.path}: {e}"
            keep_fresh = getattr(item, "sharded_mismatch", None)
            if callable(keep_fresh):  # The item may start afresh instead (another optimizer).
                keep_fresh(message)
                return
            raise CheckpointMismatchError(message) from None
        _dcp_io.load_into(self.path, template, strict=strict)
        if isinstance(view, _ModuleShards):
            view.load_sharded_state_dict(template[self.name], strict=strict)
        else:
            view.load_sharded_state_dict(template[self.name])

    def __repr__(self) -> str:
        return f"LoadedShards({self.path!r}, {self.name!r})"


def read_state(path: str, meta: Mapping[str, Any], *, hashes: bool) -> dict[str, Any]:
    """What ``Checkpoint.load_state_dict`` restores from a DCP checkpoint.

    Host items' states are read now (with the recorded global step checked against the
    name); sharded items come as :class:`LoadedShards`, read when applied. Every rank calls
    it: the hashes are checked by all ranks together.

    Raises:
        CorruptCheckpointError: A damaged file, an unreadable index, or a recorded global
            step other than the name's.
    """
    if hashes:
        verify_files(path, meta)
    metadata = _dcp_io.read_metadata(path)
    state: dict[str, Any] = _dcp_io.host_state(path, metadata)
    for name in _dcp_io.saved_items(metadata):
        state[name] = LoadedShards(path, name, metadata)
    item = state.get("global_step")
    step = item.get("value") if isinstance(item, Mapping) else None
    number = _storage.checkpoint_number(path)
    if type(step) is int and step != number:
        raise CorruptCheckpointError(
            f"{path!r} records global step {step} but is named for step {number}."
        )
    return state


def read_full_state(path: str | os.PathLike[str], items: Any = None) -> dict[str, Any]:
    """The whole state of a checkpoint (either format) as one process would have saved it.

    Runs in this process alone: every tensor is read in full onto the CPU, and optimizer
    states kept by parameter name come back in torch's index-keyed layout.

    Args:
        path: A checkpoint directory.
        items: Top-level item names to read (e.g. ``["model"]``); None reads all.
    """
    path = os.fspath(path)
    meta = _storage.read_meta(path)
    if not is_dcp(meta):
        state = _storage.load_state(path)
        return state if items is None else {k: v for k, v in state.items() if k in items}
    metadata = _dcp_io.read_metadata(path)
    wanted = _dcp_io.saved_items(metadata) if items is None else set(items)
    host = _dcp_io.host_state(path, metadata)
    sharded = _dcp_io.load_full(path, wanted & _dcp_io.saved_items(metadata))
    state = {k: v for k, v in host.items() if items is None or k in wanted}
    state.update({k: _dcp_io.index_layout(v) for k, v in sharded.items()})
    return state


def convert_to_single(path: str | os.PathLike[str], output_dir: str | os.PathLike[str]) -> str:
    """Writes a DCP checkpoint as a single-file (``state.pt``) checkpoint and returns its path.

    The result ``<output_dir>/<name>-<N>/`` is what one process would have saved at that
    step (same items, torch's optimizer layout, a verified manifest), for export,
    inspection with ``torch.load``, or training on without DCP. The source is verified
    first. Runs in one process; it needs memory for the whole state.

    Raises:
        CorruptCheckpointError: The source fails verification.
        FileExistsError: ``<output_dir>/<name>-<N>`` exists already.
    """
    path = os.fspath(path)
    meta = _storage.verify(path)
    if not is_dcp(meta):
        raise ValueError(f"{path!r} is a single-file checkpoint already ({_storage.STATE_FILE}).")
    name = os.path.basename(os.path.normpath(path)).rsplit("-", 1)[0]
    number = _storage.checkpoint_number(path)
    target = os.path.join(os.fspath(output_dir), f"{name}-{number}")
    if os.path.lexists(target):
        raise FileExistsError(f"{target!r} exists already; choose another output directory.")
    extra = {**(meta.get("extra") or {}), "converted_from": path}
    return _storage.write_checkpoint(
        os.fspath(output_dir), name, number, read_full_state(path),
        config=meta.get("config"), extra=extra, version=package_version())
