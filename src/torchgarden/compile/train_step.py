"""The compiled training step behind ``runtime.enable_xla`` (Model Garden's in-graph loop).

An opt-in step function for the ``Trainer`` (its ``step_fn``): ``create_trainer`` hands
it over when ``runtime.enable_xla`` is set and the setup is covered; otherwise the
Trainer runs ``Task.train_step`` on the ``torch.compile``-d model.

Model Garden runs ``steps_per_loop`` steps inside one graph (Orbit's ``for _ in
tf.range(steps_per_loop)`` in a ``tf.function``). Here one ``torch.compile`` graph runs
``steps_per_call`` (K) whole steps of the default ``Task.train_step``, unrolled, so K
steps cost one compiled call instead of K calls, or K times a few hundred eager operator
dispatches and a Python walk of the autograd graph:

* the K batches are gathered before the call and enter it as a list;
* gradients come from ``torch.func.grad_and_value`` over the model's trainable
  parameters (``functional_call``), inside the graph;
* the update is applied in place to the optimizer's own state tensors (see
  ``functional_optim``), so ``state_dict()``, checkpoints and the eager path stay
  interchangeable; each step's learning rate and bias corrections enter as one row of
  a float32 tensor, so schedules never recompile;
* the training-loss sum and the train metrics (``torchgarden.metrics.Metric`` objects)
  are updated inside the graph; metrics the graph cannot trace are updated by the host
  from the graph's outputs (one log line says so).

The first K steps run eagerly through ``task.train_step``: the optimizer then creates its
state exactly as torch does, and the graph reads that state. Steps that do not fill a
K-step call (a loop shortened by a preemption) run eagerly too. Every other call is one
call of the graph (a second compile happens only if a checkpoint restore replaces the
optimizer state with tensors of other shapes, or batches of another shape arrive).
Hyperparameters other than the learning rate (momentum, betas, weight decay) are read
when the graph is bound to the optimizer: at the first compiled call, after a restore
and after eager steps.

Per-call cost matters for small models, so two of torch.compile's per-call checks are
not repeated: inductor's size asserts are off, and while the batches have the same
structure, shapes, strides and dtypes as batches that passed every guard (and train and
grad modes are unchanged), the call runs under ``set_stance(skip_guard_eval_unsafe=
True)``. Anything else (a new shape, a restore) goes through the full guards again.
Each Trainer compiles its own copy of the step function, so trainers built in one
process never share (or exhaust) a compile cache.

What the path does not cover falls back to the eager step (``unsupported_reason`` says
why): tasks that override ``train_step`` or ``forward_backward``, DDP/FSDP, gradient
accumulation, optimizers other than SGD/Adam/AdamW (exact classes), optimizers with step
hooks (gradient clipping), float16 loss scaling, models with
``torchgarden.layers.Layer`` auxiliary losses, and models with transformers' activation
checkpointing on. A step that ``torch.compile`` cannot
capture as one graph falls back too, at its first call, with one log line.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from torchgarden.compile._graph import fresh_function, signature, skip_guards_context, whole_steps
from torchgarden.compile.coverage import choose_steps_per_call, unsupported_reason
from torchgarden.compile.functional_optim import GroupUpdate, build_updates
from torchgarden.core import Task
from torchgarden.metrics import Metric
from torchgarden.optim import set_learning_rate
from torchgarden.runtime.strategy import Strategy
from torchgarden.utils.logs import Logs

__all__ = [
    "CompiledTrainStep",
    "choose_steps_per_call",
    "compiled_train_step",
    "unsupported_reason",
]

_logger = logging.getLogger("torchgarden")

class CompiledTrainStep:
    """Runs the default ``Task.train_step`` as one ``torch.compile`` graph per K steps.

    A ``Trainer`` step function. The Trainer calls :meth:`run_steps` with K batches at a
    time; called like ``task.train_step`` (one batch) it runs one step: through the
    graph when K is 1, else eagerly. It is bound to the model and optimizer it was built
    with. Build it only when ``unsupported_reason`` returns None (or through
    :func:`compiled_train_step`).

    Args:
        task: The task whose losses define the step.
        model: The model (autocast-wrapped is fine).
        optimizer: An ``SGD``, ``Adam`` or ``AdamW`` without step hooks.
        mode: ``torch.compile`` mode (e.g. ``"reduce-overhead"`` for CUDA graphs on a
            GPU). Defaults to None (torch's default).
        steps_per_call: K, the steps one graph call runs. Defaults to 1.

    Example:
        >>> step = CompiledTrainStep(task, model, optimizer, steps_per_call=10)
        >>> loss_sum = torch.zeros(())
        >>> step.run_steps(batches[:10], learning_rates=None, loss_sum=loss_sum, metrics=[])
    """

    def __init__(
        self, task: Task, model: nn.Module, optimizer: torch.optim.Optimizer, *,
        mode: str | None = None, steps_per_call: int = 1,
    ) -> None:
        self.task = task
        self.model = model
        self.optimizer = optimizer
        self.steps_per_call = int(steps_per_call)
        #: Train metrics are updated inside the graph (False after a failed capture).
        self.metrics_in_graph = True
        self.names: list[str] = []
        self.buffer_names: list[str] = []
        self.updates: list[GroupUpdate] = []
        function = fresh_function(whole_steps)
        if mode is None:
            # Inductor's per-call size/stride asserts repeat what the guards (or, with
            # guards skipped, the batch signature) already checked. On a CPU, the C++
            # wrapper allocates buffers and calls kernels without Python (about 1 µs per
            # buffer and kernel saved, more than a step's Adam update on small models).
            on_cpu = all(p.device.type == "cpu" for p in model.parameters())
            options = {"size_asserts": False, "cpp_wrapper": on_cpu}
            self._graph = torch.compile(function, fullgraph=True, options=options)
        else:
            self._graph = torch.compile(function, fullgraph=True, mode=mode)
        self._skip_guards = skip_guards_context()
        self._trusted: Any = None
        self._eager_reason: str | None = None  # Set when the graph cannot be captured.
        # CUDA-graph modes: a step's outputs are dead once the next step starts.
        self._mark_step = mode in ("reduce-overhead", "max-autotune")
        self._params: list[torch.Tensor] = []
        self._buffers: list[torch.Tensor] = []
        self._states: list[list[list[Any]]] = []
        self._state_owner: Any = None
        self._group_updates: list[list[GroupUpdate]] = []
        self._loss_scratch: torch.Tensor | None = None
        self._stepped = False  # An eager step ran (SGD without momentum has no state).

    def __call__(
        self, inputs: Any, *, model: Any = None, optimizer: Any = None,
        metrics: Sequence[Any] | None = None,
    ) -> Logs:
        """One step on one batch; returns ``{"loss": detached loss}``."""
        del model, optimizer  # Bound at construction.
        if self.steps_per_call != 1 or not self._ready():
            return self._eager_step(inputs, metrics)
        if self._loss_scratch is None:
            self._loss_scratch = torch.zeros((), device=self._device)
        losses = self._call_graph([inputs], None, self._loss_scratch, metrics or [])
        if losses is None:
            return self._eager_step(inputs, metrics)
        return {Task.loss: losses[0]}

    def run_steps(
        self,
        batches: Sequence[Any],
        *,
        learning_rates: Sequence[float] | None,
        loss_sum: torch.Tensor,
        metrics: Sequence[Any],
    ) -> None:
        """Runs ``len(batches)`` (K) steps in one call of the graph.

        Args:
            batches: K batches, on the model's device.
            learning_rates: Each step's scheduled rate (written to every param group,
                as ``optim.set_learning_rate`` does); None keeps the groups' rates.
            loss_sum: Each step's loss is added to it in place (the Trainer's meter).
            metrics: Train metrics to update with each step's outputs.
        """
        if (len(batches) != self.steps_per_call or not self._ready()
                or self._call_graph(batches, learning_rates, loss_sum, metrics) is None):
            for i, inputs in enumerate(batches):
                if learning_rates is not None:
                    set_learning_rate(self.optimizer, learning_rates[i])
                loss_sum.add_(self._eager_step(inputs, metrics)[Task.loss])

    def _ready(self) -> bool:
        """Binds the graph to the optimizer's state when needed; False: step eagerly."""
        if self._eager_reason is not None:
            return False
        if self.optimizer.state is not self._state_owner:  # First step, restore, eager step.
            if not self.optimizer.state and not self._stepped:
                return False  # The optimizer creates its state in an eager step first.
            self._bind()
        return True

    def _eager_step(self, inputs: Any, metrics: Sequence[Any] | None) -> Logs:
        logs = self.task.train_step(inputs, model=self.model, optimizer=self.optimizer,
                                    metrics=metrics)
        self._state_owner = None  # The state moved on without the graph: bind again.
        self._stepped = True
        return logs

    def _call_graph(
        self, batches: Sequence[Any], learning_rates: Sequence[float] | None,
        loss_sum: torch.Tensor, metrics: Sequence[Any],
    ) -> list[torch.Tensor] | None:
        """The graph on ``batches``; None when it cannot be captured (step eagerly)."""
        scalars = self._scalars(learning_rates, len(batches))
        if self._mark_step:
            torch.compiler.cudagraph_mark_step_begin()
        arguments = (self, self._params, self._buffers, self._states, scalars, batches,
                     loss_sum, metrics)
        # What the graph depends on beyond fixed objects: the batches' layout, train mode
        # and grad mode. While it is unchanged since a call that passed all guards, the
        # guards (tens of µs per call for small models) are skipped.
        key = (tuple(signature(b) for b in batches), self.model.training,
               torch.is_grad_enabled(), self.metrics_in_graph)
        if key == self._trusted and self._skip_guards is not None:
            with self._skip_guards():
                losses, host_updates = self._graph(*arguments)
        else:
            try:
                losses, host_updates = self._first_call(arguments, metrics)
            except _Eager:
                return None
            self._trusted = (key[0], *key[1:3], self.metrics_in_graph)
        for labels, outputs in host_updates:
            self.task.process_metrics(metrics, labels, outputs)
        return losses

    def _first_call(
        self, arguments: tuple[Any, ...], metrics: Sequence[Any]
    ) -> tuple[list[torch.Tensor], list[Any]]:
        """A call with every guard checked; on a failed capture, the fallbacks."""
        if self.metrics_in_graph and not all(isinstance(m, Metric) for m in metrics):
            # torchmetrics objects and custom classes: read the graph's outputs instead.
            self.metrics_in_graph = False
        try:
            return self._graph(*arguments)
        except torch._dynamo.exc.TorchDynamoException as error:
            reason = " ".join(str(error).split())[:200]
            if self.metrics_in_graph and metrics:
                names = ", ".join(type(m).__name__ for m in metrics)
                _logger.info("runtime.enable_xla: train metrics (%s) update outside the "
                             "compiled step: %s", names, reason)
                self.metrics_in_graph = False
                return self._first_call(arguments, metrics)
            _logger.info("runtime.enable_xla: the step cannot be compiled as one graph, it "
                         "runs eagerly: %s", reason)
            self._eager_reason = reason
            raise _Eager from error

    def _scalars(self, learning_rates: Sequence[float] | None, steps: int) -> torch.Tensor:
        """``[steps, n]`` float32: each step's rates and bias corrections, on the device."""
        if learning_rates is None:
            rates = [[float(g["lr"])] * steps for g in self.optimizer.param_groups]
        else:
            rates = [list(learning_rates)] * len(self.optimizer.param_groups)
        rows = [[value for updates, group_rates in zip(self._group_updates, rates)
                 for update in updates for value in update.scalars(group_rates[k])]
                for k in range(steps)]
        scalars = torch.tensor(rows, dtype=torch.float32)
        if self._device.type == "cpu":
            return scalars
        # From pinned memory the copy is asynchronous; from pageable memory CUDA would
        # wait for the stream first (a host sync per call).
        return scalars.pin_memory().to(self._device, non_blocking=True)

    def _bind(self) -> None:
        """Reads the optimizer's param groups and state into the graph's argument lists."""
        optimizer = self.optimizer
        position = {id(p): name for name, p in self.model.named_parameters()}
        self.names, self.updates, self._params, self._states = [], [], [], []
        self._group_updates = []
        named_buffers = list(self.model.named_buffers())
        self.buffer_names = [name for name, _ in named_buffers]
        self._buffers = [buffer for _, buffer in named_buffers]
        offset = 0
        for group in optimizer.param_groups:
            # Parameters that got no gradient in the eager steps are left alone, as the
            # eager optimizer does.
            stateless = not _has_state(optimizer, group)
            params = [p for p in group["params"] if p.requires_grad and (
                stateless or p.grad is not None or p in optimizer.state)]
            built = build_updates(optimizer, group, params, len(self._params), offset)
            self._group_updates.append([update for update, _ in built])
            for update, states in built:
                self.updates.append(update)
                self._states.append(states)
                offset += update.num_scalars
            self._params.extend(params)
            self.names.extend(position[id(p)] for p in params)
        self._device = self._params[0].device if self._params else torch.device("cpu")
        for param in self._params:
            param.grad = None  # The graph never reads .grad; free the eager steps'.
        if self._mark_step:
            # CUDA graphs may update inputs in place only at fixed addresses: declare
            # weights and optimizer state static (a restore re-guards them).
            for tensor in self._params + self._buffers + [
                t for states in self._states for key in states for t in key
                if isinstance(t, torch.Tensor)
            ]:
                torch._dynamo.mark_static_address(tensor)
        self._state_owner = optimizer.state
        self._trusted = None  # New tensors: the next call checks every guard again.


def _has_state(optimizer: Any, group: dict[str, Any]) -> bool:
    """False for plain SGD (no momentum buffers), whose updated parameters the state
    cannot name."""
    return not (type(optimizer) is torch.optim.SGD and not group["momentum"])


class _Eager(Exception):
    """The graph could not be captured: the caller runs the steps eagerly."""


def compiled_train_step(
    task: Task,
    model: nn.Module,
    optimizer: Any,
    *,
    mode: str | None = None,
    strategy: Strategy | str = "single",
    accumulation_steps: int = 1,
    steps_per_call: int = 1,
) -> CompiledTrainStep | None:
    """A :class:`CompiledTrainStep`, or None (with one log line saying why) when the
    setup is not covered and the Trainer should run ``task.train_step`` instead.

    Args:
        task: The task.
        model: The model as trained, not ``torch.compile``-d (autocast-wrapped is fine).
        optimizer: The optimizer the step updates.
        mode: ``torch.compile`` mode. Defaults to None.
        strategy: The run's ``Strategy`` (or a registered name). Defaults to one process.
        accumulation_steps: ``trainer.gradient_accumulation_steps``. Defaults to 1.
        steps_per_call: Steps per graph call (the ``StepPlan``'s). Defaults to 1.
    """
    reason = unsupported_reason(
        task=task, model=model, optimizer=optimizer, strategy=strategy,
        accumulation_steps=accumulation_steps,
    )
    if reason is not None:
        _logger.info(
            "runtime.enable_xla: compiling the model only, not the whole step: %s.", reason
        )
        return None
    return CompiledTrainStep(task, model, optimizer, mode=mode, steps_per_call=steps_per_call)
