"""Frozen parameters and their unfreeze schedule (``trainer.freeze``; docs/fine_tuning.md).

A frozen parameter has ``requires_grad=False``: it gets no gradient, so no optimizer
touches it or keeps state for it. Which parameters train is a pure function of the
global step, so a run resumed after ``kill -9`` freezes exactly what the uninterrupted
run froze at that step (:meth:`FreezeSchedule.apply` is called at each loop start and
at each step where something changes).

A parameter frozen for the whole run is left out of the optimizer; one unfrozen later
is in it from the start (its state appears at its first update), so the optimizer's
groups never change during the run.

Example:
    >>> schedule = FreezeSchedule(model, freeze=[r"^backbone\\."], unfreeze=[(100, [])])
    >>> with schedule.all_trainable():
    ...     optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad])
    >>> schedule.apply(0)      # backbone frozen until step 100
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Iterator, Sequence

from torch import nn

from torchgarden.utils.suggest import did_you_mean

__all__ = ["FreezeSchedule"]


class FreezeSchedule:
    """Which parameters train at each step.

    Args:
        model: The model (parameter names as ``model.named_parameters()`` gives them).
        freeze: Regexes (``re.search``) of the frozen parameters.
        unfreeze: ``[(step, patterns)]``: from ``step``, frozen parameters matching a
            pattern (every frozen one with no patterns) train.
        freeze_batch_norm_stats: Run BatchNorm modules whose parameters are all frozen in
            eval mode (fixed running statistics). Defaults to True.
        key: The config key named in errors. Defaults to ``"trainer.freeze"``.

    Raises:
        ValueError: A pattern matches no parameter (the closest name is given), or
            nothing is left to train at step 0.
    """

    def __init__(self, model: nn.Module, *, freeze: Sequence[str],
                 unfreeze: Sequence[tuple[int, Sequence[str]]] = (),
                 freeze_batch_norm_stats: bool = True, key: str = "trainer.freeze") -> None:
        self._model = model
        self._params = dict(model.named_parameters())
        names = list(self._params)
        frozen = _matching(names, freeze, key)
        #: Parameter name -> first step at which it trains (inf: never).
        self.trains_from: dict[str, float] = {name: math.inf for name in frozen}
        for i, (step, patterns) in enumerate(sorted(unfreeze, key=lambda e: e[0])):
            chosen = _matching(list(frozen), patterns, f"trainer.unfreeze_schedule[{i}]") \
                if patterns else frozen
            for name in chosen:
                self.trains_from[name] = min(self.trains_from[name], step)
        self.change_steps = frozenset(int(s) for s in self.trains_from.values()
                                      if s != math.inf)
        if len(frozen) == len(names) and 0 not in self.change_steps:
            raise ValueError(f"{key} freezes all {len(names)} parameters at step 0, leaving "
                             "nothing to train; narrow its patterns (e.g. only the backbone: "
                             "'^model\\.(vit|resnet)\\.').")
        self._batch_norms = [(name, m) for name, m in model.named_modules()
                             if isinstance(m, nn.modules.batchnorm._BatchNorm)] \
            if freeze_batch_norm_stats else []

    def frozen_at(self, step: int) -> set[str]:
        """The names of the parameters that do not train at ``step``."""
        return {name for name, start in self.trains_from.items() if step < start}

    @contextlib.contextmanager
    def all_trainable(self) -> Iterator[None]:
        """Within it, every parameter that trains at some step has ``requires_grad``
        (build the optimizer and EMA here); afterwards step 0's state is applied."""
        for name, start in self.trains_from.items():
            self._params[name].requires_grad_(start != math.inf)
        try:
            yield
        finally:
            self.apply(0)

    def apply(self, step: int) -> None:
        """Sets ``requires_grad`` for ``step`` and puts fully frozen BatchNorms in eval
        mode (call it after ``model.train()``)."""
        frozen = self.frozen_at(step)
        for name in self.trains_from:
            self._params[name].requires_grad_(name not in frozen)
        for name, module in self._batch_norms:
            own = [f"{name}.{p}" if name else p for p, _ in module.named_parameters()]
            if own and all(p in frozen for p in own):
                module.eval()


def _matching(names: list[str], patterns: Sequence[str], key: str) -> set[str]:
    """Names matched by any pattern; every pattern must match one."""
    found: set[str] = set()
    for i, pattern in enumerate(patterns):
        regex = re.compile(pattern)
        hits = {name for name in names if regex.search(name)}
        if not hits:
            modules = {".".join(n.split(".")[:k]) for n in names for k in (1, 2, 3)}
            hint = did_you_mean(pattern, modules, style="clause") or "."
            raise ValueError(f"{key}[{i}]: {pattern!r} matches no parameter name (e.g. "
                             f"{names[0]!r}){hint}")
        found |= hits
    return found
