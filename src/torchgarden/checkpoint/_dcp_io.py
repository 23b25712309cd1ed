"""``torch.distributed.checkpoint`` plumbing for the sharded (``dcp``) checkpoint format.

DCP writes every tensor it is given (``DTensor`` shards stay on the rank that holds them)
and pickles every other leaf with ``torch.save``; on load its planners unpickle those
leaves with ``torch.load(weights_only=False)``. The planners here load them with
``weights_only=True`` instead, so a DCP checkpoint is as safe to read as a ``state.pt``.

Three ways of reading, all through DCP's own readers:

* :func:`load_into` fills a template state dict in place, resharding to whatever the
  template's ``DTensor`` layout is (the world size may differ from the writer's);
* :func:`load_full` rebuilds full (unsharded) tensors for some top-level keys in this one
  process, without a template (``torch.distributed.checkpoint.format_utils`` does the same
  to convert to ``torch.save``);
* :func:`host_state` reads the pickled states of the small items rank 0 saved.
"""

from __future__ import annotations

import contextlib
import io
import pickle
import warnings
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint._nested_dict import flatten_state_dict
from torch.distributed.checkpoint._traverse import set_element
from torch.distributed.checkpoint.default_planner import (
    DefaultLoadPlanner,
    _EmptyStateDictLoadPlanner,
)
from torch.distributed.checkpoint.metadata import Metadata, TensorStorageMetadata
from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

from torchgarden.checkpoint import _storage
from torchgarden.checkpoint.errors import (
    CheckpointMismatchError,
    CorruptCheckpointError,
    UnsafeCheckpointError,
)

#: meta.json's ``format`` of a DCP checkpoint (absent or ``"single"``: ``state.pt``).
FORMAT = "dcp"
#: DCP's own index of the checkpoint, written last by its coordinator.
METADATA_FILE = ".metadata"
#: The key of the bytes holding the small items' states (``torch.save`` of a dict).
HOST_KEY = "_host"


@contextlib.contextmanager
def single_process_quietly(alone: bool) -> Iterator[None]:
    """Silences DCP's warning that one process "assumes the intent" of saving alone."""
    if not alone:
        yield
        return
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is (disabled, )?unavail")
        yield


def _unpickle(value: io.BytesIO | bytes, where: str) -> Any:
    buffer = io.BytesIO(value) if isinstance(value, bytes) else value
    try:
        return torch.load(buffer, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        raise UnsafeCheckpointError(
            f"{where} holds pickled Python objects that torch.load(weights_only=True) refuses "
            f"({_storage.unpickling_reason(e)}); load only checkpoints you trust."
        ) from e


class _SafeLoadPlanner(DefaultLoadPlanner):
    """DCP's default load planner with ``weights_only=True`` for non-tensor leaves."""

    def load_bytes(self, read_item: Any, value: io.BytesIO) -> None:
        loaded = _unpickle(value, f"the DCP entry {read_item.dest_index.fqn!r}")
        if self.flatten_state_dict:
            set_element(self.original_state_dict, self.mappings[read_item.dest_index.fqn], loaded)
        else:
            self.state_dict[read_item.dest_index.fqn] = loaded


class _SafeEmptyPlanner(_EmptyStateDictLoadPlanner):
    """DCP's template-free planner with ``weights_only=True`` for non-tensor leaves."""

    load_bytes = _SafeLoadPlanner.load_bytes


def read_metadata(path: str) -> Metadata:
    """DCP's index of the checkpoint at ``path``.

    Raises:
        CorruptCheckpointError: ``.metadata`` is missing or unreadable.
    """
    try:
        return dcp.FileSystemReader(path).read_metadata()
    except Exception as e:
        raise CorruptCheckpointError(
            f"{path!r}: its DCP index {METADATA_FILE} is unreadable ({type(e).__name__}: {e})."
        ) from e


def saved_items(metadata: Metadata) -> set[str]:
    """The top-level names DCP holds tensors or values for (the host key left out)."""
    return {key.split(".", 1)[0] for key in metadata.state_dict_metadata} - {HOST_KEY}


def host_blob(host: Mapping[str, Any]) -> bytes:
    """``torch.save`` of the small items' states (CPU tensors, numbers, strings, lists)."""
    buffer = io.BytesIO()
    torch.save(dict(host), buffer)
    return buffer.getvalue()


def load_full(path: str, keys: Iterable[str] | None = None) -> dict[str, Any]:
    """Reads the entries under top-level ``keys`` (all when None) as full CPU tensors.

    Runs in this process alone (no collective), whatever the world size of the writer.
    """
    state: dict[str, Any] = {}
    planner = _SafeEmptyPlanner(keys=None if keys is None else set(keys))
    # format_utils.dcp_to_torch_save reads the same way: the public dcp.load copies its
    # argument, so an empty dict it fills would never reach the caller.
    _load_state_dict(state, storage_reader=dcp.FileSystemReader(path), planner=planner,
                     no_dist=True)
    return state


def host_state(path: str, metadata: Metadata) -> dict[str, Any]:
    """The small items' states rank 0 saved (``{}`` when there are none)."""
    if HOST_KEY not in metadata.state_dict_metadata:
        return {}
    blob = load_full(path, {HOST_KEY})[HOST_KEY]
    state = _unpickle(blob, f"{path!r} ({HOST_KEY})")
    if not isinstance(state, dict):
        raise CorruptCheckpointError(f"{path!r}: {HOST_KEY} holds a {type(state).__name__}.")
    return state


def check_fits(template: Mapping[str, Any], metadata: Metadata, *, strict: bool) -> None:
    """Checks a template against what the checkpoint holds, before anything is loaded.

    Raises:
        CheckpointMismatchError: Keys are missing (when ``strict``) or tensor shapes differ.
    """
    flat, _ = flatten_state_dict(dict(template))
    saved = metadata.state_dict_metadata
    missing = sorted(key for key in flat if key not in saved) if strict else []
    misshaped = [
        f"{key!r}: checkpoint {tuple(saved[key].size)} vs here {tuple(value.shape)}"
        for key, value in flat.items()
        if key in saved and isinstance(value, torch.Tensor)
        and isinstance(saved[key], TensorStorageMetadata)
        and tuple(saved[key].size) != tuple(value.shape)
    ]
    problems = []
    if missing:
        more = f", ... and {len(missing) - 5} more" if len(missing) > 5 else ""
        problems.append(f"missing from the checkpoint ({len(missing)}): "
                        f"{', '.join(map(repr, missing[:5]))}{more}")
    if misshaped:
        problems.append(f"mis-shaped ({len(misshaped)}): {'; '.join(misshaped[:5])}")
    if problems:
        raise CheckpointMismatchError("; ".join(problems))


def load_into(path: str, template: dict[str, Any], *, strict: bool) -> None:
    """Fills ``template`` in place from the checkpoint (a collective under a process group).

    Every rank passes the same keys; ``DTensor`` entries receive this rank's shard of the
    saved tensor, resharded from however many ranks wrote it.
    """
    alone = not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1)
    with single_process_quietly(alone):
        dcp.load(template, storage_reader=dcp.FileSystemReader(path),
                 planner=_SafeLoadPlanner(allow_partial_load=not strict), no_dist=alone)


def index_layout(state: Any) -> Any:
    """Turns optimizer states kept by parameter name into torch's index-keyed layout.

    ``torch.distributed.checkpoint.state_dict.get_optimizer_state_dict`` keys the state by
    parameter FQN and lists FQNs in ``param_groups``; ``torch.optim.Optimizer`` keys it by
    the parameter's position in its param groups. The position is recovered from the
    groups' order, so a plain optimizer built the same way reads it back. Other values
    (a wrapper's ``"optimizer"`` entry is looked into) are returned as they are.
    """
    if not isinstance(state, Mapping):
        return state
    groups = state.get("param_groups")
    if isinstance(groups, list) and isinstance(state.get("state"), Mapping) and any(
        isinstance(name, str) for group in groups for name in group.get("params", ())
    ):
        order = [name for group in groups for name in group["params"]]
        index = {name: i for i, name in enumerate(order)}
        return {
            **state,
            "state": {index[name]: value for name, value in state["state"].items()},
            "param_groups": [
                {**group, "params": [index[name] for name in group["params"]]}
                for group in groups
            ],
        }
    if isinstance(state.get("optimizer"), Mapping):
        return {**state, "optimizer": index_layout(state["optimizer"])}
    return state
