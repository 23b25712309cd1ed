"""``Evaluator``: how an evaluation runs (Orbit's ``StandardEvaluator`` on PyTorch)."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from torchgarden import distribute
from torchgarden.checkpoint import BestCheckpointExporter, Checkpoint
from torchgarden.core.state import GlobalStep, LossMean, RngState
from torchgarden.core.task import Task
from torchgarden.data import DataIterator, make_batch_mover
from torchgarden.metrics import as_metric
from torchgarden.optim import ExponentialMovingAverage
from torchgarden.runtime import RuntimeContext
from torchgarden.utils.logs import Logs

__all__ = ["Evaluator", "adapt_metrics", "collect_logs", "export_best"]

_logger = logging.getLogger("torchgarden")


class Evaluator:
    """Runs eval loops of a ``Task`` over ``eval_data``; ``evaluate(num_steps) -> logs`` is
    its whole contract with the Controller. The ``Trainer`` is an Evaluator that also trains
    (as Model Garden's ``Trainer`` is both a ``StandardTrainer`` and a ``StandardEvaluator``).

    Hooks to override: ``eval_begin``, ``next_eval_inputs``, ``eval_step(iterator)``,
    ``eval_reduce``, ``eval_end``. Named validation sets (``eval_data`` a mapping) run the
    hooks in turn, each with its own metrics and loss meter, and the logs nest by name
    (``{"clean": {...}, "noisy": {...}}``: TensorBoard's ``validation/clean/`` and
    ``validation/noisy/``).

    Args:
        task: The task whose ``validation_step`` runs.
        model: The user's ``nn.Module`` (what checkpoints and EMA hold), on its device.
        eval_data: Iterable of eval batches, read once per ``evaluate()``, or a mapping of
            names to such iterables (named validation sets). None: this object cannot
            ``evaluate()``.
        eval_metrics: Metrics updated by eval steps (torchmetrics objects are adapted);
            with named sets, a mapping of the same names to each set's metrics (a plain
            sequence is copied for every set).
        ema: Weight averages swapped in for evaluation.
        forward_model: The module steps call: ``model`` wrapped for autocast, DDP or
            ``torch.compile``. Defaults to ``model``.
        checkpoint_exporter: Exports the best checkpoint at the end of each evaluation.
        checkpoint_items: Extra objects saved in the checkpoint beside the built-in ones.
        runtime: The process' device and distribution strategy. Default: one process on
            the model's device.
        global_step: The step counter to report evaluations at (a trainer's). Default:
            a new one, restored from checkpoints.

    Example:
        >>> evaluator = Evaluator(task=task, model=model,
        ...                       eval_data=task.build_inputs(task.task_config.validation_data),
        ...                       eval_metrics=task.build_metrics(training=False))
        >>> logs = evaluator.evaluate(-1)   # {"validation_loss": ..., "accuracy": ...}
    """

    def __init__(
        self,
        *,
        task: Task,
        model: nn.Module,
        eval_data: Iterable[Any] | None = None,
        eval_metrics: Sequence[Any] = (),
        ema: ExponentialMovingAverage | None = None,
        forward_model: nn.Module | None = None,
        checkpoint_exporter: BestCheckpointExporter | None = None,
        checkpoint_items: Mapping[str, Any] | None = None,
        runtime: RuntimeContext | None = None,
        global_step: GlobalStep | None = None,
    ) -> None:
        model_device = next((p.device for p in model.parameters()), torch.device("cpu"))
        self._runtime = runtime or RuntimeContext(device=model_device)
        device = self._runtime.device
        self._task = task
        self._raw_model = model
        self._model = forward_model if forward_model is not None else model
        self._ema = ema
        self._checkpoint_exporter = checkpoint_exporter
        self._move_inputs = make_batch_mover(device)
        # Loaders yield CPU batches: for a CPU model there is nothing to move (or call).
        self._batches_in_place = torch.device(device).type == "cpu"
        self._global_step = global_step if global_step is not None else GlobalStep()
        self._eval_data = eval_data
        self._eval_sets = _eval_sets(eval_data, eval_metrics, device)
        # The set being evaluated (the first until an evaluation runs): what the hooks use.
        self._eval_set = self._eval_sets[0] if self._eval_sets else _EvalSet(
            None, None, [], LossMean("validation_loss", device))
        self._extra_checkpoint_items = dict(checkpoint_items or {})
        self._checkpoint: Checkpoint | None = None

    @property
    def task(self) -> Task:
        return self._task

    @property
    def model(self) -> nn.Module:
        """The model as steps call it (wrapped for DDP/autocast/compile when configured)."""
        return self._model

    @property
    def unwrapped_model(self) -> nn.Module:
        """The user's ``nn.Module`` as built by the task (what checkpoints hold)."""
        return self._raw_model

    @property
    def global_step(self) -> GlobalStep:
        return self._global_step

    @property
    def validation_loss(self) -> LossMean:
        return self._eval_set.loss

    @property
    def validation_metrics(self) -> list[Any]:
        """The eval metrics (of the named set being evaluated, or else the first)."""
        return self._eval_set.metrics

    @property
    def validation_set_names(self) -> tuple[str, ...]:
        """The names of the validation sets; ``()`` for one unnamed set."""
        return tuple(s.name for s in self._eval_sets if s.name is not None)

    @property
    def checkpoint(self) -> Checkpoint:
        """Every object a checkpoint saves and restores (built on first access)."""
        if self._checkpoint is None:
            items = {**self.checkpoint_items(), **self._extra_checkpoint_items}
            self._checkpoint = Checkpoint(**self._runtime.strategy.checkpoint_items(
                items, model=self._raw_model, optimizer=items.get("optimizer")))
        return self._checkpoint

    def checkpoint_items(self) -> dict[str, Any]:
        """The built-in checkpoint items: model, global step, EMA, RNG states."""
        items: dict[str, Any] = {"model": self._raw_model, "global_step": self._global_step}
        if self._ema is not None:
            items["ema"] = self._ema
        items["rng"] = RngState()
        return items

    @property
    def checkpoint_exporter(self) -> BestCheckpointExporter | None:
        return self._checkpoint_exporter

    @property
    def runtime(self) -> RuntimeContext:
        return self._runtime

    @property
    def ema(self) -> ExponentialMovingAverage | None:
        return self._ema

    @property
    def eval_dataset(self) -> Any:
        """The ``eval_data`` given (a mapping for named validation sets)."""
        return self._eval_data

    def initialize(self) -> None:
        """Runs ``task.initialize(model)`` (init_checkpoint on a fresh ``model_dir``)."""
        self._task.initialize(self._raw_model)

    def evaluate(self, num_steps: int) -> Logs:
        """Runs ``num_steps`` eval steps (-1: the whole dataset) on a fresh iterator; with
        named validation sets, that many on each, and returns ``{name: logs}``.

        EMA weights are swapped in for the whole evaluation; the best checkpoint is chosen
        once at its end, over all sets (e.g. on ``"noisy/accuracy"``), and holds the EMA
        weights.

        Under ``torchrun`` each rank reads its own shard of each validation set, in which
        every example appears once (``build_dataloader`` does not pad it); shards may
        differ by a batch. Every rank still runs the same number of forward passes (FSDP2
        gathers parameters in each): a rank whose shard has ended repeats the forward of
        its last batch and counts nothing from it.
        """
        if not self._eval_sets:
            raise ValueError("this Trainer has no eval_data; build it with eval_data to call "
                             "evaluate().")
        with self.ema_weights():
            if self._eval_sets[0].name is None:
                logs = self._evaluate_set(self._eval_sets[0], num_steps)
            else:
                logs = {s.name: self._evaluate_set(s, num_steps) for s in self._eval_sets}
            export_best(self._checkpoint_exporter, self.checkpoint, logs,
                        self._global_step.value)
        self._model.train()
        return logs

    def _evaluate_set(self, eval_set: _EvalSet, num_steps: int) -> Logs:
        """``eval_begin``, the steps, ``eval_end`` over one validation set."""
        self._eval_set = eval_set
        state = self.eval_begin()
        iterator: Any = DataIterator(eval_set.data, repeat=False)
        lockstep = _Lockstep(iterator, eval_set.data) if distribute.is_distributed() else None
        iterator = lockstep or iterator
        steps_done = steps_run = 0
        with torch.no_grad():
            while num_steps < 0 or steps_run < num_steps:
                if lockstep is not None and not lockstep.has_batch(steps_run):
                    if not lockstep.any_rank_continues(steps_run):
                        break
                    # A forward nobody counts: it keeps this rank in step with the others.
                    features, _ = self._task.split_inputs(self._move_inputs(lockstep.last_batch()))
                    self._task.inference_step(features, self._model)
                    steps_run += 1
                    continue
                try:
                    outputs = self.eval_step(iterator)
                except StopIteration:
                    break
                state = self.eval_reduce(state, outputs)
                steps_done += 1
                steps_run += 1
        if num_steps > 0 and steps_run < num_steps:
            _logger.info("The dataset iterator is exhausted after %d steps.", steps_done)
        return self.eval_end(state) if state is not None else self.eval_end()

    def eval_begin(self) -> Any:
        """Resets validation metrics and the loss meter, puts the model in eval mode;
        returns the initial state."""
        for metric in self.validation_metrics:
            metric.reset_states()
        self.validation_loss.reset_states()
        self._model.eval()
        return None

    def next_eval_inputs(self, iterator: Iterator[Any]) -> tuple[Any, Logs]:
        """Returns ``(inputs, passthrough_logs)``; passthrough logs reach ``aggregate_logs``."""
        return self._move_inputs(next(iterator)), {}

    def eval_step(self, iterator: Iterator[Any]) -> Logs:
        """One validation step; returns ``{**passthrough_logs, **task_logs}``."""
        inputs, passthrough = self.next_eval_inputs(iterator)
        logs = self._task.validation_step(inputs, model=self._model,
                                          metrics=self.validation_metrics)
        if Task.loss in logs:
            self.validation_loss.update_state(logs[Task.loss])
        clash = sorted(passthrough.keys() & logs.keys()) if passthrough else []
        if clash:
            _logger.warning("passthrough log keys %s are overwritten by the task's logs", clash)
        return {**passthrough, **logs} if passthrough else logs

    def eval_reduce(self, state: Any = None, step_outputs: Logs | None = None) -> Any:
        """Delegates to ``task.aggregate_logs`` (host side, every eval step)."""
        return self._task.aggregate_logs(state=state, step_logs=step_outputs)

    def eval_end(self, aggregated_logs: Any = None) -> Logs:
        """Collects validation metrics, loss and reduced logs (the best-checkpoint export
        follows in :meth:`evaluate`)."""
        logs = collect_logs(self.validation_metrics, self.validation_loss, reset=False,
                            always_loss=False)
        if self.validation_loss.name not in logs:
            _logger.info("The task did not report validation loss.")
        if aggregated_logs:
            step = self._global_step.value
            logs.update(self._task.reduce_aggregated_logs(aggregated_logs, global_step=step))
        return logs

    def ema_weights(self) -> contextlib.AbstractContextManager[None]:
        """Context manager with the EMA weights swapped in (no-op without EMA)."""
        return self._ema.average_weights() if self._ema is not None else contextlib.nullcontext()


@dataclasses.dataclass
class _EvalSet:
    """One validation set: its name (None when unnamed), data, metrics and loss meter."""

    name: str | None
    data: Any
    metrics: list[Any]
    loss: LossMean


def _eval_sets(eval_data: Any, eval_metrics: Any, device: torch.device) -> list[_EvalSet]:
    if eval_data is None:
        return []
    named_metrics = isinstance(eval_metrics, Mapping)
    if not isinstance(eval_data, Mapping):
        if named_metrics:
            raise TypeError("eval_metrics is a mapping of named sets but eval_data is one "
                            "dataset; give eval_data as a mapping of the same names.")
        eval_data, eval_metrics = {None: eval_data}, {None: eval_metrics}
    elif not eval_data:
        raise ValueError("eval_data is an empty mapping; name at least one validation set.")
    elif named_metrics and set(eval_metrics) != set(eval_data):
        raise ValueError(f"eval_metrics names the sets {sorted(eval_metrics)} but eval_data "
                         f"{sorted(eval_data)}; give metrics for each validation set.")
    elif not named_metrics:
        eval_metrics = {name: copy.deepcopy(list(eval_metrics)) for name in eval_data}
    return [_EvalSet(None if name is None else str(name), data,
                     adapt_metrics(eval_metrics[name], device), LossMean("validation_loss", device))
            for name, data in eval_data.items()]


class _Lockstep:
    """This rank's eval batches, read so that every rank runs the same number of steps.

    A sized loader's longest shard is agreed on once (one all-reduce); for a stream the
    ranks agree at each step whether any still has a batch.
    """

    _END = object()

    def __init__(self, iterator: Iterator[Any], loader: Any) -> None:
        self._source = iterator
        self._next: Any = None
        self._last: Any = self._END
        self._continues = True
        try:
            self._steps: int | None = distribute.max_over_ranks(len(loader))
        except TypeError:
            self._steps = None

    def __iter__(self) -> _Lockstep:
        return self

    def __next__(self) -> Any:
        if not self._fetch():
            raise StopIteration
        self._last, self._next = self._next, None
        return self._last

    def _fetch(self) -> bool:
        if self._next is None:
            self._next = next(self._source, self._END)
        return self._next is not self._END

    def has_batch(self, step: int) -> bool:
        """Whether this rank has a batch for ``step`` (and every rank runs that step)."""
        mine = self._fetch()
        if self._steps is None:
            # Every rank asks each step; the answer decides any_rank_continues as well.
            self._continues = bool(distribute.max_over_ranks(int(mine)))
            return mine and self._continues
        return mine and step < self._steps

    def any_rank_continues(self, step: int) -> bool:
        """Whether some rank still has a batch for ``step`` (this one has none)."""
        return self._continues if self._steps is None else step < self._steps

    def last_batch(self) -> Any:
        """This rank's last batch, for a forward nobody counts."""
        if self._last is self._END:
            raise ValueError(
                f"rank {distribute.get_rank()} has no validation example, but the other "
                "ranks' forward passes need it to run one too; use at least one validation "
                f"example per rank ({distribute.get_world_size()})."
            )
        return self._last


def export_best(exporter: BestCheckpointExporter | None, checkpoint: Checkpoint, logs: Logs,
                step: int) -> None:
    """Exports ``checkpoint`` if ``logs`` hold the best value so far, and adds
    ``best_<metric>`` to ``logs`` (no-op without an exporter)."""
    if exporter is not None:
        exporter.maybe_export_checkpoint(checkpoint, logs, step)
        logs["best_" + exporter.metric_name] = exporter.best_metric_value


def collect_logs(metrics: Sequence[Any], loss: LossMean, *, reset: bool,
                 always_loss: bool) -> Logs:
    """Reads metrics and a loss meter (all-reduced over ranks) into logs; the loss is left
    out when nothing updated it, unless ``always_loss``."""
    logs: Logs = {}
    for metric in metrics:
        sync = getattr(metric, "sync", None)
        if sync is not None:
            sync()  # All-reduce over ranks (no-op in one process).
        result = metric.result()
        if isinstance(result, dict):
            logs.update(result)
        else:
            logs[metric.name] = result
        if reset:
            metric.reset_states()
    loss.sync()
    if loss.count or always_loss:
        logs[loss.name] = loss.result().clone()
    if reset:
        loss.reset_states()
    return logs


def adapt_metrics(metrics: Iterable[Any], device: torch.device) -> list[Any]:
    """``metrics`` with the Metric interface (``metrics.as_metric``), those holding tensors
    moved to ``device``."""
    adapted = [as_metric(metric) for metric in metrics]
    return [m.to(device) if hasattr(m, "to") else m for m in adapted]
