"""Configs of what trains and how fast, by parameter name (docs/fine_tuning.md).

``trainer.freeze`` (with ``unfreeze_at_step`` / ``unfreeze_schedule``) and
``trainer.param_rules`` / ``layerwise_lr_decay`` are read where the optimizer is built
(`torchgarden.optim.freezing`, `torchgarden.optim.param_rules`); patterns are regular
expressions matched with ``re.search`` against torch parameter names, like Model
Garden's ``exclude_from_weight_decay``. This module is torch-free.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from torchgarden.config.base import Config
from torchgarden.config.errors import ConfigError

__all__ = ["ParamRuleConfig", "UnfreezeStepConfig", "check_fine_tuning"]


@dataclasses.dataclass
class UnfreezeStepConfig(Config):
    """One step of an unfreeze schedule."""

    step: int = 0
    """Global step from which the matching frozen parameters train. Defaults to 0."""
    patterns: list[str] = dataclasses.field(default_factory=list)
    """Regexes of the frozen parameters to unfreeze; [] unfreezes all. Defaults to []."""


@dataclasses.dataclass
class ParamRuleConfig(Config):
    """Learning-rate and weight-decay multipliers of the parameters a regex matches
    (MMEngine's ``paramwise_cfg.custom_keys``)."""

    pattern: str = ""
    """Regex searched in parameter names; the first matching rule applies."""
    lr_mult: float = 1.0
    """Multiplies the scheduled learning rate. Defaults to 1.0."""
    decay_mult: float = 1.0
    """Multiplies the optimizer's weight decay (a Model Garden exclusion keeps 0).
    Defaults to 1.0."""


def _compiles(config: Any, key: str, pattern: str) -> None:
    try:
        re.compile(pattern)
    except re.error as e:
        raise ConfigError(f"{key}: {pattern!r} is not a regular expression ({e})", key=key) \
            from None


def check_fine_tuning(trainer: Any) -> None:
    """Checks the trainer's freeze and param-rule fields (regexes, steps, multipliers).

    Raises:
        ConfigError: Naming the key.
    """
    for i, pattern in enumerate(trainer.freeze):
        _compiles(trainer, f"{trainer.field_path('freeze')}[{i}]", pattern)
    scheduled = trainer.unfreeze_at_step is not None or trainer.unfreeze_schedule
    if scheduled and not trainer.freeze:
        key = trainer.field_path("unfreeze_schedule" if trainer.unfreeze_schedule
                                 else "unfreeze_at_step")
        raise ConfigError(f"{key} unfreezes parameters but trainer.freeze is empty; list the "
                          "frozen parameters there (e.g. freeze: ['^model\\.vit\\.'])", key=key)
    if trainer.unfreeze_at_step is not None and trainer.unfreeze_schedule:
        key = trainer.field_path("unfreeze_at_step")
        raise ConfigError(f"{key} and trainer.unfreeze_schedule are both set; keep one "
                          "(unfreeze_at_step: N is unfreeze_schedule: [{step: N}])", key=key)
    steps = [trainer.unfreeze_at_step] if trainer.unfreeze_at_step is not None else []
    for i, entry in enumerate(trainer.unfreeze_schedule):
        for j, pattern in enumerate(entry.patterns):
            _compiles(trainer, f"{trainer.field_path('unfreeze_schedule')}[{i}].patterns[{j}]",
                      pattern)
        steps.append(entry.step)
    if any(step < 1 for step in steps):
        key = trainer.field_path("unfreeze_schedule" if trainer.unfreeze_schedule
                                 else "unfreeze_at_step")
        raise ConfigError(f"{key}: unfreeze steps must be >= 1, received {steps}; a parameter "
                          "trainable from step 0 is simply not frozen", key=key)
    for i, rule in enumerate(trainer.param_rules):
        key = f"{trainer.field_path('param_rules')}[{i}]"
        if not rule.pattern:
            raise ConfigError(f"{key}.pattern is empty; give a regex such as 'bias$'", key=key)
        _compiles(trainer, f"{key}.pattern", rule.pattern)
        if rule.lr_mult < 0 or rule.decay_mult < 0:
            raise ConfigError(f"{key}: lr_mult and decay_mult must be >= 0, received "
                              f"{rule.lr_mult} and {rule.decay_mult}", key=key)
    decay = trainer.layerwise_lr_decay
    if not 0 < decay <= 1:
        key = trainer.field_path("layerwise_lr_decay")
        raise ConfigError(f"{key} must be in (0, 1] (1 = off; ViT fine-tuning uses 0.65-0.75), "
                          f"received {decay}", key=key)
