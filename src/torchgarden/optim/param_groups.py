"""Parameter groups chosen by parameter name: Model Garden's regex exclusion lists.

Model Garden's ``exclude_from_weight_decay`` / ``exclude_from_layer_adaptation`` /
``include_in_weight_decay`` are regular expressions matched with ``re.search`` against
variable names (``dense/kernel:0``); here they are matched against torch parameter names
(``encoder.layer.0.output.LayerNorm.weight``), so ``bias``, ``LayerNorm`` or ``norm``
carry over unchanged. Parameters sharing the same overrides form one torch param group.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn

__all__ = ["ParamGroups", "build_param_groups", "name_overrides"]

ParamGroups = list[dict[str, Any]]
Overrides = Callable[[str], dict[str, Any]]


def _searches(patterns: Iterable[str] | str | None) -> list[re.Pattern[str]]:
    if patterns is None:
        return []
    if isinstance(patterns, str):
        patterns = [patterns]
    return [re.compile(p) for p in patterns]


def name_overrides(sub_config: Any) -> Overrides | None:
    """Returns ``name -> group overrides`` from an optimizer sub-config, or None.

    Reads ``exclude_from_weight_decay`` (no decay: ``{"weight_decay": 0.0}``),
    ``include_in_weight_decay`` (a match always decays; for ``adafactor``, a single regex,
    only matches decay), ``weight_keys`` (``sgd_torch``: only matches decay) and ``exclude_from_layer_adaptation`` (``{"layer_adaptation":
    False}``; when the sub-config has the field but leaves it empty, the weight-decay
    exclusions apply, as in Model Garden's LAMB and LARS).
    """
    exclude = _searches(getattr(sub_config, "exclude_from_weight_decay", None))
    include_value = getattr(sub_config, "include_in_weight_decay", None)
    include = _searches(include_value)
    only_included = isinstance(include_value, str)
    if hasattr(sub_config, "weight_keys"):  # sgd_torch: only the weight_keys matches decay
        include, only_included = _searches(sub_config.weight_keys), True
    has_adaptation = hasattr(sub_config, "exclude_from_layer_adaptation")
    no_adapt = _searches(getattr(sub_config, "exclude_from_layer_adaptation", None)) or (
        exclude if has_adaptation else [])
    if not (exclude or include or no_adapt or only_included):
        return None

    def overrides(name: str) -> dict[str, Any]:
        found: dict[str, Any] = {}
        included = any(p.search(name) for p in include)
        excluded = not included and (only_included or any(p.search(name) for p in exclude))
        if excluded:
            found["weight_decay"] = 0.0
        if any(p.search(name) for p in no_adapt):
            found["layer_adaptation"] = False
        return found

    return overrides


def _named_or_plain(params: Any) -> tuple[list[tuple[str, torch.Tensor]] | None, list[Any]]:
    """Splits ``params`` into ``(named pairs or None, items)``."""
    if isinstance(params, nn.Module):
        named = [(n, p) for n, p in params.named_parameters() if p.requires_grad]
        return named, [p for _, p in named]
    if isinstance(params, torch.Tensor) or not isinstance(params, Iterable):
        raise TypeError(
            "build_optimizer `params` must be an nn.Module or an iterable of parameters, "
            f"(name, parameter) pairs or param-group dicts; got {type(params).__name__}."
        )
    items = list(params)
    if items and all(isinstance(i, tuple) and len(i) == 2 and isinstance(i[0], str) for i in items):
        return items, [p for _, p in items]
    return None, items


def _plain_groups(items: list[Any]) -> ParamGroups:
    if all(isinstance(i, dict) for i in items):
        return [dict(group) for group in items]
    if all(isinstance(i, torch.Tensor) for i in items):
        return [{"params": items}]
    kinds = sorted({type(i).__name__ for i in items})
    raise TypeError(
        "build_optimizer `params` must hold only tensors, only (name, tensor) pairs "
        f"or only param-group dicts; got a mix of {kinds}."
    )


def build_param_groups(params: Any, overrides: Overrides | None, *, path: str) -> ParamGroups:
    """Torch param groups for ``params``, split by ``overrides(name)``.

    Args:
        params: An ``nn.Module``, or an iterable of parameters, ``(name, parameter)``
            pairs or param-group dicts.
        overrides: ``name -> dict`` of group options (None: one group).
        path: The config path named in errors.

    Returns:
        The groups, the one without overrides first, in order of first appearance.

    Raises:
        ValueError: No trainable parameters, or name patterns without names.
        TypeError: ``params`` of an unsupported kind.
    """
    named, items = _named_or_plain(params)
    if not items:
        raise ValueError(
            "build_optimizer got no trainable parameters; check that the model has "
            "parameters with requires_grad=True."
        )
    if named is None:
        if overrides is not None:
            raise ValueError(
                f"{path}: matching its parameter-name patterns (exclude_from_weight_decay, "
                "...) needs parameter names; pass the nn.Module or model.named_parameters() "
                "instead of bare parameters or param groups."
            )
        return _plain_groups(items)
    if overrides is None:
        return [{"params": [p for _, p in named]}]
    groups: dict[tuple[tuple[str, Any], ...], list[torch.Tensor]] = {(): []}
    for name, param in named:
        groups.setdefault(tuple(sorted(overrides(name).items())), []).append(param)
    return [{"params": ps, **dict(key)} for key, ps in groups.items() if ps]
