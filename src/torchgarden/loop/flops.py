"""FLOPs of one training example, counted with ``torch.utils.flop_counter`` on ``meta``
tensors (MFU)."""

from __future__ import annotations

import logging
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_flatten, tree_map
from torch.utils.flop_counter import FlopCounterMode

__all__ = ["FirstBatchFlops", "count_training_flops"]

_logger = logging.getLogger("torchgarden")


def _to_meta(value: Any) -> Any:
    return torch.empty_like(value, device="meta") if isinstance(value, torch.Tensor) else value


def count_training_flops(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    """FLOPs of ``model(*args, **kwargs)`` forward and backward (matmuls, convolutions,
    attention), run by ``torch.func.functional_call`` with the parameters, buffers and
    inputs swapped for ``meta`` copies: nothing is allocated or computed, and the model is
    not changed.

    The backward pass is that of the sum of the floating-point outputs, which has the
    cost of any loss' backward through the model; the loss itself is not counted.
    """
    params = {n: _to_meta(p).requires_grad_(p.requires_grad) for n, p in model.named_parameters()}
    buffers = {n: _to_meta(b) for n, b in model.named_buffers()}
    args, kwargs = tree_map(_to_meta, (args, kwargs))
    with FlopCounterMode(display=False) as counter:
        outputs = torch.func.functional_call(model, {**params, **buffers}, args, kwargs)
        leaves = [t for t in tree_flatten(outputs)[0]
                  if isinstance(t, torch.Tensor) and t.is_floating_point() and t.requires_grad]
        trainable = [p for p in params.values() if p.requires_grad]
        if leaves and trainable:
            total = torch.stack([t.float().sum() for t in leaves]).sum()
            torch.autograd.grad(total, trainable, allow_unused=True)
    return int(counter.get_total_flops())


class FirstBatchFlops:
    """Training FLOPs per example, counted once from the model's first training batch.

    A forward pre-hook captures the shapes of the first training input and removes
    itself. Calling the object (the throughput meter does, after the first loop) counts;
    it returns None when the model cannot run on ``meta`` tensors (data-dependent control
    flow, a custom kernel), and a log line says to declare ``Task.flops_per_example``.

    Args:
        model: The module a train step calls (unwrapped: not DDP, not compiled).
        examples_per_batch: Examples in the batch one forward call sees on this process.
    """

    def __init__(self, model: nn.Module, examples_per_batch: int) -> None:
        self._model = model
        self._examples = int(examples_per_batch)
        self._inputs: tuple[tuple[Any, ...], dict[str, Any]] | None = None
        self._handle = model.register_forward_pre_hook(self._capture, with_kwargs=True)

    def _capture(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if module.training and self._inputs is None:
            self._inputs = tree_map(_to_meta, (args, kwargs))  # Shapes only: no copy.
            self._handle.remove()

    def __call__(self) -> float | None:
        self._handle.remove()
        if self._inputs is None or self._examples <= 0:
            return None
        try:
            flops = count_training_flops(self._model, *self._inputs)
        except Exception as error:  # noqa: BLE001 - any failure only means "no MFU".
            _logger.info("MFU not reported: the model's FLOPs could not be counted on meta "
                         "tensors (%s); set Task.flops_per_example to report it.",
                         str(error).splitlines()[0][:200])
            return None
        finally:
            self._inputs = None
        return flops / self._examples if flops else None
