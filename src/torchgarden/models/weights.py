"""``load_pretrained``: a library model's weights from a local file (no hub, no network).

``.safetensors`` files are read with ``safetensors`` (what ``save_pretrained`` writes);
anything else with ``torch.load(weights_only=True)`` (a state dict, such as
``pytorch_model.bin``, or a dict holding one under ``state_dict`` / ``model``).
"""

from __future__ import annotations

import importlib
import os
import pickle
from collections.abc import Mapping

import torch
from torch import nn

__all__ = ["load_pretrained", "read_state_dict"]


def read_state_dict(path: str, *, key: str = "task.model.pretrained_path") -> dict[str, torch.Tensor]:
    """Reads a state dict from ``path`` on the CPU.

    Raises:
        FileNotFoundError: ``path`` is not a file.
        ValueError: The file holds no tensor mapping, or pickled objects.
    """
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{key}={path!r} is not a file; point it at a local "
                                ".safetensors or state-dict (.pt, .bin) file.")
    if path.endswith(".safetensors"):
        try:
            safetensors_torch = importlib.import_module("safetensors.torch")
        except ImportError as e:
            raise ImportError(f"{key}={path!r} needs safetensors: pip install safetensors."
                              ) from e
        return dict(safetensors_torch.load_file(path, device="cpu"))
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        raise ValueError(f"{key}={path!r} holds pickled Python objects that "
                         "torch.load(weights_only=True) refuses; save a plain state dict "
                         "(or .safetensors).") from e
    for nested in ("state_dict", "model"):
        if isinstance(state, Mapping) and isinstance(state.get(nested), Mapping):
            state = state[nested]
    if not isinstance(state, Mapping) or not all(
            isinstance(v, torch.Tensor) for v in state.values()):
        raise ValueError(f"{key}={path!r} holds no state dict (a mapping of names to "
                         "tensors).")
    return dict(state)


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

    Args:
        model: The freshly built library model.
        path: A ``.safetensors`` or state-dict file.
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
    return mismatched
