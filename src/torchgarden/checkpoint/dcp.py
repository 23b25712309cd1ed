"""The sharded checkpoint format (``checkpoint_format="dcp"``): ``torch.distributed.checkpoint``.

An item with ``sharded_state_dict()`` / ``load_sharded_state_dict(state)`` (the FSDP2 items
of ``torchgarden.distribute``) or an ``nn.Module`` is written by the ranks that hold its
tensors; any other item is rank 0's state pickled into one ``_host`` entry. Loading
reshards to any world size, or reads an item in full where it has no sharded state. The
planners here unpickle non-tensor leaves with ``weights_only=True`` (DCP's own do not).
"""

from __future__ import annotations

import contextlib
import io
import os
import warnings
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint._nested_dict import flatten_state_dict
from torch.distributed.checkpoint._traverse import set_element
from torch.distributed.checkpoint.default_planner import (
    DefaultLoadPlanner,
    _EmptyStateDictLoadPlanner,
)
from torch.distributed.checkpoint.metadata import Metadata, TensorStorageMetadata
from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

from torchgarden.checkpoint import _direct, layout
from torchgarden.checkpoint._host import to_host
from torchgarden.checkpoint.checkpoint import _key_problems
from torchgarden.checkpoint.errors import CheckpointMismatchError, CorruptCheckpointError
from torchgarden.distribute.collectives import all_gather_object, get_rank, get_world_size

__all__ = ["LoadedShards", "convert_to_single", "read_full_state", "read_state", "save_state"]

HOST_KEY = "_host"  # The bytes of the other items' states (``torch.save`` of a dict).


@contextlib.contextmanager
def quiet_if(alone: bool) -> Iterator[None]:
    """Silences DCP's warning that one process "assumes the intent" of saving alone."""
    with warnings.catch_warnings():
        if alone:
            warnings.filterwarnings("ignore", message="torch.distributed is (disabled, )?unavail")
        yield


class _SafeLoadPlanner(DefaultLoadPlanner):
    """DCP's default load planner with ``weights_only=True`` for non-tensor leaves."""

    def load_bytes(self, read_item: Any, value: io.BytesIO) -> None:
        loaded = _direct.safe_load(value, f"the DCP entry {read_item.dest_index.fqn!r}")
        if self.flatten_state_dict:
            set_element(self.original_state_dict, self.mappings[read_item.dest_index.fqn], loaded)
        else:
            self.state_dict[read_item.dest_index.fqn] = loaded


class _SafeEmptyPlanner(_EmptyStateDictLoadPlanner):
    """DCP's template-free planner with ``weights_only=True`` for non-tensor leaves."""

    load_bytes = _SafeLoadPlanner.load_bytes


def _read_metadata(path: str) -> Metadata:
    try:
        return dcp.FileSystemReader(path).read_metadata()
    except Exception as e:
        raise CorruptCheckpointError(f"{path!r}: its DCP index {layout.METADATA_FILE} is "
                                     f"unreadable ({type(e).__name__}: {e}).") from e


def _saved_items(metadata: Metadata) -> set[str]:  # The items saved sharded.
    return {key.split(".", 1)[0] for key in metadata.state_dict_metadata} - {HOST_KEY}


def _load_full(path: str, keys: Iterable[str]) -> dict[str, Any]:
    """The entries under top-level ``keys`` as full CPU tensors, read by this process alone."""
    state: dict[str, Any] = {}
    # format_utils.dcp_to_torch_save reads the same way: the public dcp.load copies its
    # argument, so an empty dict it fills would never reach the caller.
    _load_state_dict(state, storage_reader=dcp.FileSystemReader(path),
                     planner=_SafeEmptyPlanner(keys=set(keys)), no_dist=True)
    return state


def _host_state(path: str, metadata: Metadata) -> dict[str, Any]:
    if HOST_KEY not in metadata.state_dict_metadata:
        return {}
    blob = _load_full(path, {HOST_KEY})[HOST_KEY]
    return _direct.load_dict(io.BytesIO(blob), f"{path!r} ({HOST_KEY})")


def index_layout(state: Any) -> Any:
    """Turns an optimizer state keyed by parameter name (``get_optimizer_state_dict``) into
    torch's layout, keyed by position in the param groups (also a wrapper's ``"optimizer"``
    entry); returns other values as they are."""
    if not isinstance(state, Mapping):
        return state
    groups = state.get("param_groups")
    if isinstance(groups, list) and isinstance(state.get("state"), Mapping):
        index = {name: i for i, name in enumerate(n for g in groups for n in g.get("params", ()))}
        if any(isinstance(name, str) for name in index):
            return {**state, "state": {index[n]: value for n, value in state["state"].items()},
                    "param_groups": [{**g, "params": [index[n] for n in g["params"]]}
                                     for g in groups]}
    if isinstance(state.get("optimizer"), Mapping):
        return {**state, "optimizer": index_layout(state["optimizer"])}
    return state


def _shards(item: Any) -> Any:
    """The item's sharded state (a module's ``state_dict()``), or None for a host item."""
    if callable(getattr(item, "sharded_state_dict", None)):
        return item.sharded_state_dict()
    return item.state_dict() if isinstance(item, nn.Module) else None


def save_state(items: Mapping[str, Any]) -> dict[str, Any]:
    """This rank's part of a DCP checkpoint of ``items``: the sharded states, and rank 0's
    states of the other items (taken on every rank: one may be a collective) under ``_host``."""
    state: dict[str, Any] = {}
    host: dict[str, Any] = {}
    for name, item in items.items():
        shards = _shards(item)
        if shards is not None:
            state[name] = shards
        else:
            host[name] = item.state_dict()
    if get_rank() == 0:
        buffer = io.BytesIO()
        torch.save(to_host(host, copy=True), buffer)
        state[HOST_KEY] = buffer.getvalue()
    return state


class LoadedShards:
    """Item ``name``'s entry in the DCP checkpoint at ``path``, read when
    ``Checkpoint.load_state_dict`` calls :meth:`apply_to` (a collective for sharded items)."""

    def __init__(self, path: str, name: str, metadata: Any) -> None:
        self.path, self.name, self.metadata = path, name, metadata

    def apply_to(self, item: Any, *, strict: bool = True) -> None:
        """Loads the entry into ``item``: resharded into its sharded state, else in full;
        raises ``CheckpointMismatchError`` on other keys or shapes."""
        shards = _shards(item)
        if shards is None:
            item.load_state_dict(index_layout(_load_full(self.path, {self.name})[self.name]))
            return
        template = {self.name: shards}
        saved = {key: entry.size if isinstance(entry, TensorStorageMetadata) else None
                 for key, entry in self.metadata.state_dict_metadata.items()}
        problems = _key_problems(flatten_state_dict(template)[0], saved, missing=strict)
        if problems:
            message = (f"item {self.name!r} ({type(item).__name__}) does not match {self.path}: "
                       f"{'; '.join(problems)}")
            keep_fresh = getattr(item, "sharded_mismatch", None)
            if callable(keep_fresh):  # The item may start afresh instead (another optimizer).
                keep_fresh(message)
                return
            raise CheckpointMismatchError(message)
        # Every rank passes the same keys; DTensor entries receive this rank's shard of the
        # saved tensor, resharded from however many ranks wrote it.
        alone = get_world_size() == 1
        with quiet_if(alone):
            dcp.load(template, storage_reader=dcp.FileSystemReader(self.path),
                     planner=_SafeLoadPlanner(allow_partial_load=not strict), no_dist=alone)
        if callable(getattr(item, "load_sharded_state_dict", None)):
            item.load_sharded_state_dict(template[self.name])
        else:
            item.load_state_dict(template[self.name], strict=strict)

    def __repr__(self) -> str:
        return f"LoadedShards({self.path!r}, {self.name!r})"


def read_state(path: str, meta: Mapping[str, Any], *, hashes: bool) -> dict[str, Any]:
    """What ``Checkpoint.load_state_dict`` restores from a DCP checkpoint: host items'
    states and :class:`LoadedShards`. With ``hashes`` every rank checks a share of the
    files; a damaged one raises ``CorruptCheckpointError`` on every rank."""
    if hashes:
        problem = layout.file_problem(path, meta, share=(get_rank(), get_world_size()))
        problem = next((found for found in all_gather_object(problem) if found), None)
        if problem is not None:
            raise CorruptCheckpointError(problem)
    metadata = _read_metadata(path)
    shards = {name: LoadedShards(path, name, metadata) for name in _saved_items(metadata)}
    return {**_host_state(path, metadata), **shards}


def read_full_state(path: str | os.PathLike[str], items: Any = None) -> dict[str, Any]:
    """The whole state of a checkpoint (either format) as one process would have saved it.

    Runs in this process alone: every tensor is read in full onto the CPU, and optimizer
    states kept by parameter name come back in torch's index-keyed layout.

    Args:
        path: A checkpoint directory.
        items: Top-level item names to read (e.g. ``["model"]``); None reads all.
    """
    path = os.fspath(path)
    if not layout.is_sharded(layout.read_meta(path)):
        state = _direct.load_state(path)
    else:
        metadata = _read_metadata(path)
        sharded = {k for k in _saved_items(metadata) if items is None or k in items}
        state = _host_state(path, metadata)
        state.update((k, index_layout(v)) for k, v in _load_full(path, sharded).items())
    return state if items is None else {k: v for k, v in state.items() if k in items}


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
    meta = layout.verify(path, check_step=False)
    if not layout.is_sharded(meta):
        raise ValueError(f"{path!r} is a single-file checkpoint already ({layout.STATE_FILE}).")
    name = os.path.basename(os.path.normpath(path)).rsplit("-", 1)[0]
    number = layout.checkpoint_number(path)
    target = layout.checkpoint_path(os.fspath(output_dir), name, number)
    if os.path.lexists(target):
        raise FileExistsError(f"{target!r} exists already; choose another output directory.")
    extra = {**(meta.get("extra") or {}), "converted_from": path}
    return _direct.write_checkpoint(
        os.fspath(output_dir), name, number, read_full_state(path),
        config=meta.get("config"), extra=extra, version=layout.package_version())
