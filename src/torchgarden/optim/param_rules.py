"""Per-parameter learning-rate and weight-decay multipliers (``trainer.param_rules``,
``trainer.layerwise_lr_decay``; MMEngine's ``paramwise_cfg``).

:func:`apply_param_rules` splits the groups of a freshly built optimizer (Model Garden's
exclusion lists have already made theirs: an excluded parameter keeps weight decay 0)
by each parameter's multipliers:

* ``lr_mult`` is kept in the group and applied by
  :func:`torchgarden.optim.set_learning_rate`, which writes ``rate * lr_mult`` every
  step, so schedules and warmup scale every group alike;
* ``decay_mult`` multiplies the group's ``weight_decay`` once, here.

Layer-wise learning-rate decay (BEiT, ViT/BERT fine-tuning) reads a transformer
layer's index from the parameter name (``encoder.layer.3.`` in BERT/ViT, ``h.3.`` in
GPT-2, ``layers.3.``, ``blocks.3.`` in timm): with ``L`` layers, embeddings are layer 0,
block ``i`` is ``i + 1``, everything after (final norm, head) is ``L + 1``, and the
rate is multiplied by ``decay ** (L + 1 - layer)``. A rule's ``lr_mult`` multiplies it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from torch import nn

from torchgarden.utils.suggest import did_you_mean

__all__ = ["apply_param_rules", "layer_index"]

_LAYER = re.compile(r"(?:^|\.)(?:layer|layers|h|blocks|block)\.(\d+)\.")
_EMBEDDING = re.compile(r"embed|(?:^|\.)(?:wte|wpe|cls_token|pos_embed|position_ids)\b")

Rule = tuple[str, float, float]
"""``(pattern, lr_mult, decay_mult)``."""


def layer_index(name: str) -> int | None:
    """The transformer block index in a parameter name, or None (``"vit.encoder.layer.3.
    output.dense.weight"`` -> 3)."""
    found = _LAYER.search(name)
    return int(found.group(1)) if found else None


def _layer_mults(names: list[str], decay: float) -> dict[str, float]:
    indices = {name: layer_index(name) for name in names}
    found = [i for i in indices.values() if i is not None]
    if not found:
        raise ValueError(
            "trainer.layerwise_lr_decay: no parameter name holds a layer index (encoder."
            f"layer.N, h.N, layers.N or blocks.N; e.g. {names[:1]}); set it to 1.0 (off).")
    top = max(found) + 1
    mults = {}
    for name, index in indices.items():
        layer = index + 1 if index is not None else (0 if _EMBEDDING.search(name) else top + 1)
        mults[name] = decay ** (top + 1 - layer)
    return mults


def _rule_of(name: str, compiled: list[tuple[re.Pattern[str], float, float]]
             ) -> tuple[float, float]:
    for pattern, lr_mult, decay_mult in compiled:
        if pattern.search(name):
            return lr_mult, decay_mult
    return 1.0, 1.0


def apply_param_rules(optimizer: Any, model: nn.Module, *, rules: Sequence[Rule] = (),
                      layerwise_lr_decay: float = 1.0) -> list[dict[str, Any]]:
    """Splits ``optimizer``'s param groups by the multipliers of ``rules`` and the decay.

    Call it right after the optimizer is built (before any step: no state is moved).

    Args:
        optimizer: A torch optimizer (or ``LossScaleOptimizer``) over ``model``'s
            parameters.
        model: Names the parameters.
        rules: ``(regex, lr_mult, decay_mult)``; the first rule whose regex is found in a
            parameter's name applies.
        layerwise_lr_decay: In (0, 1]; 1.0 is off.

    Returns:
        One summary per resulting group: ``lr_mult``, ``weight_decay``, ``num_params``
        (tensors) and ``names`` -- what ``--verbose`` prints and the run writes to
        ``model_dir/param_groups.json``.

    Raises:
        ValueError: A rule's regex matches no parameter (the closest module named), or
            the decay finds no layer index.
    """
    names = {id(p): n for n, p in model.named_parameters()}
    grouped = [n for g in optimizer.param_groups for p in g["params"] if (n := names.get(id(p)))]
    compiled = [(re.compile(p), float(lr), float(wd)) for p, lr, wd in rules]
    for i, (pattern, *_) in enumerate(compiled):
        if not any(pattern.search(n) for n in grouped):
            modules = {".".join(n.split(".")[:k]) for n in grouped for k in (1, 2, 3)}
            raise ValueError(
                f"trainer.param_rules[{i}].pattern: {pattern.pattern!r} matches no trained "
                f"parameter{did_you_mean(pattern.pattern, modules, style='clause') or '.'}")
    layer = _layer_mults(grouped, layerwise_lr_decay) if layerwise_lr_decay != 1.0 else {}
    new_groups, summary = [], []
    for group in optimizer.param_groups:
        split: dict[tuple[float, float], list[Any]] = {}
        for param in group["params"]:
            name = names.get(id(param), "")
            lr_mult, decay_mult = _rule_of(name, compiled)
            split.setdefault((lr_mult * layer.get(name, 1.0), decay_mult), []).append(param)
        for (lr_mult, decay_mult), params in split.items():
            new = {**group, "params": params, "lr_mult": group.get("lr_mult", 1.0) * lr_mult,
                   "lr": group["lr"] * lr_mult}
            if "weight_decay" in group:
                new["weight_decay"] = group["weight_decay"] * decay_mult
            new_groups.append(new)
            summary.append({"lr_mult": new["lr_mult"], "weight_decay": new.get("weight_decay"),
                            "num_params": len(params),
                            "names": [names.get(id(p), "?") for p in params]})
    optimizer.param_groups[:] = new_groups
    return summary
