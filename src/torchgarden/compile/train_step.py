"""The compiled training step behind ``runtime.enable_xla`` (Model Garden's in-graph loop);
``docs/performance.md`` describes its cost and what falls back to the eager step."""

from __future__ import annotations

import logging
import types
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from torchgarden.compile import cache
from torchgarden.compile._graph import signature, skip_guards_context, whole_steps
from torchgarden.compile.functional_optim import KINDS, GroupUpdate, bind_updates
from torchgarden.core import Task
from torchgarden.layers import Layer
from torchgarden.metrics import Metric
from torchgarden.optim import set_learning_rate
from torchgarden.optim.clipping import clip_rules
from torchgarden.runtime.strategy import Strategy, get_strategy
from torchgarden.utils import startup
from torchgarden.utils.logs import Logs

__all__ = [
    "CompiledTrainStep", "choose_steps_per_call", "compiled_train_step", "unsupported_reason",
]

_logger = logging.getLogger("torchgarden")

# choose_steps_per_call's automatic K (its docstring says why).
AUTO_UNROLL_MAX_PARAMETERS = 1_000_000
AUTO_MAX_STEPS_PER_CALL = 10
#: Training steps that pay for compiling one more step into the graph, measured on the
#: digits MLP (docs/performance.md): each unrolled step adds ~1 s of compile; unrolling
#: saves ~65 µs of call overhead per step.
PAYBACK_STEPS_PER_UNROLLED_STEP = 15_000


class CompiledTrainStep:
    """Runs the default ``Task.train_step`` as one ``torch.compile`` graph per K steps.

    A ``Trainer`` step function: :meth:`run_steps` runs K batches; called like
    ``task.train_step`` (one batch) it runs one step, through the graph when K is 1. The
    first steps run eagerly (the optimizer creates its state, which the graph reads), and
    so do steps that do not fill a K-step call. Hyperparameters other than the learning
    rate are read at the first compiled call, after a restore and after eager steps.
    Build it only when :func:`unsupported_reason` returns None (or through
    :func:`compiled_train_step`).

    Args:
        task: The task whose losses define the step.
        model: The model (autocast-wrapped is fine).
        optimizer: An ``SGD``, ``Adam`` or ``AdamW`` without step hooks.
        mode: ``torch.compile`` mode (e.g. ``"reduce-overhead"`` for CUDA graphs on a
            GPU). Defaults to None (torch's default).
        steps_per_call: K, the steps one graph call runs. Defaults to 1.
        artifacts_dir: Where the traced step of the first graph call is kept
            (``compile/cache.py``): loaded from there when saved by an identical setup,
            else traced ahead of time and saved there. Defaults to None (nothing kept;
            ``mode`` other than None keeps nothing either).
        save_artifacts: Write the traced step (the chief; other ranks only load).
            Defaults to True.

    Example:
        >>> step = CompiledTrainStep(task, model, optimizer, steps_per_call=10)
        >>> loss_sum = torch.zeros(())
        >>> step.run_steps(batches[:10], learning_rates=None, loss_sum=loss_sum, metrics=[])
    """

    def __init__(
        self, task: Task, model: nn.Module, optimizer: torch.optim.Optimizer, *,
        mode: str | None = None, steps_per_call: int = 1, artifacts_dir: str | None = None,
        save_artifacts: bool = True,
    ) -> None:
        self.task = task
        self.model = model
        self.optimizer = optimizer
        self.steps_per_call = int(steps_per_call)
        #: Train metrics are updated inside the graph (False after a failed capture).
        self.metrics_in_graph = True
        # What the graph reads, bound to the optimizer's state by _bind().
        self.names: list[str] = []
        self.buffer_names: list[str] = []
        self.updates: list[GroupUpdate] = []
        self.clips: list[tuple[Any, list[str], float]] = []  # (rule, names, limit)
        self._host_steps: list[torch.Tensor] = []  # Adam step counts kept on the host.
        self._params: list[torch.Tensor] = []
        self._buffers: list[torch.Tensor] = []
        self._states: list[list[list[Any]]] = []
        self._state_owner: Any = None
        self._stepped = False  # An eager step ran (SGD without momentum has no state).
        # A copy of the traced function with its own code object, hence its own compile
        # cache: torch.compile stops compiling a code object after recompile_limit (8)
        # variants, and trainers built in one process must not use up each other's.
        function = types.FunctionType(whole_steps.__code__.replace(), whole_steps.__globals__)
        # Without a mode: inductor's per-call size/stride asserts repeat what the guards
        # (or, with guards skipped, the batch signature) already checked. On a CPU, the C++
        # wrapper allocates buffers and calls kernels without Python (about 1 µs per
        # buffer and kernel saved, more than a step's Adam update on small models).
        on_cpu = all(p.device.type == "cpu" for p in model.parameters())
        options = {"size_asserts": False, "cpp_wrapper": on_cpu} if mode is None else None
        self._graph = torch.compile(function, fullgraph=True, mode=mode, options=options)
        # Traced ahead of time without guards (the artifact key stands for them): the
        # steady-state call, kept in artifacts_dir.
        self._traceable = None if mode is not None else torch.compile(
            function, fullgraph=True, options={**options, "guard_filter_fn": _no_guards})
        self.artifacts_dir = artifacts_dir
        self.save_artifacts = save_artifacts
        self._traced: tuple[Any, Any] | None = None  # (key, function) of the traced step.
        self._layout: Any = None  # What the traced step was bound to (_bind).
        self._skip_guards = skip_guards_context()
        self._trusted: Any = None  # The key of the last call that passed every guard.
        self.guarded_calls = 0  # Calls that checked every guard (and may have compiled).
        self._eager_reason: str | None = None  # Set when the graph cannot be captured.
        # CUDA-graph modes: a step's outputs are dead once the next step starts.
        self._mark_step = mode in ("reduce-overhead", "max-autotune")

    def __call__(
        self, inputs: Any, *, model: Any = None, optimizer: Any = None,
        metrics: Sequence[Any] | None = None,
    ) -> Logs:
        """One step on one batch; returns ``{"loss": detached loss}``."""
        del model, optimizer  # Bound at construction.
        if self.steps_per_call == 1:
            losses = self._call_graph([inputs], None, None, metrics or [])
            if losses is not None:
                return {Task.loss: losses[0]}
        return self._eager_step(inputs, metrics)

    def run_steps(
        self, batches: Sequence[Any], *, learning_rates: Sequence[float] | None,
        loss_sum: torch.Tensor, metrics: Sequence[Any],
    ) -> None:
        """Runs ``len(batches)`` (K) steps, on the model's device, in one call of the graph.

        Args:
            learning_rates: Each step's rate for every param group (as
                ``optim.set_learning_rate`` sets it); None keeps the groups' rates.
            loss_sum: Each step's loss is added to it in place (the Trainer's meter).
            metrics: Train metrics to update with each step's outputs.
        """
        if (len(batches) == self.steps_per_call
                and self._call_graph(batches, learning_rates, loss_sum, metrics) is not None):
            return
        for i, inputs in enumerate(batches):
            if learning_rates is not None:
                set_learning_rate(self.optimizer, learning_rates[i])
            loss_sum.add_(self._eager_step(inputs, metrics)[Task.loss])

    def _eager_step(self, inputs: Any, metrics: Sequence[Any] | None) -> Logs:
        logs = self.task.train_step(inputs, model=self.model, optimizer=self.optimizer,
                                    metrics=metrics)
        self._state_owner = None  # The state moved on without the graph: bind again.
        self._stepped = True
        return logs

    def _call_graph(
        self, batches: Sequence[Any], learning_rates: Sequence[float] | None,
        loss_sum: torch.Tensor | None, metrics: Sequence[Any],
    ) -> list[torch.Tensor] | None:
        """The graph on ``batches`` (``loss_sum`` None: a discarded one); None: step eagerly
        (the graph cannot be captured, or the optimizer has no state yet)."""
        if self._eager_reason is not None:
            return None
        if self.optimizer.state is not self._state_owner:  # First step, restore, eager step.
            if not self.optimizer.state and not self._stepped:
                return None  # The optimizer creates its state in an eager step first.
            self._bind()
        scalars = self._scalars(learning_rates, len(batches))
        if self._mark_step:
            torch.compiler.cudagraph_mark_step_begin()
        arguments = (self, self._params, self._buffers, self._states, scalars, batches,
                     self._loss_scratch if loss_sum is None else loss_sum, metrics)
        # What the graph depends on beyond fixed objects: the batches' layout, train mode
        # and grad mode. While it is unchanged since a call that passed all guards, the
        # guards (tens of µs per call for small models) are skipped.
        key = (tuple(signature(b) for b in batches), self.model.training,
               torch.is_grad_enabled(), self.metrics_in_graph)
        if self._traced is not None and key == self._traced[0]:
            losses, host_updates = self._traced[1](*arguments)
        elif key == self._trusted and self._skip_guards is not None:
            with self._skip_guards():
                losses, host_updates = self._graph(*arguments)
        else:
            result = self._first_call(arguments, metrics, key)
            if result is None:
                return None
            losses, host_updates = result
            self._trusted = (*key[:3], self.metrics_in_graph)
        if self._host_steps:
            torch._foreach_add_(self._host_steps, len(batches))
        for labels, outputs in host_updates:
            self.task.process_metrics(metrics, labels, outputs)
        return losses

    def _first_call(
        self, arguments: tuple[Any, ...], metrics: Sequence[Any], key: Any,
    ) -> tuple[list[torch.Tensor], list[Any]] | None:
        """A call with every guard checked, or the first call of the traced step; on a
        failed capture, the fallbacks (None: the step cannot be one graph, run it eagerly)."""
        if self.metrics_in_graph and not all(isinstance(m, Metric) for m in metrics):
            # torchmetrics objects and custom classes: read the graph's outputs instead.
            self.metrics_in_graph = False
            key = (*key[:3], False)
        self.guarded_calls += 1
        try:
            with startup.timed("compile"):
                if self._traced is None and self.artifacts_dir and self._traceable:
                    traced = cache.traced_step(self._traceable, arguments, key,
                                               self.artifacts_dir, save=self.save_artifacts)
                    if traced is None:
                        self._traceable = None  # Compiled as usual from now on.
                    else:
                        self._traced = (key, traced)
                        return traced(*arguments)
                return self._graph(*arguments)
        except torch._dynamo.exc.TorchDynamoException as error:
            reason = " ".join(str(error).split())[:200]
            if self.metrics_in_graph and metrics:
                names = ", ".join(type(m).__name__ for m in metrics)
                _logger.info("runtime.enable_xla: train metrics (%s) update outside the "
                             "compiled step: %s", names, reason)
                self.metrics_in_graph = False
                return self._first_call(arguments, metrics, (*key[:3], False))
            _logger.info("runtime.enable_xla: the step cannot be compiled as one graph, it "
                         "runs eagerly: %s", reason)
            self._eager_reason = reason
            return None

    def _scalars(self, learning_rates: Sequence[float] | None, steps: int) -> torch.Tensor:
        """``[steps, n]`` float32: each step's rates and bias corrections, on the device."""
        groups = self.optimizer.param_groups
        rows = []
        for k in range(steps):
            rates = ([float(group["lr"]) for group in groups] if learning_rates is None
                     else [learning_rates[k] * group.get("lr_mult", 1.0) for group in groups])
            rows.append([value for update in self.updates
                         for value in update.scalars(rates[update.group])])
        scalars = torch.tensor(rows, dtype=torch.float32)
        if self._device.type == "cpu":
            return scalars
        # From pinned memory the copy is asynchronous; from pageable memory CUDA would
        # wait for the stream first (a host sync per call).
        return scalars.pin_memory().to(self._device, non_blocking=True)

    @property
    def clip_layout(self) -> list[tuple[str, list[str], float]]:
        """The gradient clips the graph applies: rule name, parameter names, limit."""
        return [(rule.__name__, names, limit) for rule, names, limit in self.clips]

    def _bind(self) -> None:
        """Reads the optimizer's param groups and state into the graph's argument lists."""
        self._params, self.updates, self._states = bind_updates(self.optimizer)
        position = {id(p): name for name, p in self.model.named_parameters()}
        self.names = [position[id(p)] for p in self._params]
        chosen = {id(p): name for name, p in zip(self.names, self._params)}
        self.clips = [(rule, [chosen[id(p)] for p in params if id(p) in chosen], limit)
                      for rule, params, limit in clip_rules(self.optimizer) or ()]
        buffers = dict(self.model.named_buffers())
        self.buffer_names, self._buffers = list(buffers), list(buffers.values())
        self._device = self._params[0].device if self._params else torch.device("cpu")
        # torch keeps a non-fused Adam's step counts on the CPU: beside a GPU graph they are
        # counted on the host after each call (in the graph they would cost a host sync).
        self._host_steps = []
        for update, update_states in zip(self.updates, self._states):
            if (self._device.type != "cpu" and update.kind != "sgd" and update_states[-1]
                    and getattr(update_states[-1][0], "device", None) == torch.device("cpu")):
                self._host_steps += update_states.pop()
                update.steps_in_graph = False
        self._loss_scratch = torch.zeros((), device=self._device)  # __call__ discards it.
        for param in self._params:
            param.grad = None  # The graph never reads .grad; free the eager steps'.
        if self._mark_step:
            # CUDA graphs may update inputs in place only at fixed addresses: declare
            # weights and optimizer state static (a restore re-guards them).
            state_tensors = [t for states in self._states for key in states for t in key
                             if isinstance(t, torch.Tensor)]
            for tensor in self._params + self._buffers + state_tensors:
                torch._dynamo.mark_static_address(tensor)
        self._state_owner = self.optimizer.state
        self._trusted = None  # New tensors: the next call checks every guard again.
        layout = (self.names, self.buffer_names, self.clip_layout,
                  [(u.kind, u.group, u.indices, u.offset, u.hyper, u.steps_in_graph)
                   for u in self.updates])
        if layout != self._layout:  # The traced step has no guards to notice.
            self._traced, self._layout = None, layout


def _no_guards(entries: Sequence[Any]) -> list[bool]:
    """Drops every guard of the traced step (its artifact key stands for them)."""
    return [False] * len(entries)


def unsupported_reason(
    *, task: Task, model: nn.Module, optimizer: Any, strategy: Strategy | str = "single",
    accumulation_steps: int = 1,
) -> str | None:
    """Why the whole-step graph cannot run this setup, or None when it can.

    Args:
        task: The task; its ``train_step`` and ``forward_backward`` must be Task's own.
        model: The model as trained (autocast-wrapped is fine; DDP/compiled is not).
        optimizer: The optimizer the Trainer steps.
        strategy: The run's ``Strategy`` or a registered name. Defaults to one process.
        accumulation_steps: ``trainer.gradient_accumulation_steps``. Defaults to 1.
    """
    for hook in ("train_step", "forward_backward"):
        if getattr(type(task), hook) is not getattr(Task, hook):
            return f"{type(task).__name__} overrides {hook}"
    if isinstance(strategy, str):
        strategy = get_strategy(strategy)()
    if strategy.compiled_step_unsupported():
        return strategy.compiled_step_unsupported()
    if accumulation_steps != 1:
        return f"gradient_accumulation_steps={accumulation_steps}"
    if type(optimizer) not in KINDS:
        return (f"optimizer {type(optimizer).__name__} (supported: SGD, Adam, AdamW; "
                "float16 loss scaling wraps the optimizer)")
    from torch.optim import optimizer as torch_optimizer

    if (clip_rules(optimizer) is None or torch_optimizer._global_optimizer_pre_hooks
            or torch_optimizer._global_optimizer_post_hooks):
        return "the optimizer has step hooks other than torchgarden's gradient clips"
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


def choose_steps_per_call(
    model: nn.Module, steps_per_loop: int, steps_per_graph: int | None, *,
    train_steps: int | None = None,
) -> int:
    """How many steps one compiled call runs (K).

    Args:
        model: The trained model.
        steps_per_loop: ``trainer.steps_per_loop``: K never exceeds it.
        steps_per_graph: ``runtime.steps_per_graph``; None chooses: the largest divisor of
            ``steps_per_loop`` up to ``AUTO_MAX_STEPS_PER_CALL`` (10) for a model of at
            most ``AUTO_UNROLL_MAX_PARAMETERS`` (1M) parameters, whose steps are short
            enough for the per-call cost (tens of µs) to matter, else 1: unrolling
            multiplies the compile time and a large model's step hides that cost. Each
            unrolled step must also pay for its compile: K is at most ``train_steps //
            PAYBACK_STEPS_PER_UNROLLED_STEP`` (a 20,000-step run compiles one step).
        train_steps: The steps the run trains; None: no payback limit.

    Raises:
        ValueError: ``steps_per_graph`` is below 1 or above ``steps_per_loop``.
    """
    if steps_per_graph is not None:
        if not 1 <= steps_per_graph <= steps_per_loop:
            raise ValueError(
                f"runtime.steps_per_graph must be between 1 and trainer.steps_per_loop "
                f"({steps_per_loop}), got {steps_per_graph}; set it to "
                f"{min(max(steps_per_graph, 1), steps_per_loop)} or leave it unset (automatic)."
            )
        return steps_per_graph
    if sum(p.numel() for p in model.parameters()) > AUTO_UNROLL_MAX_PARAMETERS:
        return 1
    most = AUTO_MAX_STEPS_PER_CALL if train_steps is None else min(
        AUTO_MAX_STEPS_PER_CALL, train_steps // PAYBACK_STEPS_PER_UNROLLED_STEP)
    return max(k for k in range(1, max(most, 1) + 1) if steps_per_loop % k == 0)


def compiled_train_step(
    task: Task, model: nn.Module, optimizer: Any, *, mode: str | None = None,
    strategy: Strategy | str = "single", accumulation_steps: int = 1, steps_per_call: int = 1,
) -> CompiledTrainStep | None:
    """A :class:`CompiledTrainStep`, or None (with one log line saying why) when the
    setup is not covered and the Trainer should run ``task.train_step`` instead.

    The arguments are :func:`unsupported_reason`'s and :class:`CompiledTrainStep`'s:
    ``model`` as trained, not ``torch.compile``-d; ``steps_per_call`` the ``StepPlan``'s.
    """
    reason = unsupported_reason(task=task, model=model, optimizer=optimizer,
                                strategy=strategy, accumulation_steps=accumulation_steps)
    if reason is not None:
        _logger.info("runtime.enable_xla: compiling the model only, not the whole step: %s.",
                     reason)
        return None
    return CompiledTrainStep(task, model, optimizer, mode=mode, steps_per_call=steps_per_call)
