"""``Trainer``: how N steps run — Model Garden's ``base_trainer.Trainer`` on PyTorch.

The Trainer owns the model, the optimizer, the data iterators, the global step, the
loss meters and the checkpoint items. Its contract with the Controller is only
``train(num_steps) -> logs`` and ``evaluate(num_steps) -> logs`` (REFERENCE §3, §4.2).
Every hook is a method to override: ``train_loop_begin``, ``train_step(iterator)``,
``train_loop_end``, ``next_train_inputs``, ``eval_begin``, ``eval_step(iterator)``,
``eval_reduce``, ``eval_end``, ``next_eval_inputs``.

Speed notes: the step path does no host-device synchronisation. The loss is added to a
device tensor each step and read once per loop by the Controller; metrics update on
device; the learning rate is written only when the schedule is not constant.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from torchgarden.core.state import GlobalStep, LossMean, RngState, TrainWindow
from torchgarden.core.task import Logs, Task

if TYPE_CHECKING:
    from torchgarden.checkpoint import BestCheckpointExporter, Checkpoint
    from torchgarden.config import ExperimentConfig
    from torchgarden.runtime import RuntimeContext

__all__ = ["Trainer"]

_logger = logging.getLogger("torchgarden")


class _GradientAccumulation:
    """Optimizer view used for micro-steps: only the last micro-step updates weights.

    ``scale(loss)`` divides by the number of micro-steps (and applies the loss scale
    under float16); ``zero_grad`` acts on the first micro-step and ``step`` on the last.
    On non-final micro-steps DDP gradient all-reduce is switched off.
    """

    def __init__(self, optimizer: Any, num_steps: int, model: nn.Module) -> None:
        self.optimizer = optimizer
        self.num_steps = num_steps
        self.micro_step = 0
        self._model = model
        self._inner_scale = getattr(optimizer, "scale", None)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.optimizer, name)

    def begin(self, micro_step: int) -> None:
        self.micro_step = micro_step
        from torchgarden.distribute import set_gradient_sync

        # DDP all-reduce / FSDP2 reduce-scatter only on the last micro-step.
        set_gradient_sync(self._model, micro_step == self.num_steps - 1)

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        loss = loss / self.num_steps
        return self._inner_scale(loss) if self._inner_scale is not None else loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        if self.micro_step == 0:
            self.optimizer.zero_grad(set_to_none=set_to_none)

    def step(self, *args: Any, **kwargs: Any) -> Any:
        if self.micro_step == self.num_steps - 1:
            return self.optimizer.step(*args, **kwargs)
        return None


class Trainer:
    """Runs train and eval loops of a ``Task`` (StandardTrainer + StandardEvaluator).

    Args:
        config: The experiment config (``trainer`` and ``runtime`` sections are read).
        task: The task whose steps are run.
        model: The model built by ``task.build_model()``; moved to the runtime device.
        optimizer: The optimizer from ``task.create_optimizer``.
        train: Build training state (train metrics, train data). Default True.
        evaluate: Build evaluation state. Default True.
        train_dataset: Iterable of train batches; default ``task.build_inputs(train_data)``.
        validation_dataset: Iterable of eval batches; default from ``validation_data``.
        checkpoint_exporter: Optional best-checkpoint exporter run in ``eval_end``.
        runtime: The process' ``RuntimeContext``; default: single CPU/CUDA device.
        lr_schedule: Callable ``step -> lr``; default built from the optimizer config.
    """

    def __init__(
        self,
        *,
        config: ExperimentConfig,
        task: Task,
        model: nn.Module,
        optimizer: torch.optim.Optimizer | None,
        train: bool = True,
        evaluate: bool = True,
        train_dataset: Iterable[Any] | None = None,
        validation_dataset: Iterable[Any] | None = None,
        checkpoint_exporter: BestCheckpointExporter | None = None,
        runtime: RuntimeContext | None = None,
        lr_schedule: Any = None,
    ) -> None:
        from torchgarden import optim
        from torchgarden.checkpoint import Checkpoint
        from torchgarden.data import DataIterator, InputContext
        from torchgarden.metrics import as_metric
        from torchgarden.runtime import RuntimeContext, autocast_forward

        for attr in ("task", "trainer", "runtime"):
            if not hasattr(config, attr):
                raise AttributeError(
                    f"Trainer needs an ExperimentConfig with a '{attr}' section; got "
                    f"{type(config).__name__}."
                )
        self._config = config
        self._task = task
        self._runtime = runtime or RuntimeContext(
            device=torch.device("cuda" if torch.cuda.is_available() else "cpu")
        )
        device = self._runtime.device
        trainer_cfg = config.trainer

        self._raw_model = model.to(device)
        self._model = self._wrap_model(self._raw_model, autocast_forward)
        self._optimizer = optimizer
        self._global_step = GlobalStep()
        self._train_loss = LossMean("training_loss", device)
        self._validation_loss = LossMean("validation_loss", device)
        self._checkpoint_exporter = checkpoint_exporter
        self._move_inputs = device.type != "cpu"
        self._accumulation_steps = int(getattr(trainer_cfg, "gradient_accumulation_steps", 1))
        self._step_optimizer: Any = optimizer
        if optimizer is not None and self._accumulation_steps > 1:
            self._step_optimizer = _GradientAccumulation(
                optimizer, self._accumulation_steps, self._model
            )

        self._lr_schedule = lr_schedule
        if self._lr_schedule is None and optimizer is not None:
            self._lr_schedule = optim.build_learning_rate(trainer_cfg.optimizer_config)
        self._lr_varies = self._lr_schedule is not None and not getattr(
            self._lr_schedule, "is_constant", False
        )
        if optimizer is not None and self._lr_schedule is not None:
            optim.set_learning_rate(optimizer, self._lr_schedule(0))

        self._ema = None
        ema_cfg = trainer_cfg.optimizer_config.ema
        if ema_cfg is not None and optimizer is not None:
            self._ema = optim.ExponentialMovingAverage(
                self._raw_model,
                average_decay=ema_cfg.average_decay,
                start_step=ema_cfg.start_step,
                dynamic_decay=ema_cfg.dynamic_decay,
                trainable_weights_only=ema_cfg.trainable_weights_only,
            )

        context = InputContext(
            num_replicas=self._runtime.world_size, replica_id=self._runtime.rank
        )
        self._train_metrics: list[Any] = []
        self._validation_metrics: list[Any] = []
        self._train_iterator: DataIterator | None = None
        self._train_dataset = self._validation_dataset = None
        if train:
            self._train_metrics = [
                self._to_device(as_metric(m)) for m in task.build_metrics(training=True)
            ]
            self._train_dataset = (
                train_dataset
                if train_dataset is not None
                else task.build_inputs(config.task.train_data, input_context=context)
            )
            _check_yields_batches(self._train_dataset, config.task.train_data)
            self._train_iterator = DataIterator(self._train_dataset, repeat=True)
        if evaluate:
            self._validation_metrics = [
                self._to_device(as_metric(m)) for m in task.build_metrics(training=False)
            ]
            self._validation_dataset = (
                validation_dataset
                if validation_dataset is not None
                else task.build_inputs(config.task.validation_data, input_context=context)
            )

        items: dict[str, Any] = {"model": self._raw_model, "global_step": self._global_step}
        if optimizer is not None:
            items["optimizer"] = optimizer
        if self._ema is not None:
            items["ema"] = self._ema
        if self._train_iterator is not None:
            items["train_iterator"] = self._train_iterator
            items["train_window"] = TrainWindow(self._train_loss, self._train_metrics)
        items["rng"] = RngState()
        items.update(getattr(self._raw_model, "checkpoint_items", {}) or {})
        if self._runtime.strategy == "fsdp":
            from torchgarden import distribute

            if optimizer is not None:
                distribute.rebind_optimizer(optimizer, self._sharded_parameters)
            # Sharded state is saved gathered, in the single-process layout (any world size).
            items = distribute.full_state_items(items, model=self._raw_model, optimizer=optimizer)
        self._checkpoint: Checkpoint = Checkpoint(**items)
        self._task_train_step = task.train_step
        self._compiled_step = None
        #: A ``runtime.PreemptionWatcher`` (set by ``run_experiment``); None = no checks.
        self.preemption: Any = None
        #: True when the last ``train()`` ended before ``num_steps`` (preemption, blow-up).
        self.stopped_early = False
        self._check_loss_every_step = bool(
            getattr(trainer_cfg, "recovery_check_every_step", False)
            and trainer_cfg.recovery_max_trials >= 0
        )
        self._last_loss: Any = None
        self._blowup_loss: float | None = None
        self._window_open = False  # Preempted mid-loop: the resumed run finishes the window.

    # ------------------------------------------------------------------ construction helpers

    def _wrap_model(self, model: nn.Module, autocast_forward: Any) -> nn.Module:
        runtime = self._runtime
        if runtime.autocast_dtype is not None:
            model = autocast_forward(model, runtime.device.type, runtime.autocast_dtype)
        if runtime.strategy == "ddp":
            from torch.nn.parallel import DistributedDataParallel

            ids = [runtime.device.index] if runtime.device.type == "cuda" else None
            model = DistributedDataParallel(model, device_ids=ids)
        elif runtime.strategy == "fsdp":
            from torchgarden.distribute import shard_model

            # New DTensor parameters replace the old ones; __init__ rebinds the optimizer.
            self._sharded_parameters = shard_model(model)
        if getattr(self._config.runtime, "enable_xla", False):
            model = torch.compile(model, mode=self._config.runtime.compile_mode)
        return model

    def _to_device(self, metric: Any) -> Any:
        to = getattr(metric, "to", None)
        return to(self._runtime.device) if to is not None else metric

    # ------------------------------------------------------------------ properties

    @property
    def config(self) -> ExperimentConfig:
        return self._config

    @property
    def task(self) -> Task:
        return self._task

    @property
    def model(self) -> nn.Module:
        """The model as trained (wrapped for DDP/autocast/compile when configured)."""
        return self._model

    @property
    def unwrapped_model(self) -> nn.Module:
        """The user's ``nn.Module`` as built by the task (what checkpoints hold)."""
        return self._raw_model

    @property
    def optimizer(self) -> Any:
        return self._optimizer

    @property
    def global_step(self) -> GlobalStep:
        return self._global_step

    @property
    def train_loss(self) -> LossMean:
        return self._train_loss

    @property
    def validation_loss(self) -> LossMean:
        return self._validation_loss

    @property
    def train_metrics(self) -> list[Any]:
        return self._train_metrics

    @property
    def validation_metrics(self) -> list[Any]:
        return self._validation_metrics

    @property
    def checkpoint(self) -> Checkpoint:
        return self._checkpoint

    @property
    def checkpoint_exporter(self) -> BestCheckpointExporter | None:
        return self._checkpoint_exporter

    @property
    def runtime(self) -> RuntimeContext:
        return self._runtime

    @property
    def ema(self) -> Any:
        return self._ema

    @property
    def train_dataset(self) -> Any:
        return self._train_dataset

    @property
    def eval_dataset(self) -> Any:
        return self._validation_dataset

    @property
    def steps_per_loop(self) -> int:
        return self._config.trainer.steps_per_loop

    def learning_rate(self, step: int | None = None) -> float:
        """The scheduled learning rate at ``step`` (default: the current global step)."""
        if self._lr_schedule is None:
            return 0.0
        return float(self._lr_schedule(self._global_step.value if step is None else step))

    def initialize(self) -> None:
        """Runs ``task.initialize(model)`` (init_checkpoint on a fresh ``model_dir``)."""
        self._task.initialize(self._raw_model)

    # ------------------------------------------------------------------ training

    def train(self, num_steps: int) -> Logs:
        """Runs ``num_steps`` steps and returns the loop's logs (Orbit ``train``)."""
        self.train_loop_begin()
        iterator = self._train_iterator
        if iterator is None:
            raise ValueError(
                "this Trainer was built with train=False; build it with train=True to call "
                "train()."
            )
        self._prepare_compiled_step()
        train_step = self.train_step
        # Per-step stop checks cost one attribute read each unless enabled. Under
        # torchrun ranks must stop together, so preemption is agreed on by the
        # Controller at loop boundaries instead of here.
        preemption = self.preemption if not self._runtime.is_distributed else None
        check_loss = self._check_loss_every_step
        self.stopped_early = False
        for _ in range(num_steps):
            train_step(iterator)
            if preemption is not None and preemption.requested:
                self.stopped_early = self._window_open = True
                break
            if check_loss and self._loss_blew_up():
                self.stopped_early = True
                break
        return self.train_loop_end()

    def _prepare_compiled_step(self) -> None:
        """Builds the whole-step graph once when ``runtime.enable_xla`` is set.

        Falls back (with one log line saying why) to the eager step on the compiled
        model when the setup is not covered (see ``core._compiled_step``). With the
        graph in use, evaluation runs the compiled model only if ``runtime.compile_eval``.
        """
        runtime_cfg = self._config.runtime
        if self._compiled_step is not None or not getattr(runtime_cfg, "enable_xla", False):
            return
        if getattr(self, "_compiled_step_reason", None) is not None:
            return
        from torchgarden.core._compiled_step import CompiledTrainStep, unsupported_reason

        eager_model = getattr(self._model, "_orig_mod", self._model)
        reason = unsupported_reason(
            task=self._task,
            model=eager_model,
            optimizer=self._step_optimizer,
            strategy=self._runtime.strategy,
            accumulation_steps=self._accumulation_steps,
        )
        if reason is not None:
            self._compiled_step_reason = reason
            _logger.info("runtime.enable_xla: compiling the model only, not the whole "
                         "step: %s.", reason)
            return
        self._compiled_step = CompiledTrainStep(
            self._task, eager_model, self._optimizer, mode=runtime_cfg.compile_mode
        )
        if not getattr(runtime_cfg, "compile_eval", False):
            self._model = eager_model

    def _loss_blew_up(self) -> bool:
        """Per-step loss check (``trainer.recovery_check_every_step``): one host sync."""
        loss = float(self._last_loss)  # Host sync, opted into by the config.
        cfg = self._config.trainer
        bad = loss != loss or (
            self._global_step.value >= cfg.recovery_begin_steps and loss > cfg.loss_upper_bound
        )
        if bad:
            self._blowup_loss = loss
        return bad

    def train_loop_begin(self) -> None:
        """Called before each loop of ``num_steps`` steps: train mode, scheduled LR.

        The learning rate is a pure function of the global step, so it is written here
        too: a constant schedule is then right after a restore put the checkpoint's
        ``lr`` back into the optimizer.
        """
        self._model.train()
        if self._optimizer is not None and self._lr_schedule is not None:
            lr = self._lr_schedule(self._global_step.value)
            for group in self._optimizer.param_groups:
                group["lr"] = lr

    def next_train_inputs(self, iterator: Iterator[Any]) -> Any:
        """Returns the next batch, on the model's device."""
        inputs = next(iterator)
        if self._move_inputs:
            from torchgarden.data import move_to_device

            inputs = move_to_device(inputs, self._runtime.device)
        return inputs

    def train_step(self, iterator: Iterator[Any]) -> None:
        """One global step: fetch, ``task.train_step``, update the loss meter and step.

        With ``trainer.gradient_accumulation_steps = k`` a step consumes k batches and
        performs one optimizer update.
        """
        step = self._global_step.value
        if self._lr_varies:
            lr = self._lr_schedule(step)
            for group in self._optimizer.param_groups:
                group["lr"] = lr
        optimizer = self._step_optimizer
        if self._compiled_step is not None:  # runtime.enable_xla: one graph per step.
            loss = self._compiled_step(self.next_train_inputs(iterator), self._train_metrics)
            self._train_loss.update_state(loss)
            self._last_loss = loss
        elif self._accumulation_steps == 1:
            inputs = self.next_train_inputs(iterator)
            logs = self._task_train_step(
                inputs, model=self._model, optimizer=optimizer, metrics=self._train_metrics
            )
            loss = logs[Task.loss]
            self._train_loss.update_state(loss)
            self._last_loss = loss
        else:
            total = None
            for micro_step in range(self._accumulation_steps):
                optimizer.begin(micro_step)
                inputs = self.next_train_inputs(iterator)
                logs = self._task_train_step(
                    inputs, model=self._model, optimizer=optimizer, metrics=self._train_metrics
                )
                loss = logs[Task.loss]
                total = loss if total is None else total + loss
            self._last_loss = total / self._accumulation_steps
            self._train_loss.update_state(self._last_loss)
        if self._ema is not None:
            self._ema.update(step + 1)
        self._global_step.value = step + 1

    def train_loop_end(self) -> Logs:
        """Collects window-averaged train metrics and loss, then resets them.

        After a preemption stop mid-loop they are not reset: the preemption checkpoint
        keeps the partial window for the resumed run to finish.

        Returns:
            ``{metric names..., "training_loss": ..., "learning_rate": ...}``. Values are
            device tensors or floats; the Controller reads them once per loop.
        """
        logs: Logs = {}
        reset = not self._window_open
        self._window_open = False
        for metric in self._train_metrics:
            sync = getattr(metric, "sync", None)
            if sync is not None:
                sync()  # All-reduce over ranks (no-op in one process).
            _collect_result(logs, metric)
            if reset:
                metric.reset_states()
        self._train_loss.sync()
        logs[self._train_loss.name] = self._train_loss.result().clone()
        if reset:
            self._train_loss.reset_states()
        if self._blowup_loss is not None:
            # Report the offending step's loss so the recovery action sees the blow-up.
            logs[self._train_loss.name] = self._blowup_loss
            self._blowup_loss = None
        logs["learning_rate"] = self.learning_rate()
        return logs

    # ------------------------------------------------------------------ evaluation

    def evaluate(self, num_steps: int) -> Logs:
        """Runs ``num_steps`` eval steps (-1: the whole dataset) on a fresh iterator."""
        from torchgarden.data import DataIterator

        if self._validation_dataset is None:
            raise ValueError(
                "this Trainer was built with evaluate=False; build it with evaluate=True to "
                "call evaluate()."
            )
        state = self.eval_begin()
        iterator = DataIterator(self._validation_dataset, repeat=False)
        steps_done = 0
        with torch.no_grad():
            while num_steps < 0 or steps_done < num_steps:
                try:
                    outputs = self.eval_step(iterator)
                except StopIteration:
                    break
                state = self.eval_reduce(state, outputs)
                steps_done += 1
        if num_steps > 0 and steps_done < num_steps:
            _logger.info("The dataset iterator is exhausted after %d steps.", steps_done)
        self._last_eval_steps = steps_done
        return self.eval_end(state) if state is not None else self.eval_end()

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
        inputs = next(iterator)
        if self._move_inputs:
            from torchgarden.data import move_to_device

            inputs = move_to_device(inputs, self._runtime.device)
        return inputs, {}

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
        logs: Logs = {}
        for metric in self._validation_metrics:
            sync = getattr(metric, "sync", None)
            if sync is not None:
                sync()
            _collect_result(logs, metric)
        self._validation_loss.sync()
        if self._validation_loss.count:
            logs[self._validation_loss.name] = self._validation_loss.result().clone()
        else:
            _logger.info("The task did not report validation loss.")
        if aggregated_logs:
            logs.update(
                self._task.reduce_aggregated_logs(
                    aggregated_logs, global_step=self._global_step.value
                )
            )
        if self._checkpoint_exporter is not None:
            self._checkpoint_exporter.maybe_export_checkpoint(
                self._checkpoint, logs, self._global_step.value
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


def _check_yields_batches(loader: Any, data_config: Any) -> None:
    """Fails before training when a sized train loader has no batch (e.g. fewer examples
    than one batch under ``drop_remainder``), instead of at the first step."""
    try:
        empty = len(loader) == 0
        examples = len(loader.dataset)
    except (TypeError, AttributeError):  # Unsized iterables are checked by DataIterator.
        return
    if empty:
        raise ValueError(
            f"task.train_data yields no batch: {examples} examples "
            f"(input_path={getattr(data_config, 'input_path', '')!r}) and global_batch_size="
            f"{getattr(data_config, 'global_batch_size', '?')} with drop_remainder=True; lower "
            "task.train_data.global_batch_size or set task.train_data.drop_remainder=false."
        )


def _collect_result(logs: Logs, metric: Any) -> None:
    result = metric.result()
    if isinstance(result, dict):
        logs.update(result)
    else:
        logs[metric.name] = result

