"""``Evaluator``: how an evaluation runs — Orbit's ``StandardEvaluator`` on PyTorch.

It runs a Task's ``validation_step`` over a dataset with built objects (model, data,
metrics, EMA) and returns logs; ``evaluate(num_steps) -> logs`` is its whole contract
with the Controller. The ``Trainer`` is an Evaluator that also trains (as Model
Garden's ``Trainer`` is both a ``StandardTrainer`` and a ``StandardEvaluator``).
Hooks to override: ``eval_begin``, ``next_eval_inputs``, ``eval_step(iterator)``,
``eval_reduce``, ``eval_end``.

Example:
    >>> evaluator = Evaluator(task=task, model=model,
    ...                       eval_data=task.build_inputs(task.task_config.validation_data),
    ...                       eval_metrics=task.build_metrics(training=False))
    >>> logs = evaluator.evaluate(-1)   # {"validation_loss": ..., "accuracy": ...}
"""

from __future__ import annotations

import contextlib
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

__all__ = ["Evaluator", "collect_logs"]

_logger = logging.getLogger("torchgarden")


class Evaluator:
    """Runs eval loops of a ``Task`` over ``eval_data``.

    Args:
        task: The task whose ``validation_step`` runs.
        model: The user's ``nn.Module`` (what checkpoints and EMA hold), on its device.
        eval_data: Iterable of eval batches, read once per ``evaluate()``. None: this
            object cannot ``evaluate()``.
        eval_metrics: Metrics updated by eval steps (torchmetrics objects are adapted).
        ema: Weight averages swapped in for evaluation. Default None.
        forward_model: The module steps call: ``model`` wrapped for autocast, DDP or
            ``torch.compile``. Defaults to ``model``.
        checkpoint_exporter: Exports the best checkpoint at the end of each evaluation.
        checkpoint_items: Extra objects saved in the checkpoint beside the built-in ones.
        runtime: The process' device and distribution strategy. Default: one process on
            the model's device.
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
    ) -> None:
        self._runtime = runtime or RuntimeContext(device=_device_of(model))
        device = self._runtime.device
        self._task = task
        self._raw_model = model
        self._model = forward_model if forward_model is not None else model
        self._ema = ema
        self._checkpoint_exporter = checkpoint_exporter
        self._move_inputs = make_batch_mover(device)
        self._global_step = GlobalStep()
        self._validation_dataset = eval_data
        self._validation_metrics = [on_device(as_metric(m), device) for m in eval_metrics]
        self._validation_loss = LossMean("validation_loss", device)
        self._last_eval_steps = 0
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
        return self._validation_loss

    @property
    def validation_metrics(self) -> list[Any]:
        return self._validation_metrics

    @property
    def checkpoint(self) -> Checkpoint:
        """Every object a checkpoint saves and restores (built on first access)."""
        if self._checkpoint is None:
            items = {**self.checkpoint_items(), **self._extra_checkpoint_items}
            if self._runtime.strategy == "fsdp":
                # Sharded state is saved gathered, in the single-process layout.
                items = distribute.full_state_items(
                    items, model=self._raw_model, optimizer=items.get("optimizer")
                )
            self._checkpoint = Checkpoint(**items)
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
        return self._validation_dataset

    def initialize(self) -> None:
        """Runs ``task.initialize(model)`` (init_checkpoint on a fresh ``model_dir``)."""
        self._task.initialize(self._raw_model)

    def evaluate(self, num_steps: int) -> Logs:
        """Runs ``num_steps`` eval steps (-1: the whole dataset) on a fresh iterator.

        Under ``torchrun`` each rank reads its own shard of the validation set, in which
        every example appears once (``build_dataloader`` does not pad it); shards may
        differ by a batch. Every rank still runs the same number of forward passes (FSDP2
        gathers parameters in each): a rank whose shard has ended repeats the forward of
        its last batch and counts nothing from it.
        """
        if self._validation_dataset is None:
            raise ValueError(
                "this Trainer has no eval_data; build it with eval_data to call evaluate()."
            )
        state = self.eval_begin()
        iterator: Any = DataIterator(self._validation_dataset, repeat=False)
        lockstep = _Lockstep(iterator, self._validation_dataset) if (
            distribute.is_distributed()) else None
        iterator = lockstep.iterator if lockstep is not None else iterator
        steps_done = steps_run = 0
        with torch.no_grad():
            while num_steps < 0 or steps_run < num_steps:
                if lockstep is not None and not lockstep.has_batch(steps_run):
                    if not lockstep.any_rank_continues(steps_run):
                        break
                    self._filler_forward(lockstep.last_batch())
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
        self._last_eval_steps = steps_done
        return self.eval_end(state) if state is not None else self.eval_end()

    def _filler_forward(self, batch: Any) -> None:
        """The forward of an eval step whose result nobody counts (keeps ranks in step)."""
        features, _ = self._task.split_inputs(self._move_inputs(batch))
        self._task.inference_step(features, self._model)

    def eval_begin(self) -> Any:
        """Resets validation metrics, swaps in EMA weights; returns the initial state."""
        for metric in self._validation_metrics:
            metric.reset_states()
        self._validation_loss.reset_states()
        if self._ema is not None:
            self._ema.swap_weights()
        self._model.eval()
        return None

    def next_eval_inputs(self, iterator: Iterator[Any]) -> tuple[Any, Logs]:
        """Returns ``(inputs, passthrough_logs)``; passthrough logs reach ``aggregate_logs``."""
        return self._move_inputs(next(iterator)), {}

    def eval_step(self, iterator: Iterator[Any]) -> Logs:
        """One validation step; returns ``{**passthrough_logs, **task_logs}``."""
        inputs, passthrough = self.next_eval_inputs(iterator)
        logs = self._task.validation_step(inputs, model=self._model, metrics=self._validation_metrics)
        if Task.loss in logs:
            self._validation_loss.update_state(logs[Task.loss])
        if passthrough:
            clash = passthrough.keys() & logs.keys()
            if clash:
                _logger.warning("passthrough log keys %s are overwritten by the task's logs",
                                sorted(clash))
            return {**passthrough, **logs}
        return logs

    def eval_reduce(self, state: Any = None, step_outputs: Logs | None = None) -> Any:
        """Delegates to ``task.aggregate_logs`` (host side, every eval step)."""
        return self._task.aggregate_logs(state=state, step_logs=step_outputs)

    def eval_end(self, aggregated_logs: Any = None) -> Logs:
        """Collects validation metrics, loss, reduced logs; exports the best checkpoint."""
        logs = collect_logs(self._validation_metrics, self._validation_loss, reset=False,
                        always_loss=False)
        if self._validation_loss.name not in logs:
            _logger.info("The task did not report validation loss.")
        if aggregated_logs:
            logs.update(
                self._task.reduce_aggregated_logs(
                    aggregated_logs, global_step=self._global_step.value
                )
            )
        if self._checkpoint_exporter is not None:
            self._checkpoint_exporter.maybe_export_checkpoint(
                self.checkpoint, logs, self._global_step.value
            )
            name = self._checkpoint_exporter.metric_name
            logs["best_" + name] = self._checkpoint_exporter.best_metric_value
        if self._ema is not None:
            self._ema.swap_weights()  # After export: the best checkpoint holds EMA weights.
        self._model.train()
        return logs

    @contextlib.contextmanager
    def ema_weights(self) -> Iterator[None]:
        """Context manager with the EMA weights swapped in (no-op without EMA)."""
        if self._ema is None:
            yield
            return
        self._ema.swap_weights()
        try:
            yield
        finally:
            self._ema.swap_weights()


def collect_logs(
    metrics: Sequence[Any], loss: LossMean, *, reset: bool, always_loss: bool
) -> Logs:
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


class _Lockstep:
    """Keeps every rank's eval loop at the same number of steps when shards differ.

    A sized loader's longest shard is agreed on once (one all-reduce); for an unsized
    one (a stream) the ranks agree after each step whether any still has a batch.

    Args:
        iterator: This rank's batch iterator.
        loader: The eval loader (its ``len()``, when it has one, is this rank's steps).
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
        self.iterator = self  # eval_step reads batches through this object.

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
        if self._steps is None:
            return self._continues
        return step < self._steps

    def last_batch(self) -> Any:
        """This rank's last batch, for a forward nobody counts.

        Raises:
            ValueError: This rank's shard was empty (fewer examples than ranks).
        """
        if self._last is self._END:
            raise ValueError(
                f"rank {distribute.get_rank()} has no validation example, but the other "
                "ranks' forward passes need it to run one too; use at least one validation "
                f"example per rank ({distribute.get_world_size()})."
            )
        return self._last


def _device_of(model: nn.Module) -> torch.device:
    for tensor in model.parameters():
        return tensor.device
    return torch.device("cpu")


def on_device(metric: Any, device: torch.device) -> Any:
    """``metric.to(device)`` for metrics that hold tensors; others unchanged."""
    to = getattr(metric, "to", None)
    return to(device) if to is not None else metric
