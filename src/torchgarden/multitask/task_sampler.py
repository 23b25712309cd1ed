"""Task samplers: which task the interleaving trainer trains at each step.

Model Garden's ``official/modeling/multitask/task_sampler.py``: uniform, proportional to
``task_weight ** alpha``, and annealed from proportional to uniform. A sampler draws
from its own seeded generator (never the global RNGs), one number per step, and is a
checkpoint item, so a resumed run draws what an uninterrupted one would have drawn;
ranks given the same seed draw the same task at every step.

Example:
    >>> sampler = ProportionalTaskSampler({"a": 1.0, "b": 3.0}, seed=0)
    >>> sampler.task_distribution(global_step=0)
    [0.25, 0.75]
    >>> sampler.sample(global_step=0) in ("a", "b")
    True
"""

from __future__ import annotations

import abc
import bisect
import itertools
import math
import random
from collections.abc import Mapping
from typing import Any

__all__ = ["AnnealingTaskSampler", "ProportionalTaskSampler", "TaskSampler",
           "UniformTaskSampler"]


class TaskSampler(abc.ABC):
    """Picks one task per step from ``task_distribution(global_step)``.

    Args:
        task_weights: Weight of each task by name (> 0), in the trainer's task order.
        seed: Seed of the sampler's own generator. Defaults to 0.
    """

    def __init__(self, task_weights: Mapping[str, float], *, seed: int = 0) -> None:
        if not task_weights:
            raise ValueError("a task sampler needs at least one task weight.")
        for name, weight in task_weights.items():
            if not (math.isfinite(weight) and weight > 0):
                raise ValueError(f"task weight of {name!r} must be > 0, got {weight!r}.")
        self._task_weights = {name: float(w) for name, w in task_weights.items()}
        self._names = list(self._task_weights)
        self._rng = random.Random(seed)

    @property
    def task_weights(self) -> dict[str, float]:
        return dict(self._task_weights)

    @property
    def task_names(self) -> list[str]:
        return list(self._names)

    @abc.abstractmethod
    def task_distribution(self, global_step: int) -> list[float]:
        """The probability of each task (in ``task_names`` order) at ``global_step``."""

    def task_cumulative_distribution(self, global_step: int) -> list[float]:
        """Model Garden's form: the running sums of :meth:`task_distribution`."""
        return list(itertools.accumulate(self.task_distribution(global_step)))

    def sample(self, global_step: int) -> str:
        """Draws the task of step ``global_step`` (one draw of the generator)."""
        cumulative = self.task_cumulative_distribution(global_step)
        index = bisect.bisect_right(cumulative, self._rng.random())
        return self._names[min(index, len(self._names) - 1)]

    def state_dict(self) -> dict[str, Any]:
        """The generator's state (a checkpoint item)."""
        return {"rng": self._rng.getstate()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        version, internal, gauss = state["rng"]
        self._rng.setstate((version, tuple(internal), gauss))

    def _weights_to(self, alpha: float) -> list[float]:
        sizes = [self._task_weights[name] ** alpha for name in self._names]
        total = sum(sizes)
        return [size / total for size in sizes]


class UniformTaskSampler(TaskSampler):
    """Every task equally often."""

    def task_distribution(self, global_step: int) -> list[float]:
        del global_step
        return [1.0 / len(self._names)] * len(self._names)


class ProportionalTaskSampler(TaskSampler):
    """Tasks in proportion to ``weight ** alpha`` (``alpha`` 1: proportional; 0: uniform).

    Args:
        task_weights: As in :class:`TaskSampler`.
        alpha: The exponent. Defaults to 1.0.
        seed: As in :class:`TaskSampler`.
    """

    def __init__(self, task_weights: Mapping[str, float], *, alpha: float = 1.0,
                 seed: int = 0) -> None:
        super().__init__(task_weights, seed=seed)
        if not (math.isfinite(alpha) and alpha >= 0):
            raise ValueError(f"alpha must be >= 0, got {alpha!r}.")
        self._distribution = self._weights_to(alpha)

    def task_distribution(self, global_step: int) -> list[float]:
        del global_step
        return list(self._distribution)


class AnnealingTaskSampler(TaskSampler):
    """Proportional at first, uniform by the last epoch (Stickland & Murray, 2019).

    In epoch ``e = global_step // steps_per_epoch`` of ``E = ceil(total_steps /
    steps_per_epoch)``, tasks are drawn in proportion to ``weight ** alpha`` with
    ``alpha = 1 - min(e, E - 1) / (E - 1)``. (Model Garden's schedule,
    ``1 - 0.8 (e - 1) / (E - 1)``, starts above 1 and never reaches uniform.)

    Args:
        task_weights: As in :class:`TaskSampler`.
        steps_per_epoch: Steps with one distribution.
        total_steps: Steps over which alpha falls from 1 to 0.
        seed: As in :class:`TaskSampler`.
    """

    def __init__(self, task_weights: Mapping[str, float], *, steps_per_epoch: int,
                 total_steps: int, seed: int = 0) -> None:
        super().__init__(task_weights, seed=seed)
        if steps_per_epoch < 1 or total_steps < 1:
            raise ValueError(f"steps_per_epoch ({steps_per_epoch}) and total_steps "
                             f"({total_steps}) must be >= 1.")
        self._steps_per_epoch = int(steps_per_epoch)
        self._num_epochs = max(1, math.ceil(total_steps / steps_per_epoch))
        self._cache: tuple[int, list[float]] = (-1, [])

    def alpha(self, global_step: int) -> float:
        """The exponent of the weights at ``global_step``."""
        last = self._num_epochs - 1
        if last == 0:
            return 1.0
        return 1.0 - min(global_step // self._steps_per_epoch, last) / last

    def task_distribution(self, global_step: int) -> list[float]:
        epoch = global_step // self._steps_per_epoch
        if self._cache[0] != epoch:
            self._cache = (epoch, self._weights_to(self.alpha(global_step)))
        return list(self._cache[1])
