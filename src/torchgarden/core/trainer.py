"""``Trainer``: how N steps run (Model Garden's ``base_trainer.Trainer`` on PyTorch)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol

import torch
from torch import nn

from torchgarden.checkpoint import BestCheckpointExporter
from torchgarden.core.evaluator import Evaluator, adapt_metrics, collect_logs
from torchgarden.core.state import LossMean, TrainWindow
from torchgarden.core.task import Task
from torchgarden.data import DataIterator
from torchgarden.optim import ExponentialMovingAverage, FreezeSchedule, set_learning_rate
from torchgarden.runtime import RuntimeContext, StepPlan
from torchgarden.utils.logs import Logs

__all__ = ["StepFunction", "Trainer"]

class StepFunction(Protocol):
    """What runs one training step: ``Task.train_step`` or a drop-in replacement for it
    (e.g. ``torchgarden.compile.CompiledTrainStep``).

    A step function may also run several steps per call (Orbit's in-graph loop): it then
    has ``steps_per_call`` (K) and ``run_steps(batches, *, learning_rates, loss_sum,
    metrics)``, and the Trainer hands it K batches at a time (see :meth:`Trainer.train`).
    """

    def __call__(self, inputs: Any, *, model: nn.Module, optimizer: Any,
                 metrics: Sequence[Any]) -> Logs: ...


class Trainer(Evaluator):
    """Runs train and eval loops of a ``Task`` (Orbit's StandardTrainer + StandardEvaluator).

    Its contract with the Controller is only ``train(num_steps) -> logs`` and
    ``evaluate(num_steps) -> logs``. Hooks to override: ``train_loop_begin``,
    ``next_train_inputs``, ``train_step(iterator)``, ``train_loop_end`` and the
    ``Evaluator``'s. It never reads a config: ``train_lib.create_trainer`` builds one from
    an ``ExperimentConfig``, and a few lines of Python build one without (below). The step
    path does not synchronise with the device: the loss is added to a device tensor, read
    once per loop by the Controller; the learning rate is written only when it varies.

    Args:
        task: The task whose steps are run.
        optimizer: The optimizer (or ``optim.LossScaleOptimizer``); None to evaluate only.
        train_data: Iterable of train batches (restarted at each epoch end). None: the
            Trainer cannot ``train()``.
        train_metrics: Metrics updated by train steps (torchmetrics objects are adapted).
        lr_schedule: ``step -> learning rate``, written into the optimizer's param groups
            before each step (a schedule with ``is_constant = True``: once per loop).
            None leaves the optimizer's rate alone.
        ema: Weight averages updated after each step and swapped in for evaluation.
        step_fn: What runs a step; defaults to ``task.train_step``.
        plan: How steps run (``runtime.StepPlan``: steps per call of ``step_fn``, batches
            per optimizer update, a loss check after every step, the recovery replay).
            Default: one step per call, or ``step_fn.steps_per_call`` for a multi-step
            ``step_fn`` when nothing needs the host between steps.
        freeze: Which parameters train at each step (``optim.FreezeSchedule``), applied
            at each loop start and at the steps where it changes. None: as built.
        model, eval_data, eval_metrics, forward_model, checkpoint_items,
            checkpoint_exporter, runtime: As for :class:`Evaluator`.

    Example:
        >>> task = MyTask(MyTaskConfig())
        >>> model = task.build_model()
        >>> trainer = Trainer(
        ...     task=task, model=model,
        ...     optimizer=torch.optim.Adam(model.parameters(), lr=1e-3),
        ...     train_data=task.build_inputs(task.task_config.train_data),
        ...     eval_data=task.build_inputs(task.task_config.validation_data),
        ...     train_metrics=task.build_metrics(training=True),
        ...     eval_metrics=task.build_metrics(training=False))
        >>> logs = trainer.train(100)     # {"training_loss": ..., metrics..., "learning_rate": ...}
        >>> logs = trainer.evaluate(-1)   # {"validation_loss": ..., metrics...}
    """

    def __init__(
        self,
        *,
        task: Task,
        model: nn.Module,
        optimizer: Any = None,
        train_data: Iterable[Any] | None = None,
        eval_data: Iterable[Any] | None = None,
        train_metrics: Sequence[Any] = (),
        eval_metrics: Sequence[Any] = (),
        lr_schedule: Callable[[int], float] | None = None,
        ema: ExponentialMovingAverage | None = None,
        step_fn: StepFunction | None = None,
        forward_model: nn.Module | None = None,
        plan: StepPlan | None = None,
        checkpoint_items: Mapping[str, Any] | None = None,
        checkpoint_exporter: BestCheckpointExporter | None = None,
        runtime: RuntimeContext | None = None,
        freeze: FreezeSchedule | None = None,
        **moved: Any,
    ) -> None:
        _refuse_moved(moved)
        super().__init__(
            task=task, model=model, eval_data=eval_data, eval_metrics=eval_metrics, ema=ema,
            forward_model=forward_model, checkpoint_exporter=checkpoint_exporter,
            checkpoint_items=checkpoint_items, runtime=runtime,
        )
        self._optimizer = optimizer
        self._step_fn = step_fn or task.train_step
        host = self.host_between_steps(ema=ema)
        if plan is None:  # K steps per call when step_fn runs several and nothing needs the host.
            steps = getattr(step_fn, "steps_per_call", 1) if hasattr(step_fn, "run_steps") else 1
            plan = StepPlan.build(steps_per_call=steps, host_between_steps=host)
        _check_plan(plan, host, task, step_fn)
        self._plan = plan
        self._freeze = freeze
        self._lr_schedule = lr_schedule
        self._lr_varies = lr_schedule is not None and not getattr(lr_schedule, "is_constant", False)
        if optimizer is not None and lr_schedule is not None:
            set_learning_rate(optimizer, lr_schedule(0))
        #: Blow-up recovery sets it between loops while it replays: the loops then run
        #: under ``plan.replay`` (one step per call, the loss checked after each).
        self.replaying = False
        self._train_loss = LossMean("training_loss", self._runtime.device)
        self._train_metrics = adapt_metrics(train_metrics, self._runtime.device)
        self._train_dataset = train_data
        self._train_iterator = (DataIterator(train_data, repeat=True) if train_data is not None
                                else None)
        #: A ``runtime.PreemptionWatcher`` (set by ``run_experiment``); None = no checks.
        self.preemption: Any = None
        #: True when the last ``train()`` ended before ``num_steps`` (preemption, blow-up).
        self.stopped_early = False
        self._last_loss: Any = None
        self._blowup_loss: float | None = None
        self._window_open = False  # Preempted mid-loop: the resumed run finishes the window.

    def checkpoint_items(self) -> dict[str, Any]:
        """The Evaluator's items (model, step, EMA, RNGs) plus the optimizer, the data
        position and the open averaging window."""
        items = super().checkpoint_items()
        if self._optimizer is not None:
            items["optimizer"] = self._optimizer
        if self._train_iterator is not None:
            items["train_iterator"] = self._train_iterator
            items["train_window"] = TrainWindow(self._train_loss, self._train_metrics)
        return items

    @property
    def optimizer(self) -> Any:
        return self._optimizer

    @property
    def step_fn(self) -> StepFunction:
        """What runs one step: ``task.train_step`` unless another was given."""
        return self._step_fn

    @property
    def plan(self) -> StepPlan:
        """How steps run (frozen); :attr:`active_plan` is the one the next loop uses."""
        return self._plan

    @property
    def active_plan(self) -> StepPlan:
        """``plan.replay`` while blow-up recovery replays, else ``plan``."""
        return self._plan.replay if self.replaying and self._plan.replay else self._plan

    @property
    def train_loss(self) -> LossMean:
        return self._train_loss

    @property
    def train_metrics(self) -> list[Any]:
        return self._train_metrics

    @property
    def train_dataset(self) -> Any:
        return self._train_dataset

    @property
    def data_wait_seconds(self) -> float:
        """Seconds train steps have waited for batches from the loader (host clock)."""
        iterator = self._train_iterator
        return iterator.wait_seconds if iterator is not None else 0.0

    @property
    def data_counters(self) -> dict[str, float]:
        """What the train loader's stream counts (``data/skipped_records``), or {}."""
        counters = getattr(self._train_iterator, "counters", None)  # a DataIterator's
        return counters() if callable(counters) else {}

    def close(self) -> None:
        """Shuts the train loader's worker processes down; a later ``train()`` starts new
        ones at the same position (``run_experiment`` calls it when it ends)."""
        if self._train_iterator is not None:
            self._train_iterator.close()

    def learning_rate(self, step: int | None = None) -> float:
        """The scheduled learning rate at ``step`` (default: the current global step)."""
        if self._lr_schedule is None:
            return 0.0
        return float(self._lr_schedule(self._global_step.value if step is None else step))

    def train(self, num_steps: int) -> Logs:
        """Runs ``num_steps`` steps and returns the loop's logs (Orbit ``train``).

        Under a plan of K steps per call (``step_fn.run_steps``, e.g. the compiled
        in-graph loop) the steps go K at a time, and the ``num_steps % K`` left over one
        by one through :meth:`train_step`; under a plan with a loss check, the loss is
        read after every step.
        """
        iterator = self._train_iterator
        if iterator is None:
            raise ValueError("this Trainer has no train_data; build it with train_data to call "
                             "train().")
        self.train_loop_begin()
        plan = self.active_plan
        # Per-step stop checks cost one attribute read each unless enabled. Under
        # torchrun ranks must stop together, so preemption is agreed on by the
        # Controller at loop boundaries instead of here.
        preemption = self.preemption if not self._runtime.is_distributed else None
        check_loss = plan.check_loss  # None whenever plan.steps_per_call > 1.
        self.stopped_early = False
        k, train_step = plan.steps_per_call, self.train_step
        # K steps per call of the step function, the rest one by one.
        calls, single = divmod(num_steps, k) if k > 1 else (0, num_steps)
        for _ in range(calls):
            self._train_steps(iterator, k)
            if preemption is not None and preemption.requested:
                self.stopped_early = self._window_open = True
                return self.train_loop_end()
        for _ in range(single):
            train_step(iterator)
            if preemption is not None and preemption.requested:
                self.stopped_early = self._window_open = True
                break
            if check_loss is not None:
                loss = float(self._last_loss)  # Host sync, opted into by recovery_check_every_step.
                if check_loss(self._global_step.value, loss):
                    self._blowup_loss = loss
                    self.stopped_early = True
                    break
        return self.train_loop_end()

    def train_loop_begin(self) -> None:
        """Called before each loop of ``num_steps`` steps: train mode, scheduled LR.

        The learning rate is a pure function of the global step, so it is written here
        too: a constant schedule is then right after a restore put the checkpoint's
        ``lr`` back into the optimizer.
        """
        self._model.train()
        if self._freeze is not None:  # A pure function of the step, like the rate.
            self._freeze.apply(self._global_step.value)
        if self._optimizer is not None and self._lr_schedule is not None:
            set_learning_rate(self._optimizer, self._lr_schedule(self._global_step.value))

    def next_train_inputs(self, iterator: Iterator[Any]) -> Any:
        """Returns the next batch, on the model's device."""
        batch = next(iterator)
        return batch if self._batches_in_place else self._move_inputs(batch)

    def train_step(self, iterator: Iterator[Any]) -> None:
        """One global step: the scheduled LR, ``step_fn`` on the next batch, the loss meter,
        EMA, and the step counter.

        With ``gradient_accumulation_steps = k`` a step consumes k batches and performs
        one optimizer update (see :meth:`accumulate_gradients`).
        """
        step = self._global_step.value
        if self._lr_varies:
            set_learning_rate(self._optimizer, self._lr_schedule(step))  # type: ignore[misc]
        if self._freeze is not None and step in self._freeze.change_steps:
            self._freeze.apply(step)
        if self._plan.accumulation_steps == 1:
            logs = self._step_fn(self.next_train_inputs(iterator), model=self._model,
                                 optimizer=self._optimizer, metrics=self._train_metrics)
            loss = logs[Task.loss]
        else:
            loss = self.accumulate_gradients(iterator)
        self._train_loss.update_state(loss)
        self._last_loss = loss
        if self._ema is not None:
            self._ema.update(step + 1)
        self._global_step.value = step + 1

    def _train_steps(self, iterator: Iterator[Any], k: int) -> None:
        """k global steps in one call of a multi-step ``step_fn`` (the compiled loop):
        the batches and the scheduled rates are gathered first, and the step function
        adds the losses to the loss meter itself."""
        step = self._global_step.value
        batches = [self.next_train_inputs(iterator) for _ in range(k)]
        rates = [self._lr_schedule(step + i) for i in range(k)] if self._lr_varies else None
        self._step_fn.run_steps(  # type: ignore[attr-defined]
            batches, learning_rates=rates, loss_sum=self._train_loss.total,
            metrics=self._train_metrics,
        )
        self._train_loss.count += k
        if rates is not None:
            set_learning_rate(self._optimizer, rates[-1])
        self._global_step.value = step + k

    @classmethod
    def host_between_steps(cls, *, ema: Any) -> list[str]:
        """What needs this Trainer class on the host after every step (a ``StepPlan`` of
        one step per call): the weight EMA, an overridden ``train_step``."""
        return [what for what, needed in (
            ("the weight EMA", ema is not None),
            ("an overridden train_step", cls.train_step is not Trainer.train_step),
        ) if needed]

    def accumulate_gradients(self, iterator: Iterator[Any]) -> torch.Tensor:
        """k = ``gradient_accumulation_steps`` batches through ``task.forward_backward``
        (gradients add up in ``.grad``), then one ``optimizer.step()``.

        Returns:
            The mean of the k batch losses (detached).
        """
        k = self._plan.accumulation_steps
        optimizer, total = self._optimizer, None
        optimizer.zero_grad(set_to_none=True)
        for micro_step in range(k):
            # DDP all-reduce / FSDP2 reduce-scatter only on the last backward.
            self._runtime.strategy.set_gradient_sync(self._model, micro_step == k - 1)
            logs = self._task.forward_backward(self.next_train_inputs(iterator), self._model,
                                               optimizer, self._train_metrics, accumulation_steps=k)
            loss = logs[Task.loss]
            total = loss if total is None else total + loss
        optimizer.step()
        return total / k

    def train_loop_end(self) -> Logs:
        """Collects window-averaged train metrics and loss, then resets them.

        After a preemption stop mid-loop they are not reset: the preemption checkpoint
        keeps the partial window for the resumed run to finish.

        Returns:
            ``{metric names..., "training_loss": ..., "learning_rate": ...}``. Values are
            device tensors or floats; the Controller reads them once per loop.
        """
        reset = not self._window_open
        self._window_open = False
        logs = collect_logs(self._train_metrics, self._train_loss, reset=reset, always_loss=True)
        if self._blowup_loss is not None:
            # Report the offending step's loss so the recovery action sees the blow-up.
            logs[self._train_loss.name] = self._blowup_loss
            self._blowup_loss = None
        logs["learning_rate"] = self.learning_rate()
        return logs


def _check_plan(plan: StepPlan, host: list[str], task: Task, step_fn: Any) -> None:
    """Refuses a plan the Trainer cannot run as stated (``host``: what needs the host
    between steps)."""
    k, steps = plan.steps_per_call, plan.accumulation_steps
    if k > 1 and (host or not hasattr(step_fn, "run_steps")):
        needs = ", ".join(host) or "a step_fn without run_steps"
        raise ValueError(f"plan.steps_per_call={k}, but {needs} needs one step per call; "
                         "build the plan with StepPlan.build(host_between_steps=...).")
    if steps > 1 and (step_fn is not None or type(task).train_step is not Task.train_step):
        owner = "a step_fn was given" if step_fn is not None else (
            f"{type(task).__name__} overrides train_step")
        raise ValueError(
            f"gradient_accumulation_steps={steps} runs task.forward_backward on each batch "
            f"and one optimizer.step(), but {owner}. Override forward_backward instead, or "
            "accumulate inside your own train_step and set gradient_accumulation_steps to 1.")


#: Trainer arguments that moved, and where to.
_MOVED = {"gradient_accumulation_steps": "plan=StepPlan(accumulation_steps=...)",
          "check_loss": "plan=StepPlan(check_loss=...)"}


def _refuse_moved(arguments: Mapping[str, Any]) -> None:
    for name in arguments:
        where = f"; it moved: pass {_MOVED[name]} (torchgarden.runtime.StepPlan)" if (
            name in _MOVED) else ""
        raise TypeError(f"Trainer() got an unexpected keyword argument {name!r}{where}.")
