"""The compiled whole step behind ``runtime.enable_xla`` (Model Garden's in-graph step).

An opt-in step function for the ``Trainer`` (its ``step_fn``): ``create_trainer`` hands
it over when ``runtime.enable_xla`` is set and the setup is covered; otherwise the
Trainer runs ``Task.train_step`` on the ``torch.compile``-d model.

Model Garden runs forward, gradients and the optimizer update of a step inside one XLA
graph. Here the same three phases of the default ``Task.train_step`` run as one
``torch.compile`` graph, so a step costs one compiled call instead of a few hundred eager
operator dispatches and a Python walk of the autograd graph:

* gradients come from ``torch.func.grad_and_value`` over the model's trainable
  parameters (``functional_call``), inside the graph;
* the update is torch's own functional algorithm (``torch.optim.sgd.sgd``,
  ``torch.optim.adam.adam``, ...) applied in place to the optimizer's own state tensors,
  so ``state_dict()``, checkpoints and the eager path stay interchangeable;
* each param group's learning rate enters as a 0-d tensor, so schedules never recompile.

The first step runs eagerly through ``task.train_step``: the optimizer then creates its
state exactly as torch does, and the graph reads that state. Every later step is one
call of the graph (a second compile happens only if a checkpoint restore replaces the
optimizer state with tensors of other shapes, or a batch of another shape arrives).
Hyperparameters other than the learning rate (momentum, betas, weight decay) are read
when the graph is bound to the optimizer: at the first step and after a restore.

Per-call cost matters for small models, so two of torch.compile's per-call checks are
not repeated: inductor's size asserts are off, and while a batch has the same
structure, shapes, strides and dtypes as one that passed every guard (and train and
grad modes are unchanged), the call runs under ``set_stance(skip_guard_eval_unsafe=
True)``. Anything else (a new shape, a restore) goes through the full guards again.
Each Trainer compiles its own copy of the step function, so trainers built in one
process never share (or exhaust) a compile cache.

What the path does not cover falls back to the eager step (``unsupported_reason`` says
why): tasks that override ``train_step`` or ``forward_backward``, DDP/FSDP, gradient accumulation, optimizers
other than SGD/Adam/AdamW (exact classes), optimizers with step hooks (gradient
clipping), float16 loss scaling, models with ``torchgarden.layers.Layer`` auxiliary
losses, and models with transformers' activation checkpointing on.
"""

from __future__ import annotations

import inspect
import logging
import types
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from torchgarden.compile.functional_optim import GroupUpdate, has_step_hooks, is_supported
from torchgarden.core import Task
from torchgarden.layers import Layer
from torchgarden.utils.logs import Logs

__all__ = ["CompiledTrainStep", "compiled_train_step", "unsupported_reason"]

_logger = logging.getLogger("torchgarden")


def unsupported_reason(
    *,
    task: Task,
    model: nn.Module,
    optimizer: Any,
    strategy: str = "single",
    accumulation_steps: int = 1,
) -> str | None:
    """Why the whole-step graph cannot run this setup, or None when it can.

    Args:
        task: The task; its ``train_step`` and ``forward_backward`` must be Task's own.
        model: The model as trained (autocast-wrapped is fine; DDP/compiled is not).
        optimizer: The optimizer the Trainer steps.
        strategy: The runtime's distribution strategy. Defaults to ``"single"``.
        accumulation_steps: ``trainer.gradient_accumulation_steps``. Defaults to 1.
    """
    for hook in ("train_step", "forward_backward"):
        if getattr(type(task), hook) is not getattr(Task, hook):
            return f"{type(task).__name__} overrides {hook}"
    if strategy != "single":
        return f"distribution strategy '{strategy}' (the graph has no gradient all-reduce)"
    if accumulation_steps != 1:
        return f"gradient_accumulation_steps={accumulation_steps}"
    if not is_supported(optimizer):
        return (
            f"optimizer {type(optimizer).__name__} (supported: SGD, Adam, AdamW; float16 "
            "loss scaling wraps the optimizer)"
        )
    if has_step_hooks(optimizer):
        return "the optimizer has step hooks (gradient clipping)"
    if any(group.get("differentiable") for group in optimizer.param_groups):
        return "a param group has differentiable=True"
    if any(isinstance(module, Layer) for module in model.modules()):
        return "the model has torchgarden Layers with auxiliary losses"
    if any(getattr(module, "gradient_checkpointing", False) for module in model.modules()):
        return "activation checkpointing (torch.func.grad has no saved-tensor hooks)"
    names = {id(p) for p in model.parameters()}
    for group in optimizer.param_groups:
        for param in group["params"]:
            if id(param) not in names:
                return "the optimizer holds parameters that are not the model's"
            if param.is_complex() or param.is_sparse:
                return "complex or sparse parameters"
    return None


def _fresh_function(function: Callable[..., Any]) -> Callable[..., Any]:
    """A copy of ``function`` with its own code object, hence its own compile cache.

    ``torch.compile`` caches graphs per code object and stops compiling one after
    ``recompile_limit`` (8) differently-guarded variants. Giving every Trainer its own
    code object keeps trainers built in one process (sweeps, benchmarks, tests) from
    using up each other's compile budget.
    """
    return types.FunctionType(
        function.__code__.replace(),
        function.__globals__,
        function.__name__,
        function.__defaults__,
        function.__closure__,
    )


def _whole_step(
    step: CompiledTrainStep,
    params: list[torch.Tensor],
    buffers: list[torch.Tensor],
    states: list[list[list[Any]]],
    lrs: list[torch.Tensor],
    inputs: Any,
) -> tuple[torch.Tensor, Any]:
    """Forward, loss, gradients and the update of every param group: the traced step."""
    from torch.func import functional_call, grad_and_value

    task, model = step.task, step.model
    features, labels = task.split_inputs(inputs)

    def compute_loss(
        trainable: dict[str, torch.Tensor], state: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, Any]:
        # Buffers enter as an argument that is not differentiated, so in-place updates
        # (batch-norm statistics) are allowed inside the gradient transform.
        outputs = functional_call(model, {**trainable, **state}, (features,))
        # No Layer in the model (checked), so the eager step's aux losses are empty.
        return task.build_losses(labels, outputs, aux_losses=[]), outputs

    # Outer no_grad: the graph is an inference graph to autograd (no joint graph is
    # built); grad_and_value still differentiates inside it.
    with torch.no_grad():
        trainable = {name: p.detach() for name, p in zip(step.names, params)}
        state = dict(zip(step.buffer_names, buffers))
        grads, (loss, outputs) = grad_and_value(compute_loss, has_aux=True)(trainable, state)
        for group, group_states, lr in zip(step.groups, states, lrs):
            group_params = [params[i] for i in group.indices]
            group_grads = [grads[step.names[i]] for i in group.indices]
            group.update(group_params, group_grads, group_states, lr)
    return loss, outputs


class _Untrusted:
    """A signature part equal to nothing: batches holding arbitrary objects."""

    def __eq__(self, other: object) -> bool:
        return False

    __hash__ = None  # type: ignore[assignment]


def _signature(inputs: Any) -> Any:
    """The part of a batch that the graph's guards check: structure, shapes, dtypes."""
    if isinstance(inputs, torch.Tensor):
        return (inputs.shape, inputs.stride(), inputs.dtype, inputs.device)
    if isinstance(inputs, (tuple, list)):
        return (type(inputs), *(_signature(item) for item in inputs))
    if isinstance(inputs, dict):
        return (dict, *((key, _signature(value)) for key, value in inputs.items()))
    if inputs is None or isinstance(inputs, (bool, int, float, str)):
        return (type(inputs), inputs)
    return _Untrusted()


def _skip_guards_context() -> Callable[[], Any] | None:
    """``set_stance(skip_guard_eval_unsafe=True)`` where torch has it (2.6+), else None."""
    set_stance = getattr(torch.compiler, "set_stance", None)
    if set_stance is None:
        return None
    try:
        parameters = inspect.signature(set_stance).parameters
    except (TypeError, ValueError):
        return None
    if "skip_guard_eval_unsafe" not in parameters:
        return None
    return lambda: set_stance("default", skip_guard_eval_unsafe=True)


class CompiledTrainStep:
    """Runs the default ``Task.train_step`` as one ``torch.compile`` graph per step.

    A ``Trainer`` step function: call it like ``task.train_step``; it returns
    ``{"loss": detached loss}`` and updates ``metrics`` from the graph's outputs. It is
    bound to the model and optimizer it was built with (the ``model`` and
    ``optimizer`` arguments of a call are those). Build it only when
    ``unsupported_reason`` returns None (or through :func:`compiled_train_step`).

    Args:
        task: The task whose losses define the step.
        model: The model (autocast-wrapped is fine).
        optimizer: An ``SGD``, ``Adam`` or ``AdamW`` without step hooks.
        mode: ``torch.compile`` mode (e.g. ``"reduce-overhead"`` for CUDA graphs on a
            GPU). Defaults to None (torch's default).

    Example:
        >>> step = CompiledTrainStep(task, model, optimizer)
        >>> logs = step(batch, model=model, optimizer=optimizer, metrics=[])  # 1st call eager
    """

    def __init__(
        self, task: Task, model: nn.Module, optimizer: torch.optim.Optimizer, *,
        mode: str | None = None,
    ) -> None:
        self.task = task
        self.model = model
        self.optimizer = optimizer
        self.names: list[str] = []
        self.buffer_names: list[str] = []
        self.groups: list[GroupUpdate] = []
        function = _fresh_function(_whole_step)
        if mode is None:
            # Inductor's per-call size/stride asserts repeat what the guards (or, with
            # guards skipped, _signature) already checked.
            self._graph = torch.compile(function, fullgraph=True, options={"size_asserts": False})
        else:
            self._graph = torch.compile(function, fullgraph=True, mode=mode)
        self._skip_guards = _skip_guards_context()
        self._trusted: Any = None
        # CUDA-graph modes: a step's outputs are dead once the next step starts.
        self._mark_step = mode in ("reduce-overhead", "max-autotune")
        self._params: list[torch.Tensor] = []
        self._buffers: list[torch.Tensor] = []
        self._states: list[list[list[Any]]] = []
        self._state_owner: Any = None
        self._lrs: list[torch.Tensor] = []
        self._lr_values: list[float | None] = []

    def __call__(
        self, inputs: Any, *, model: Any = None, optimizer: Any = None,
        metrics: Sequence[Any] | None = None,
    ) -> Logs:
        del model, optimizer  # Bound at construction.
        optimizer = self.optimizer
        if optimizer.state is not self._state_owner:  # First step, or state restored.
            if not optimizer.state:
                logs = self.task.train_step(
                    inputs, model=self.model, optimizer=optimizer, metrics=metrics
                )
                self._bind()
                return logs
            self._bind()
        self._write_learning_rates()
        if self._mark_step:
            torch.compiler.cudagraph_mark_step_begin()
        arguments = (self, self._params, self._buffers, self._states, self._lrs, inputs)
        # What the graph depends on beyond fixed objects: the batch's layout, train mode
        # and grad mode. While it is unchanged since a call that passed all guards, the
        # guards (tens of µs per call for small models) are skipped.
        signature = (_signature(inputs), self.model.training, torch.is_grad_enabled())
        if signature == self._trusted and self._skip_guards is not None:
            with self._skip_guards():
                loss, outputs = self._graph(*arguments)
        else:
            loss, outputs = self._graph(*arguments)
            self._trusted = signature
        if metrics:
            _, labels = self.task.split_inputs(inputs)
            self.task.process_metrics(metrics, labels, outputs)
        return {Task.loss: loss}

    def _write_learning_rates(self) -> None:
        values = self._lr_values
        for i, group in enumerate(self.optimizer.param_groups):
            lr = group["lr"]
            # A float rate moved by the schedule: one in-place fill, no host sync. A
            # tensor rate (capturable optimizers) is the graph's argument itself.
            if values[i] is not None and lr != values[i]:
                self._lrs[i].fill_(lr)
                values[i] = lr

    def _bind(self) -> None:
        """Reads the optimizer's param groups and state into the graph's argument lists."""
        optimizer = self.optimizer
        position = {id(p): name for name, p in self.model.named_parameters()}
        self.names, self.groups, self._params, self._states = [], [], [], []
        self._lrs, self._lr_values = [], []
        named_buffers = list(self.model.named_buffers())
        self.buffer_names = [name for name, _ in named_buffers]
        self._buffers = [buffer for _, buffer in named_buffers]
        for group in optimizer.param_groups:
            # Parameters that got no gradient in the eager step are left alone, as the
            # eager optimizer does.
            params = [
                p for p in group["params"]
                if p.requires_grad and (p.grad is not None or p in optimizer.state)
            ]
            update, states = GroupUpdate.build(optimizer, group, params, len(self._params))
            self.groups.append(update)
            self._states.append(states)
            self._params.extend(params)
            self.names.extend(position[id(p)] for p in params)
            lr = group["lr"]
            if isinstance(lr, torch.Tensor):
                self._lrs.append(lr)
                self._lr_values.append(None)
            else:
                device = params[0].device if params else torch.device("cpu")
                self._lrs.append(torch.tensor(float(lr), dtype=torch.float32, device=device))
                self._lr_values.append(float(lr))
        for param in self._params:
            param.grad = None  # The graph never reads .grad; free the eager step's.
        if self._mark_step:
            # CUDA graphs may update inputs in place only at fixed addresses: declare
            # weights, optimizer state and rates static (a restore re-guards them).
            for tensor in self._params + self._buffers + self._lrs + [
                t for group in self._states for key in group for t in key
                if isinstance(t, torch.Tensor)
            ]:
                torch._dynamo.mark_static_address(tensor)
        self._state_owner = optimizer.state
        self._trusted = None  # New tensors: the next call checks every guard again.


def compiled_train_step(
    task: Task,
    model: nn.Module,
    optimizer: Any,
    *,
    mode: str | None = None,
    strategy: str = "single",
    accumulation_steps: int = 1,
) -> CompiledTrainStep | None:
    """A :class:`CompiledTrainStep`, or None (with one log line saying why) when the
    setup is not covered and the Trainer should run ``task.train_step`` instead.

    Args:
        task: The task.
        model: The model as trained, not ``torch.compile``-d (autocast-wrapped is fine).
        optimizer: The optimizer the step updates.
        mode: ``torch.compile`` mode. Defaults to None.
        strategy: The runtime's distribution strategy. Defaults to ``"single"``.
        accumulation_steps: ``trainer.gradient_accumulation_steps``. Defaults to 1.
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
    return CompiledTrainStep(task, model, optimizer, mode=mode)
