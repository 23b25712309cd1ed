"""Pretrained weights from local files (no hub, no network): every source one reader.

:func:`read_state_dict` reads

* a ``.safetensors`` file (what ``save_pretrained`` writes);
* a sharded safetensors set, named by its ``model.safetensors.index.json``;
* a state-dict file (``pytorch_model.bin``, ``.pt``; a dict holding one under
  ``state_dict`` / ``model`` too), read with ``torch.load(weights_only=True)``, so a pickle
  of Python objects is refused;
* a local Hugging Face model directory (``config.json`` beside one of the above, as
  ``save_pretrained`` writes it); its ``config.json`` is read by :func:`hf_model_config`.

torchgarden's own checkpoints are read by `torchgarden.checkpoint.load_model_weights`,
which hands every other source to this module.
"""

from __future__ import annotations

import importlib
import json
import os
import pickle
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

__all__ = ["hf_model_config", "is_weights_source", "load_pretrained", "read_state_dict"]

#: Weight files of a Hugging Face model directory, in the order transformers looks.
HF_WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                   "pytorch_model.bin.index.json")
# config.json keys that describe the file, not the architecture.
_BOOKKEEPING = ("architectures", "transformers_version", "torch_dtype", "dtype", "id2label",
                "label2id", "_name_or_path", "auto_map")
_EXPECTED = ("a .safetensors file, a model.safetensors.index.json, a state-dict file (.pt, "
             ".bin) or a Hugging Face model directory (config.json + model.safetensors)")


def is_weights_source(path: str) -> bool:
    """Whether ``path`` is a file or directory this module reads (not a torchgarden
    checkpoint): a ``.safetensors`` / ``.index.json`` file or a directory holding one of
    ``HF_WEIGHT_FILES``."""
    if os.path.isfile(path):
        return path.endswith((".safetensors", ".index.json"))
    return os.path.isdir(path) and any(
        os.path.isfile(os.path.join(path, name)) for name in HF_WEIGHT_FILES)


def hf_model_config(path: str, *, key: str = "task.model.pretrained_path") -> dict[str, Any]:
    """The architecture keywords of a Hugging Face model directory's ``config.json``.

    Returns:
        The config's keys (``model_type`` included) without the file's bookkeeping
        (``architectures``, label maps, versions); {} when ``path`` is not a directory
        with a ``config.json``.

    Raises:
        ValueError: ``config.json`` is not a JSON object with a ``model_type``.
    """
    file = os.path.join(path, "config.json")
    if not os.path.isfile(file):
        return {}
    try:
        with open(file, encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, ValueError) as e:
        raise ValueError(f"{key}={path!r}: config.json is not readable JSON ({e}).") from e
    if not isinstance(config, dict) or not config.get("model_type"):
        raise ValueError(f"{key}={path!r}: config.json names no model_type; it is not a "
                         "transformers model directory (save it with save_pretrained).")
    return {k: v for k, v in config.items() if k not in _BOOKKEEPING}


def _weights_file(path: str, key: str) -> str:
    """The weights file of a directory, or ``path`` itself."""
    if not os.path.isdir(path):
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{key}={path!r} does not exist; point it at {_EXPECTED}.")
        return path
    for name in HF_WEIGHT_FILES:
        if os.path.isfile(os.path.join(path, name)):
            return os.path.join(path, name)
    raise ValueError(f"{key}={path!r} is a directory that is neither a torchgarden checkpoint "
                     f"nor a Hugging Face model; expected {_EXPECTED}.")


def _load_safetensors(path: str, key: str) -> dict[str, torch.Tensor]:
    try:
        safetensors_torch = importlib.import_module("safetensors.torch")
    except ImportError as e:
        raise ImportError(f"{key}={path!r} needs safetensors: pip install safetensors.") from e
    return dict(safetensors_torch.load_file(path, device="cpu"))


def _load_sharded(index_file: str, key: str) -> dict[str, torch.Tensor]:
    """Every shard named by an ``*.index.json`` (``{"weight_map": {name: shard}}``)."""
    try:
        with open(index_file, encoding="utf-8") as f:
            weight_map = json.load(f)["weight_map"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{key}={index_file!r} is not a shard index (a JSON object with a "
                         f"weight_map): {e}.") from e
    folder, state = os.path.dirname(index_file), {}
    for shard in sorted(set(weight_map.values())):
        shard_path = os.path.join(folder, shard)
        if not os.path.isfile(shard_path):
            raise FileNotFoundError(f"{key}={index_file!r} names shard {shard!r}, which is "
                                    "missing beside it.")
        state.update(_read_file(shard_path, key))
    return state


def _read_file(path: str, key: str) -> dict[str, torch.Tensor]:
    if path.endswith(".index.json"):
        return _load_sharded(path, key)
    if path.endswith(".safetensors"):
        return _load_safetensors(path, key)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        raise ValueError(f"{key}={path!r} holds pickled Python objects that "
                         "torch.load(weights_only=True) refuses; save a plain state dict "
                         "(or .safetensors).") from e
    except (RuntimeError, EOFError) as e:
        raise ValueError(f"{key}={path!r} is not a readable state-dict file "
                         f"({str(e).splitlines()[0][:120]}); expected {_EXPECTED}.") from e
    for nested in ("state_dict", "model"):
        if isinstance(state, Mapping) and isinstance(state.get(nested), Mapping):
            state = state[nested]
    if not isinstance(state, Mapping) or not all(
            isinstance(v, torch.Tensor) for v in state.values()):
        raise ValueError(f"{key}={path!r} holds no state dict (a mapping of names to "
                         "tensors).")
    return dict(state)


def _read_transformers_directory(path: str, key: str) -> dict[str, torch.Tensor]:
    """The state dict of the model a ``save_pretrained`` directory holds, loaded by
    transformers itself: it renames the keys it saved under (transformers 5 writes
    legacy names) to the module's own."""
    from torchgarden.models.names import quiet_transformers, require_library

    transformers = require_library("transformers")
    config = transformers.AutoConfig.from_pretrained(path, local_files_only=True)
    architecture = (getattr(config, "architectures", None) or [""])[0]
    cls = getattr(transformers, architecture, None) or transformers.AutoModel
    try:
        with quiet_transformers():
            return dict(cls.from_pretrained(path, local_files_only=True).state_dict())
    except (OSError, ValueError, RuntimeError) as e:
        raise ValueError(f"{key}={path!r}: transformers cannot load this model directory "
                         f"({str(e).splitlines()[0][:160]}).") from e


def read_state_dict(path: str, *, key: str = "task.model.pretrained_path"
                    ) -> dict[str, torch.Tensor]:
    """Reads a state dict on the CPU from any source of the module docstring.

    A Hugging Face model directory is loaded by transformers, so the keys are those of
    the model class in memory (what ``model.state_dict()`` names), not the file's.

    Raises:
        FileNotFoundError: ``path`` (or a shard it names) does not exist.
        ValueError: A directory that is no model, a file without a tensor mapping, or
            pickled objects.
    """
    path = os.fspath(path)
    if hf_model_config(path, key=key):
        return _read_transformers_directory(path, key)
    return _read_file(_weights_file(path, key), key)


def _tied_alias_present(name: str, own: Mapping[str, torch.Tensor],
                        state: Mapping[str, torch.Tensor]) -> bool:
    """True when ``name`` shares its storage with a weight ``state`` holds (tied
    embeddings, which ``save_pretrained`` writes once)."""
    pointer = own[name].data_ptr()
    return any(other in state and own[other].data_ptr() == pointer
               for other in own if other != name)


def load_pretrained(model: nn.Module, path: str, *, ignore_mismatched_sizes: bool = False,
                    key: str = "task.model.pretrained_path") -> list[str]:
    """Loads the weights in ``path`` into ``model`` (every weight of ``model`` required).

    Prints one line: the tensors loaded and those skipped (mismatched sizes).

    Args:
        model: The freshly built library model.
        path: Any source of :func:`read_state_dict`.
        ignore_mismatched_sizes: Keep the model's own initialisation for weights whose
            shape differs (a new classifier head, say) instead of failing. Defaults to
            False.
        key: The config key named in errors.

    Returns:
        The names of the weights left at their initialisation (mismatched sizes).

    Raises:
        ValueError: Missing or unexpected weights, or shape mismatches (unless ignored).
    """
    state = read_state_dict(path, key=key)
    own = model.state_dict()
    mismatched = sorted(k for k, v in state.items()
                        if k in own and tuple(v.shape) != tuple(own[k].shape))
    if mismatched and not ignore_mismatched_sizes:
        shown = ", ".join(f"{k} {tuple(state[k].shape)} vs {tuple(own[k].shape)}"
                          for k in mismatched[:3])
        raise ValueError(f"{key}={path!r}: {len(mismatched)} weights differ in shape ({shown}); "
                         "fix the model sizes or set task.model.ignore_mismatched_sizes=true.")
    for name in mismatched:
        state.pop(name)
    missing = sorted(k for k in set(own) - set(state) - set(mismatched)
                     if not _tied_alias_present(k, own, state))
    unexpected = sorted(set(state) - set(own))
    if missing or unexpected:
        raise ValueError(
            f"{key}={path!r} does not fit the model: missing {missing[:3]} "
            f"({len(missing)} in all), unexpected {unexpected[:3]} ({len(unexpected)} in all); "
            "check task.model.name and its library_config.")
    model.load_state_dict(state, strict=False)
    report_loaded(key, path, len(state), mismatched, "shape differs")
    return mismatched


def report_loaded(key: str, path: str, loaded: int, skipped: list[str], why: str) -> None:
    """Prints the one line of a load (on the first process only)."""
    if torch.distributed.is_available() and torch.distributed.is_initialized() \
            and torch.distributed.get_rank() != 0:
        return
    names = f" ({', '.join(skipped[:4])}{', ...' if len(skipped) > 4 else ''}: {why})" \
        if skipped else ""
    print(f"torchgarden: {key}: loaded {loaded} tensors from {path}, skipped "
          f"{len(skipped)}{names}", flush=True)
