"""LoRA adapters through PEFT (``task.model.adapter``; the ``peft`` extra, imported lazily).

:func:`adapt_model` puts PEFT's LoRA layers into a task's model: over the transformers
model of a library model (``model.model`` becomes a ``peft.PeftModel``, so
``save_pretrained`` writes PEFT's own layout), or over a built-in model as a whole.
PEFT freezes everything but the adapters and ``modules_to_save``.

What a checkpoint holds: when the base weights are read again at every build (from
``task.model.pretrained_path``), only the trained tensors (:class:`TrainedState`);
otherwise (random or ``task.init_checkpoint`` base weights, which a resumed run does not
reload) the whole model. One line says which, with the sizes.
"""

from __future__ import annotations

import importlib
from typing import Any

import torch
from torch import nn

from torchgarden.utils.suggest import did_you_mean

__all__ = ["TrainedState", "adapt_model", "merge_adapters"]


class TrainedState:
    """A checkpoint item holding only a model's parameters that train (adapters, saved
    modules).

    Args:
        model: The adapted model (``requires_grad`` marks what trains).
    """

    def __init__(self, model: nn.Module) -> None:
        self._model = model
        self.names = [n for n, p in model.named_parameters() if p.requires_grad]

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The trained tensors, by the model's names."""
        params = dict(self._model.named_parameters())
        return {name: params[name].detach() for name in self.names}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Loads the trained tensors; every one must be present, nothing else.

        Raises:
            ValueError: The keys differ (the checkpoint was written for another adapter).
        """
        missing = sorted(set(self.names) - set(state))
        extra = sorted(set(state) - set(self.names))
        if missing or extra:
            raise ValueError(f"the checkpoint's adapter weights do not fit task.model.adapter: "
                             f"missing {missing[:3]}, unexpected {extra[:3]}.")
        self._model.load_state_dict(state, strict=False)


def _peft() -> Any:
    try:
        return importlib.import_module("peft")
    except ImportError as e:
        raise ImportError(f"task.model.adapter needs the 'peft' package ({e}); install it "
                          "with pip install 'torchgarden[peft]'.") from e


def _lora(target: nn.Module, adapter: Any, key: str) -> nn.Module:
    peft = _peft()
    config = peft.LoraConfig(
        r=adapter.r, lora_alpha=adapter.alpha, lora_dropout=adapter.dropout,
        target_modules=list(adapter.target_modules) or None,
        modules_to_save=list(adapter.modules_to_save) or None)
    try:
        return peft.get_peft_model(target, config)
    except ValueError as e:
        names = sorted({n.rsplit(".", 1)[-1] for n, m in target.named_modules()
                        if n and isinstance(m, (nn.Linear, nn.Conv2d, nn.Embedding))})
        wanted = list(adapter.target_modules) or ["(PEFT's default)"]
        reason = str(e).splitlines()[0].split(". ")[0][:160]
        raise ValueError(f"{key}.target_modules={wanted}: {reason}; "
                         f"the model's Linear/Conv2d/Embedding modules are named {names[:8]}"
                         f"{did_you_mean(wanted[0], names, style='clause') or '.'}") from e


def adapt_model(model: nn.Module, task_config: Any, *, report: bool = False
                ) -> tuple[nn.Module, Any]:
    """Applies ``task_config.model.adapter`` to ``model``.

    Args:
        model: The task's freshly built model.
        task_config: Reads ``model.adapter``, ``model.pretrained_path`` and
            ``init_checkpoint``.
        report: Print the one line of trained parameters and checkpoint size.

    Returns:
        ``(model, checkpoint item)``: the model to train (``model`` itself when its
        library model was wrapped, else a ``PeftModel``) and what the checkpoint's
        ``model`` item is (a :class:`TrainedState`, or the model).

    Raises:
        ValueError: Target modules that do not exist (the closest is named).
        ImportError: PEFT is not installed (naming the extra).
    """
    model_config = getattr(task_config, "model", None)
    adapter = getattr(model_config, "adapter", None)
    if adapter is None or not adapter.type:
        return model, model
    key = "task.model.adapter"
    library = getattr(model, "model", None)
    if isinstance(library, nn.Module) and type(library).__module__.startswith("transformers."):
        model.model = _lora(library, adapter, key)
    else:
        model = _lora(model, adapter, key)
    base_from_file = bool(getattr(model_config, "pretrained_path", "")) and not getattr(
        task_config, "init_checkpoint", "")
    item = TrainedState(model) if base_from_file else model
    if report:
        _report(model, item)
    return model, item


def _report(model: nn.Module, item: Any) -> None:
    if torch.distributed.is_available() and torch.distributed.is_initialized() \
            and torch.distributed.get_rank() != 0:
        return
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    held = sum(t.numel() * t.element_size() for t in item.state_dict().values())
    what = ("the trained tensors only (base weights from task.model.pretrained_path)"
            if isinstance(item, TrainedState) else
            "the whole model (its base weights are not read from a file at every build)")
    print(f"torchgarden: task.model.adapter: LoRA trains {trained:,} of {total:,} parameters "
          f"({100 * trained / max(total, 1):.2f}%); checkpoints hold {what}: "
          f"{held / 1024:.1f} KiB of model weights", flush=True)


def _is_peft(module: Any) -> bool:
    return type(module).__module__.startswith("peft.")


def merge_adapters(model: nn.Module) -> nn.Module:
    """``model`` with its LoRA adapters merged into the base weights (PEFT's
    ``merge_and_unload``): plain modules that need no PEFT. Returns it (or its base)."""
    library = getattr(model, "model", None)
    if _is_peft(library):
        model.model = library.merge_and_unload()
        return model
    return model.merge_and_unload() if _is_peft(model) else model
