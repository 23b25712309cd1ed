"""What the compiled step covers, and how many steps one compiled call runs."""

from __future__ import annotations

from typing import Any

from torch import nn

from torchgarden.compile.functional_optim import has_step_hooks, is_supported
from torchgarden.core import Task
from torchgarden.layers import Layer
from torchgarden.runtime.strategy import Strategy, get_strategy

__all__ = ["choose_steps_per_call", "unsupported_reason"]

#: Models up to this many parameters get several steps per compiled call by default.
AUTO_UNROLL_MAX_PARAMETERS = 1_000_000
#: The most steps ``choose_steps_per_call`` unrolls into one graph by default.
AUTO_MAX_STEPS_PER_CALL = 10


def unsupported_reason(
    *,
    task: Task,
    model: nn.Module,
    optimizer: Any,
    strategy: Strategy | str = "single",
    accumulation_steps: int = 1,
) -> str | None:
    """Why the whole-step graph cannot run this setup, or None when it can.

    Args:
        task: The task; its ``train_step`` and ``forward_backward`` must be Task's own.
        model: The model as trained (autocast-wrapped is fine; DDP/compiled is not).
        optimizer: The optimizer the Trainer steps.
        strategy: The run's ``Strategy`` (or a registered strategy's name). Defaults to
            one process.
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


def choose_steps_per_call(model: nn.Module, steps_per_loop: int, steps_per_graph: int | None) -> int:
    """How many steps one compiled call runs (K).

    Args:
        model: The trained model.
        steps_per_loop: ``trainer.steps_per_loop``: K never exceeds it.
        steps_per_graph: ``runtime.steps_per_graph``; None chooses: the largest divisor of
            ``steps_per_loop`` up to ``AUTO_MAX_STEPS_PER_CALL`` (10) for a model of at
            most ``AUTO_UNROLL_MAX_PARAMETERS`` (1M) parameters, whose steps are short
            enough for the per-call cost (tens of µs) to matter, else 1: unrolling
            multiplies the compile time and a large model's step hides that cost.

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
    return max(k for k in range(1, AUTO_MAX_STEPS_PER_CALL + 1) if steps_per_loop % k == 0)
