"""``load_model_weights``: initialise a model (or some of its modules) from a checkpoint
or pretrained weights (Model Garden's ``init_checkpoint`` / ``init_checkpoint_modules``).

Besides torchgarden checkpoints, every local source of
`torchgarden.models.weights.read_state_dict` is read (``.safetensors``, a sharded
``model.safetensors.index.json``, a Hugging Face model directory)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from torchgarden.checkpoint import _direct, layout
from torchgarden.checkpoint.checkpoint import _key_problems
from torchgarden.checkpoint.errors import CheckpointMismatchError
from torchgarden.distribute.sharding import shard_like
from torchgarden.utils.suggest import did_you_mean

__all__ = ["load_model_weights"]

# Prefixes added by DistributedDataParallel and torch.compile wrappers.
_WRAPPER_PREFIXES = ("module.", "_orig_mod.")


def _resolve(path: str, checkpoint_name: str) -> str:
    from torchgarden.models.weights import is_weights_source

    markers = (layout.STATE_FILE, layout.META_FILE)
    if is_weights_source(path) or os.path.isfile(path) or any(
            os.path.isfile(os.path.join(path, name)) for name in markers):
        return path
    if os.path.isdir(path):
        found = layout.latest_checkpoint(path, checkpoint_name)
        if found:
            return found
        raise FileNotFoundError(
            f"init checkpoint directory {path!r} is neither a torchgarden checkpoint (no "
            f"'{checkpoint_name}-<N>' in it) nor a Hugging Face model directory (config.json "
            "+ model.safetensors).")
    raise FileNotFoundError(f"init checkpoint {path!r} does not exist.")


def _read_weights(resolved: str, item: str, verify: bool) -> Mapping[str, Any]:
    from torchgarden.models.weights import is_weights_source, read_state_dict

    if is_weights_source(resolved):
        return read_state_dict(resolved, key="task.init_checkpoint")
    if not os.path.isdir(resolved):
        state = _direct.load_dict(resolved, f"init checkpoint {resolved!r}", fix=(
            "; point task.init_checkpoint at a ckpt-<N> directory, a model_dir or a .pt file"))
    elif (os.path.isfile(os.path.join(resolved, layout.META_FILE))
          and layout.is_sharded(layout.read_meta(resolved))):
        from torchgarden.checkpoint import dcp  # torch.distributed.checkpoint: only for DCP.

        if verify:
            layout.verify(resolved, check_step=False)
        state = dcp.read_full_state(resolved, [item])  # Only this item's tensors.
    else:
        state = _direct.load_state(resolved, verify_files=verify)
    return state[item] if isinstance(state.get(item), Mapping) else state


def _strip_wrappers(state: Mapping[str, Any], expected: Mapping[str, Any]) -> Mapping[str, Any]:
    for prefix in _WRAPPER_PREFIXES:
        if state and all(k.startswith(prefix) for k in state) and not any(
                k.startswith(prefix) for k in expected):
            state = {k[len(prefix):]: v for k, v in state.items()}
    return state


def _map_prefixes(state: Mapping[str, Any], prefix_map: Mapping[str, str]) -> dict[str, Any]:
    """Renames keys by their longest matching ``from_prefix`` (``""`` matches every key)."""
    ordered = sorted(prefix_map.items(), key=lambda item: -len(item[0]))
    renamed = {}
    for name, value in state.items():
        for old, new in ordered:
            if name.startswith(old):
                name = new + name[len(old):]
                break
        renamed[name] = value
    return renamed


def load_model_weights(
    model: torch.nn.Module, path: str | os.PathLike[str], *, prefixes: Sequence[str] = (),
    item: str = "model", checkpoint_name: str = "ckpt", verify: bool = True,
    prefix_map: Mapping[str, str] | None = None, report: bool = False,
) -> str:
    """Loads model weights from a checkpoint into ``model``, all or by module prefix;
    every requested weight must be in the checkpoint, with the model's shape.

    Example:
        >>> load_model_weights(model, "/runs/pretrain", prefixes=["backbone"])

    Args:
        model: The module to initialise.
        path: A checkpoint directory (``ckpt-<N>``, either format: only the model's tensors
            of a sharded one are read), a directory of checkpoints (the newest is used),
            a ``.pt`` file holding a state dict (or a dict whose ``item`` entry is one), a
            ``.safetensors`` file, a ``model.safetensors.index.json`` or a Hugging Face
            model directory.
            ``module.`` / ``_orig_mod.`` prefixes from DDP or ``torch.compile`` are
            stripped when the model has none.
        prefixes: Module-name prefixes to restore (``"backbone"`` matches
            ``backbone.*``); ``"all"`` restores every weight, as Model Garden's
            ``init_checkpoint_modules: all``. Defaults to ``()``: every weight.
        item: The checkpoint item holding the model weights. Defaults to ``"model"``.
        checkpoint_name: The name prefix when ``path`` is a directory of checkpoints.
            Defaults to ``"ckpt"``.
        verify: Check sizes and checksums of a checkpoint directory. Defaults to True.
        prefix_map: ``{from_prefix: to_prefix}`` renaming the file's keys first
            (``{"": "model."}``: a library state dict under the adapter). Default None.
        report: Print one line of the tensors loaded and skipped. Defaults to False.

    Returns:
        The checkpoint directory or file the weights came from.

    Raises:
        FileNotFoundError: ``path`` holds no checkpoint.
        CheckpointMismatchError: A requested weight is missing or mis-shaped, or a
            prefix matches no module of ``model``.
    """
    resolved = _resolve(os.fspath(path), checkpoint_name)
    expected = model.state_dict()
    state = _strip_wrappers(_read_weights(resolved, item, verify), expected)
    state = _map_prefixes(state, prefix_map) if prefix_map else state
    wanted = _wanted_keys(model, expected, [] if "all" in prefixes else list(prefixes))
    _check_some_match(resolved, model, state, wanted)
    problems = _key_problems({k: expected[k] for k in wanted}, state)
    if problems:
        title = f"init checkpoint {resolved!r} does not fit {type(model).__name__}:"
        raise CheckpointMismatchError("\n  ".join([title, *problems]))
    weights = {k: state[k] for k in wanted}
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        weights = shard_like(weights, expected)  # Full tensors into an FSDP2 model's shards.
    model.load_state_dict(weights, strict=False)
    if report:
        from torchgarden.models.weights import report_loaded

        report_loaded("task.init_checkpoint", resolved, len(weights),
                      [k for k in expected if k not in weights],
                      "outside task.init_checkpoint_modules")
    return resolved


def _module_names(keys: Any, depth: int = 3) -> set[str]:
    """Dotted prefixes of ``keys`` up to ``depth`` parts (``model``, ``model.vit``, ...)."""
    return {".".join(k.split(".")[:n]) for k in keys for n in range(1, depth + 1)}


def _check_some_match(resolved: str, model: torch.nn.Module, state: Mapping[str, Any],
                      wanted: list[str]) -> None:
    """Refuses a file none of whose keys is a wanted weight, naming a prefix map that
    would fit when there is one."""
    if any(k in state for k in wanted):
        return
    fix = _fitting_map(state, wanted, model.state_dict())
    hint = (f"map them with task.init_checkpoint_prefix_map: {fix}" if fix else
            "check that it holds this model's weights, or rename them with "
            "task.init_checkpoint_prefix_map: {<file prefix>: <model prefix>}")
    raise CheckpointMismatchError(
        f"init checkpoint {resolved!r}: none of its {len(state)} tensors matches a weight of "
        f"{type(model).__name__} (missing keys: {', '.join(repr(k) for k in wanted[:3])}; "
        f"the file's: {', '.join(repr(k) for k in list(state)[:3])}); {hint}.")


def _fitting_map(state: Mapping[str, Any], wanted: list[str],
                 expected: Mapping[str, Any]) -> dict[str, str] | None:
    """``{from: to}`` under which every wanted key is in ``state``, most with their
    shapes (a new head may differ), if a single prefix swap does that."""
    for key in wanted:
        for name in state:
            if key.endswith("." + name):
                candidate = {"": key[: -len(name)]}
            elif name.endswith("." + key):
                candidate = {name[: -len(key)]: ""}
            else:
                continue
            mapped = _map_prefixes(state, candidate)
            same = sum(k in mapped and _shape(mapped[k]) == _shape(expected[k]) for k in wanted)
            if all(k in mapped for k in wanted) and 2 * same > len(wanted):
                return candidate
    return None


def _shape(value: Any) -> tuple[int, ...] | None:
    return tuple(value.shape) if hasattr(value, "shape") else None


def _wanted_keys(model: torch.nn.Module, expected: Mapping[str, Any],
                 prefixes: list[str]) -> list[str]:
    """The model's keys under ``prefixes`` (all without); raises on a prefix matching none."""
    unmatched = [p for p in prefixes if not any(k == p or k.startswith(p + ".") for k in expected)]
    if unmatched:
        top_level = sorted({k.split(".")[0] for k in expected})
        raise CheckpointMismatchError(
            f"task.init_checkpoint_modules: prefixes {unmatched} match no weight of "
            f"{type(model).__name__}; its top-level modules: {top_level} (or 'all')"
            f"{did_you_mean(unmatched[0], [*_module_names(expected), 'all'], style='clause')}")
    return [k for k in expected
            if not prefixes or any(k == p or k.startswith(p + ".") for p in prefixes)]
