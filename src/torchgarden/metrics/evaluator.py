"""`Evaluator`: a host-side (Python) metric such as COCO detection AP."""

from __future__ import annotations

import abc
import functools
import logging
from collections.abc import Callable
from typing import Any

import torch.distributed as dist

from torchgarden.metrics.base import snake_case

_logger = logging.getLogger("torchgarden")


def _world() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class Evaluator(abc.ABC):
    """A metric computed in Python on the host, fed whole batches of outputs.

    Unlike `Metric`, whose state is device tensors updated inside the step, an evaluator
    keeps NumPy arrays (or anything) on the host and does its work in `result()`.
    It plugs into a task through the aggregate/reduce flow, exactly like Model Garden:

    1. ``build_metrics(training=False)`` creates it and stores it on the task
       (``self.coco_metric = COCOEvaluator(...)``).
    2. ``validation_step`` puts the raw outputs in its logs, e.g.
       ``logs["coco_metric"] = (groundtruths, predictions)``.
    3. After every eval step the trainer calls ``state = task.aggregate_logs(state, logs)``
       on the host; the task calls ``reset_states()`` when ``state`` is None (first step)
       and then ``update_state(groundtruths, predictions)``, and returns a truthy state.
    4. Once per evaluation, if the state is truthy, ``task.reduce_aggregated_logs(state)``
       returns ``evaluator.result()``, which computes the numbers and resets.

    Under ``torchrun`` each rank accumulates its own shard of the validation set, and
    ``result()`` is a collective, as torchmetrics' ``compute()`` is: every rank calls it,
    rank 0 receives every rank's `local_state()`, loads them all (`load_states`, in rank
    order), computes, and every rank returns rank 0's numbers. So the result is the one a
    single process computes over the whole set. An evaluator that does not implement
    `local_state` / `load_states` computes on its own shard (with a warning).
    ``sync_on_result=False`` turns the gathering off (e.g. when the task gathers the
    inputs itself before ``update_state``).

    Subclasses implement `update_state`, `result` and `reset_states`; `reset_state`
    (the Keras 3 spelling) follows whichever of the two spellings is overridden.

    Args:
        name: Log key. Defaults to the snake_case class name.
        sync_on_result: Gather every rank's state before `result()` computes. Defaults
            to True.
    """

    name: str

    def __init__(self, name: str | None = None, *, sync_on_result: bool = True) -> None:
        self.name = name if name is not None else snake_case(type(self).__name__)
        self.sync_on_result = sync_on_result
        self._gathering = False
        self._reset_while_gathering = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "reset_state" in cls.__dict__ and "reset_states" not in cls.__dict__:
            cls.reset_states = cls.__dict__["reset_state"]
        elif "reset_states" in cls.__dict__ and "reset_state" not in cls.__dict__:
            cls.reset_state = cls.__dict__["reset_states"]
        own = cls.__dict__.get("reset_states")
        if own is not None:  # A gathered result() must know whether it reset.
            cls.reset_states = _noting_reset(own)
            if cls.__dict__.get("reset_state") is own:
                cls.reset_state = cls.reset_states
        if "result" in cls.__dict__:
            cls.result = _gathering_result(cls.__dict__["result"])

    @abc.abstractmethod
    def update_state(self, groundtruths: Any, predictions: Any) -> None:
        """Accumulates one batch of ground truths and predictions (host side)."""

    @abc.abstractmethod
    def result(self) -> dict[str, float]:
        """Computes the metrics from everything accumulated, as ``{name: float}``."""

    @abc.abstractmethod
    def reset_states(self) -> None:
        """Forgets everything accumulated."""

    def reset_state(self) -> None:
        """Keras 3 spelling of `reset_states`."""
        self.reset_states()

    def local_state(self) -> Any:
        """What this rank accumulated, as a picklable value (for gathering across ranks).

        Raises:
            NotImplementedError: The evaluator cannot be gathered (the default).
        """
        raise NotImplementedError

    def load_states(self, states: list[Any]) -> None:
        """Replaces the accumulated state by the union of ``states`` (rank order).

        Raises:
            NotImplementedError: The evaluator cannot be gathered (the default).
        """
        raise NotImplementedError


def _noting_reset(reset: Callable[[Evaluator], None]) -> Callable[[Evaluator], None]:
    if getattr(reset, "_notes_reset", False):
        return reset

    @functools.wraps(reset)
    def noted(self: Evaluator) -> None:
        reset(self)
        self._reset_while_gathering = True

    noted._notes_reset = True  # type: ignore[attr-defined]
    return noted


def _gathering_result(result: Callable[[Evaluator], Any]) -> Callable[[Evaluator], Any]:
    """Wraps a subclass' ``result`` so that it covers every rank's accumulated state."""

    if getattr(result, "_gathers", False):
        return result

    @functools.wraps(result)
    def gathered(self: Evaluator) -> Any:
        rank, world_size = _world()
        if (world_size == 1 or not getattr(self, "sync_on_result", True)
                or getattr(self, "_gathering", False)):
            return result(self)
        if type(self).local_state is Evaluator.local_state:
            _logger.warning("%s has no local_state()/load_states(): its result covers rank "
                            "%d's share of the validation set only.", type(self).__name__, rank)
            return result(self)
        local = self.local_state()
        states: list[Any] | None = [None] * world_size if rank == 0 else None
        dist.gather_object(local, states, dst=0)  # Collective: every rank calls result().
        outcome: list[Any] = [None]
        if rank == 0:
            outcome = [_compute_all(self, result, states, local)]
        dist.broadcast_object_list(outcome, src=0)
        value, was_reset, error = outcome[0]
        if error is not None:
            raise RuntimeError(f"{type(self).__name__}.result() failed on rank 0: {error}")
        if rank != 0 and was_reset:
            self.reset_states()
        return value

    gathered._gathers = True  # type: ignore[attr-defined]
    return gathered


def _compute_all(evaluator: Evaluator, result: Callable[[Evaluator], Any], states: Any,
                 local: Any) -> tuple[Any, bool, str | None]:
    """On rank 0: ``result`` over every rank's state, then this rank's own state back
    unless ``result`` reset it. Returns ``(value, reset, error)``."""
    evaluator._gathering = True
    try:
        evaluator.load_states(states)
        evaluator._reset_while_gathering = False  # load_states may reset first.
        value, error = result(evaluator), None
    except Exception as e:  # Reported to every rank, which would otherwise wait forever.
        value, error = None, f"{type(e).__name__}: {e}"
    finally:
        evaluator._gathering = False
    reset = evaluator._reset_while_gathering
    if not reset:
        evaluator.load_states([local])  # Keep this rank's own state, as before.
    return value, reset, error
