"""``--format hf``: the library model in Hugging Face layout (``save_pretrained``).

``<output>/hf/`` holds ``config.json`` and ``model.safetensors`` as transformers writes
them, so ``transformers.AutoModelFor*.from_pretrained("<output>/hf")`` loads the model
with neither torchgarden nor PEFT installed. LoRA adapters (``task.model.adapter``) are
merged into the weights first (``merge_adapters``, the default); without merging,
``<output>/hf/`` holds the adapter alone in PEFT's layout (``adapter_config.json`` +
``adapter_model.safetensors``, loaded with ``peft.PeftModel.from_pretrained`` over the
base model).

The export is checked here: the saved directory is loaded back with ``from_pretrained``
and run on the inputs the library model received from the serving module's example
batch; the largest difference of its outputs is recorded in the manifest.
"""

from __future__ import annotations

import copy
import os
from typing import Any

import torch
from torch import nn

from torchgarden.export.errors import ExportError
from torchgarden.models.names import quiet_transformers

__all__ = ["find_library_model", "write_hf"]


def _is_peft(module: nn.Module) -> bool:
    return type(module).__module__.startswith("peft.")


def find_library_model(model: nn.Module) -> nn.Module:
    """The outermost transformers ``PreTrainedModel`` (or PEFT model over one) in ``model``.

    Raises:
        ExportError: ``model`` holds none (naming the closest valid choice).
    """
    for module in model.modules():
        base = module.get_base_model() if _is_peft(module) and hasattr(
            module, "get_base_model") else module
        if type(base).__module__.startswith("transformers.") and hasattr(
                base, "save_pretrained") and hasattr(base, "config"):
            return module
    raise ExportError(
        f"--format hf writes a transformers model, and this run's model is "
        f"{type(model).__name__} without one; train a transformers/<model_type> model "
        "(task.model.name) or export --format safetensors,pt2,onnx.")


def _first_tensor(output: Any) -> torch.Tensor:
    if isinstance(output, torch.Tensor):
        return output
    for name in ("logits", "last_hidden_state"):
        if isinstance(getattr(output, name, None), torch.Tensor):
            return getattr(output, name)
    if isinstance(output, (tuple, list)) and output and isinstance(output[0], torch.Tensor):
        return output[0]
    feature_maps = getattr(output, "feature_maps", None)
    if feature_maps:
        return feature_maps[-1]
    raise TypeError(f"no tensor in the library model's output {type(output).__name__}")


def _captured_call(root: nn.Module, library: nn.Module, example: tuple[torch.Tensor, ...]
                   ) -> tuple[tuple[Any, ...], dict[str, Any], torch.Tensor]:
    """The arguments ``library`` receives while ``root`` runs on ``example``, and its
    output."""
    seen: dict[str, Any] = {}

    def pre(_: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        seen.setdefault("call", (args, kwargs))

    def post(_: nn.Module, __: Any, ___: Any, output: Any) -> None:
        seen.setdefault("output", _first_tensor(output))

    handles = [library.register_forward_pre_hook(pre, with_kwargs=True),
               library.register_forward_hook(post, with_kwargs=True)]
    try:
        with torch.no_grad():
            root(*example)
    finally:
        for handle in handles:
            handle.remove()
    args, kwargs = seen["call"]
    return args, kwargs, seen["output"]


def write_hf(path: str, root: nn.Module, example: tuple[torch.Tensor, ...], *,
             merge_adapters: bool = True) -> dict[str, float]:
    """Saves the library model inside ``root`` to ``path`` and checks it loads back.

    Args:
        path: The directory to create.
        root: The serving module (or the task model) holding the library model.
        example: Inputs of ``root``.
        merge_adapters: Merge LoRA adapters into the weights (a plain transformers
            model); False writes the adapter alone in PEFT's layout. Defaults to True.

    Returns:
        ``{"max_abs_diff": ...}`` between the reloaded model and the library model.
    """
    library = find_library_model(root)
    args, kwargs, expected = _captured_call(root, library, example)
    if _is_peft(library) and merge_adapters:
        saved = copy.deepcopy(library).merge_and_unload()
    else:
        saved = library
    saved.save_pretrained(path, safe_serialization=True)
    reloaded = _reload(path, library)
    reloaded.eval()
    with torch.no_grad():
        actual = _first_tensor(reloaded(*args, **kwargs))
    return {"max_abs_diff": float((actual.double() - expected.double()).abs().max())}


def _reload(path: str, library: nn.Module) -> nn.Module:
    """What a consumer loads: the transformers class's ``from_pretrained``, or PEFT's over
    the base model (a copy without the LoRA layers)."""
    with quiet_transformers():
        if os.path.isfile(os.path.join(path, "adapter_config.json")):
            from peft import PeftModel

            return PeftModel.from_pretrained(copy.deepcopy(library).unload(), path)
        cls = type(library.get_base_model() if _is_peft(library) else library)
        return cls.from_pretrained(path, local_files_only=True)
