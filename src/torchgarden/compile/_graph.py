"""The traced function of the compiled step, and when its guards can be skipped."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

__all__ = ["signature", "skip_guards_context", "whole_steps"]


def whole_steps(
    step: Any, params: list[torch.Tensor], buffers: list[torch.Tensor],
    states: list[list[list[Any]]], scalars: torch.Tensor, batches: Sequence[Any],
    loss_sum: torch.Tensor, metrics: Sequence[Any],
) -> tuple[list[torch.Tensor], list[tuple[Any, Any]]]:
    """``len(batches)`` training steps, unrolled: forward, loss, gradients, every update,
    the loss sum and (when traceable) the metrics, for each batch.

    ``params``, ``buffers`` (batch-norm statistics) and ``states`` (each update's optimizer
    state lists) are updated in place; row k of ``scalars`` holds step k's learning rates
    and bias corrections (``GroupUpdate.scalars``); ``step`` is the owning
    ``CompiledTrainStep``.

    Returns:
        ``(losses, host_updates)``: each step's detached loss, and ``(labels, outputs)``
        of each step whose metrics the host must update.
    """
    from torch.func import functional_call, grad_and_value

    task, model = step.task, step.model
    losses, host_updates = [], []
    # Outer no_grad: the graph is an inference graph to autograd (no joint graph is
    # built); grad_and_value still differentiates inside it.
    with torch.no_grad():
        state = dict(zip(step.buffer_names, buffers))
        for k, inputs in enumerate(batches):
            features, labels = task.split_inputs(inputs)

            def compute_loss(
                trainable: dict[str, torch.Tensor], state: dict[str, torch.Tensor],
                features: Any = features, labels: Any = labels,
            ) -> tuple[torch.Tensor, Any]:
                # Buffers enter as an argument that is not differentiated, so in-place
                # updates (batch-norm statistics) are allowed inside the transform.
                outputs = functional_call(model, {**trainable, **state}, (features,))
                # No Layer in the model (checked), so the eager step's aux losses are empty.
                return task.build_losses(labels, outputs, aux_losses=[]), outputs

            trainable = {name: p.detach() for name, p in zip(step.names, params)}
            grads, (loss, outputs) = grad_and_value(compute_loss, has_aux=True)(trainable, state)
            for rule, names, limit in step.clips:  # The optimizer's clips, in their order.
                if names:
                    rule([grads[name] for name in names], limit)
            for update, update_states in zip(step.updates, states):
                update.apply([params[i] for i in update.indices],
                             [grads[step.names[i]] for i in update.indices], update_states,
                             scalars[k])
            loss_sum.add_(loss)
            losses.append(loss)
            if step.metrics_in_graph:
                task.process_metrics(metrics, labels, outputs)
            elif metrics:
                host_updates.append((labels, outputs))
    return losses, host_updates


def signature(inputs: Any) -> Any:
    """The part of a batch that the graph's guards check: structure, shapes, dtypes."""
    if isinstance(inputs, torch.Tensor):
        return (inputs.shape, inputs.stride(), inputs.dtype, inputs.device)
    if isinstance(inputs, (tuple, list)):
        return (type(inputs), *(signature(item) for item in inputs))
    if isinstance(inputs, dict):
        return (dict, *((key, signature(value)) for key, value in inputs.items()))
    if inputs is None or isinstance(inputs, (bool, int, float, str)):
        return (type(inputs), inputs)
    return object()  # Equal to no other: a batch holding other objects is never trusted.


def skip_guards_context() -> Callable[[], Any] | None:
    """A context that skips the guards (``skip_guard_eval_unsafe``, torch 2.6+), else None.

    Through torch's own ``_set_stance(stance) -> prior``: one prebuilt stance swapped in
    and back, about 2 µs per compiled call against 7 µs for the public ``set_stance``
    (which builds a decorator object and sets the stance three times).
    """
    from torch._dynamo import eval_frame

    try:
        stance = eval_frame.DynamoStance("default", skip_guard_eval_unsafe=True)
    except (AttributeError, TypeError):  # torch < 2.6: every call checks the guards.
        return None
    return lambda: _Swap(eval_frame._set_stance, stance)


class _Swap:
    """Puts ``stance`` in force inside the block and the prior stance back after it."""

    __slots__ = ("_prior", "_stance", "_swap")

    def __init__(self, swap: Callable[[Any], Any], stance: Any) -> None:
        self._swap, self._stance = swap, stance

    def __enter__(self) -> None:
        self._prior = self._swap(self._stance)

    def __exit__(self, *exc_info: object) -> None:
        self._swap(self._prior)
