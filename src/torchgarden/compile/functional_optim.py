"""``torch.optim`` updates as functions of tensor lists, for the compiled step graph.

Each param group becomes one or more :class:`GroupUpdate` objects that the graph applies
in place to the optimizer's own parameters and state tensors, so ``state_dict()``,
checkpoints and the eager path stay interchangeable.

* SGD runs torch's own functional algorithm (``torch.optim.sgd.sgd``) in its plain
  per-tensor form, which inductor fuses with the rest of the step.
* Adam and AdamW run the arithmetic of torch's default single-tensor implementation
  (``_single_tensor_adam``): ``lerp_`` of the first moment, ``mul_``/``addcmul_`` of the
  second, ``sqrt``, the bias corrections and an ``addcdiv``-shaped update. As in eager
  torch, the step-dependent scalars (``lr / (1 - beta1^t)``, ``sqrt(1 - beta2^t)``,
  ``1 - lr * weight_decay``) are computed on the host in double precision from the
  step count and enter the graph as float32 values. Computed inside the graph instead,
  inductor's C++ kernels recompute ``pow`` of them for every vector of every tensor.

The host knows the step count of each update: it is read from the optimizer's
``state["step"]`` when the graph is bound (parameters whose counts differ get separate
updates) and advanced by the graph's calls; the graph also advances the state tensors.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = ["GroupUpdate", "build_updates", "has_step_hooks", "is_supported"]


# Fixed keywords of torch's functional SGD: the plain per-tensor algorithm.
_PLAIN_SGD = {
    "foreach": False,
    "fused": None,
    "grad_scale": None,
    "found_inf": None,
    "has_sparse_grad": False,
}


@functools.cache
def _kinds() -> dict[type, str]:
    return {torch.optim.SGD: "sgd", torch.optim.Adam: "adam", torch.optim.AdamW: "adamw"}


def is_supported(optimizer: Any) -> bool:
    """True for exactly ``torch.optim.SGD``, ``Adam`` and ``AdamW`` (not subclasses)."""
    return type(optimizer) in _kinds()


def has_step_hooks(optimizer: torch.optim.Optimizer) -> bool:
    """True when ``optimizer.step()`` runs pre/post hooks (e.g. gradient clipping)."""
    from torch.optim import optimizer as optimizer_module

    return bool(
        getattr(optimizer, "_optimizer_step_pre_hooks", None)
        or getattr(optimizer, "_optimizer_step_post_hooks", None)
        or getattr(optimizer_module, "_global_optimizer_pre_hooks", None)
        or getattr(optimizer_module, "_global_optimizer_post_hooks", None)
    )


@dataclass
class GroupUpdate:
    """The update of some parameters of one param group (same hyperparameters and, for
    Adam, the same step count).

    Attributes:
        kind: ``"sgd"``, ``"adam"`` or ``"adamw"``.
        indices: Positions of the parameters in the graph's parameter list.
        keys: The optimizer state entries the update reads, in order.
        hyper: The group's hyperparameters other than the learning rate.
        offset: Where this update's scalars start in a step's row of scalars.
        step: Adam: steps taken so far by these parameters (host copy of ``state["step"]``).
    """

    kind: str
    indices: list[int]
    keys: tuple[str, ...]
    hyper: dict[str, Any]
    offset: int = 0
    step: int = 0
    _sgd: Callable[..., None] | None = field(default=None, repr=False)

    @property
    def num_scalars(self) -> int:
        """Scalars per step: SGD the rate; Adam the step size, ``sqrt(1 - beta2^t)`` and
        the decoupled decay factor."""
        return 1 if self.kind == "sgd" else 3

    def scalars(self, lr: float) -> list[float]:
        """The next step's scalars on the host (double precision, as eager torch) and
        advances the host step count."""
        if self.kind == "sgd":
            return [lr]
        self.step += 1
        beta1, beta2 = self.hyper["betas"]
        bias_correction1 = 1 - beta1**self.step
        bias_correction2 = 1 - beta2**self.step
        return [lr / bias_correction1, math.sqrt(bias_correction2),
                1 - lr * self.hyper["weight_decay"]]

    def apply(
        self,
        params: list[torch.Tensor],
        grads: list[torch.Tensor],
        states: list[list[torch.Tensor]],
        row: torch.Tensor,
    ) -> None:
        """Applies one step in place to ``params`` and ``states`` (traceable).

        Args:
            params: The update's parameters.
            grads: Their gradients.
            states: One list per entry of ``keys``.
            row: The step's float32 scalars of every update (this one at ``offset``).
        """
        if self.kind == "sgd":
            buffers = states[0] if states else [None] * len(params)
            keywords = {k: self.hyper[k] for k in
                        ("weight_decay", "momentum", "dampening", "nesterov", "maximize")}
            assert self._sgd is not None
            self._sgd(params, grads, buffers, lr=row[self.offset], **_PLAIN_SGD, **keywords)
            return
        _adam(self, params, grads, states, row[self.offset:self.offset + 3])


def _adam(
    update: GroupUpdate,
    params: list[torch.Tensor],
    grads: list[torch.Tensor],
    states: list[list[torch.Tensor]],
    scalars: torch.Tensor,
) -> None:
    """torch's ``_single_tensor_adam`` (non-capturable form) on host-computed scalars."""
    hyper = update.hyper
    beta1, beta2 = hyper["betas"]
    weight_decay, decoupled = hyper["weight_decay"], update.kind == "adamw" or hyper.get(
        "decoupled_weight_decay", False)
    step_size, bias_correction2_sqrt, decay = scalars[0], scalars[1], scalars[2]
    exp_avgs, exp_avg_sqs, *rest = states
    max_exp_avg_sqs = rest[0] if hyper["amsgrad"] else None
    steps = rest[-1]
    for i, param in enumerate(params):
        grad = grads[i] if not hyper["maximize"] else -grads[i]
        steps[i] += 1  # The optimizer's own counter, for state_dict() and eager steps.
        if weight_decay != 0:
            if decoupled:
                param.mul_(decay)
            else:
                grad = grad.add(param, alpha=weight_decay)
        exp_avgs[i].lerp_(grad, 1 - beta1)
        exp_avg_sqs[i].mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        second = exp_avg_sqs[i]
        if max_exp_avg_sqs is not None:
            torch.maximum(max_exp_avg_sqs[i], second, out=max_exp_avg_sqs[i])
            second = max_exp_avg_sqs[i]
        denom = (second.sqrt() / bias_correction2_sqrt).add_(hyper["eps"])
        param.sub_(step_size * (exp_avgs[i] / denom))  # addcdiv_(value=-step_size)


def _state_keys(kind: str, group: dict[str, Any]) -> tuple[str, ...]:
    if kind == "sgd":
        return ("momentum_buffer",) if group["momentum"] else ()
    amsgrad = ("max_exp_avg_sq",) if group["amsgrad"] else ()
    return ("exp_avg", "exp_avg_sq", *amsgrad, "step")


def _step_count(state: dict[str, Any]) -> int:
    step = state["step"]
    return int(step.item() if isinstance(step, torch.Tensor) else step)  # Sync: at bind only.


def build_updates(
    optimizer: torch.optim.Optimizer,
    group: dict[str, Any],
    params: list[torch.Tensor],
    first_index: int,
    first_offset: int,
) -> list[tuple[GroupUpdate, list[list[Any]]]]:
    """The updates of ``group``'s ``params`` and their state lists (one per key).

    Adam parameters are split by their step counts, so each update's host-side bias
    corrections are those of its parameters.

    Args:
        optimizer: The optimizer (state already created by an eager step).
        group: One of its param groups.
        params: The parameters of ``group`` that the graph updates.
        first_index: Position of ``params[0]`` in the graph's parameter list.
        first_offset: Where the first update's scalars start in a step's row.
    """
    kind = _kinds()[type(optimizer)]
    keys = _state_keys(kind, group)
    hyper = {key: value for key, value in group.items() if key not in ("params", "lr")}
    if kind == "sgd":
        parts = {0: list(range(len(params)))}
    else:
        parts = {}
        for i, param in enumerate(params):
            parts.setdefault(_step_count(optimizer.state[param]), []).append(i)
    sgd = _torch_sgd() if kind == "sgd" else None
    updates, offset = [], first_offset
    for step, members in parts.items():
        update = GroupUpdate(kind, [first_index + i for i in members], keys, hyper, offset,
                             step, sgd)
        states = [[optimizer.state[params[i]][key] for i in members] for key in keys]
        updates.append((update, states))
        offset += update.num_scalars
    return updates


@functools.cache
def _torch_sgd() -> Callable[..., None]:
    from torch.optim import sgd

    accepted = inspect.signature(sgd.sgd).parameters

    def plain_sgd(*args: Any, **keywords: Any) -> None:
        sgd.sgd(*args, **{k: v for k, v in keywords.items() if k in accepted})

    return plain_sgd
