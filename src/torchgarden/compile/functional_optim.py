"""``torch.optim`` updates as functions of tensor lists, for the compiled step graph.

Each :class:`GroupUpdate` updates the optimizer's own parameters and state tensors in
place, so ``state_dict()``, checkpoints and the eager path stay interchangeable. SGD is
torch's functional ``sgd`` (plain per-tensor form); Adam and AdamW are the arithmetic of
torch's ``_single_tensor_adam`` with the step-dependent scalars computed on the host, as
eager torch does (``docs/performance.md``: "Adam without a ``pow`` per vector").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch.optim.sgd import sgd as functional_sgd

__all__ = ["KINDS", "GroupUpdate", "bind_updates"]

#: The optimizers the graph updates: exactly these classes, not subclasses.
KINDS = {torch.optim.SGD: "sgd", torch.optim.Adam: "adam", torch.optim.AdamW: "adamw"}
# Fixed keywords of torch's functional SGD: the plain per-tensor algorithm.
_PLAIN_SGD = {"foreach": False, "fused": None, "grad_scale": None, "found_inf": None,
              "has_sparse_grad": False}
_SGD_HYPER = ("weight_decay", "momentum", "dampening", "nesterov", "maximize")


@dataclass
class GroupUpdate:
    """The update of some parameters of one param group (for Adam, those with the same
    step count).

    Attributes:
        kind: A value of ``KINDS``.
        group: The index of the param group (whose learning rate the update uses).
        indices: Positions of the parameters in the graph's parameter list.
        hyper: The group's hyperparameters other than the learning rate.
        offset: Where this update's scalars start in a step's row of scalars.
        step: Adam: the host copy of these parameters' ``state["step"]``.
        steps_in_graph: Adam: the graph increments ``state["step"]`` (the last state list);
            False when the caller counts them (they are not among the states passed).
    """

    kind: str
    group: int
    indices: list[int]
    hyper: dict[str, Any]
    offset: int
    step: int = 0
    steps_in_graph: bool = True

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
        return [lr / (1 - beta1**self.step), math.sqrt(1 - beta2**self.step),
                1 - lr * self.hyper["weight_decay"]]

    def apply(self, params: list[torch.Tensor], grads: list[torch.Tensor],
              states: list[list[torch.Tensor]], row: torch.Tensor) -> None:
        """Applies one step in place to ``params`` and their ``states`` (traceable); ``row``
        holds the step's float32 scalars of every update (this one's at ``offset``)."""
        if self.kind == "sgd":
            buffers = states[0] if states else [None] * len(params)
            hyper = {key: self.hyper[key] for key in _SGD_HYPER}
            functional_sgd(params, grads, buffers, lr=row[self.offset], **_PLAIN_SGD, **hyper)
        else:
            _adam(self.hyper, self.kind == "adamw", params, grads, states,
                  row[self.offset:self.offset + self.num_scalars], self.steps_in_graph)


def _adam(hyper: dict[str, Any], adamw: bool, params: list[torch.Tensor],
          grads: list[torch.Tensor], states: list[list[torch.Tensor]],
          scalars: torch.Tensor, count_steps: bool) -> None:
    """torch's ``_single_tensor_adam`` (non-capturable form) on host-computed scalars; with
    ``count_steps`` the last state list holds the step counts, incremented here."""
    beta1, beta2 = hyper["betas"]
    weight_decay = hyper["weight_decay"]
    decoupled = adamw or hyper.get("decoupled_weight_decay", False)
    step_size, bias_correction2_sqrt, decay = scalars[0], scalars[1], scalars[2]
    exp_avgs, exp_avg_sqs, *rest = states
    max_exp_avg_sqs = rest[0] if hyper["amsgrad"] else None
    for i, param in enumerate(params):
        grad = grads[i] if not hyper["maximize"] else -grads[i]
        if count_steps:  # The optimizer's own counter, for state_dict() and eager steps.
            rest[-1][i] += 1
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


def bind_updates(
    optimizer: torch.optim.Optimizer,
) -> tuple[list[torch.Tensor], list[GroupUpdate], list[list[list[Any]]]]:
    """The parameters the graph updates, their updates, and each update's state lists.

    ``optimizer``'s state must exist (an eager step made it). Parameters that got no
    gradient in the eager steps (and have no state) are left alone, as the eager
    optimizer does; plain SGD has no state to tell, so it updates all. Adam parameters
    are split by their step counts, so each update's bias corrections are its own.

    Returns:
        ``(params, updates, states)``: ``states[u]`` holds one list per state entry that
        ``updates[u]`` reads (e.g. ``exp_avg``, ``exp_avg_sq``, ``step``).
    """
    kind = KINDS[type(optimizer)]
    params: list[torch.Tensor] = []
    updates: list[GroupUpdate] = []
    states: list[list[list[Any]]] = []
    offset = 0
    for index, group in enumerate(optimizer.param_groups):
        keys = _state_keys(kind, group)
        chosen = [p for p in group["params"] if p.requires_grad and (
            not keys or p.grad is not None or p in optimizer.state)]
        parts: dict[int, list[int]] = {}
        for i, param in enumerate(chosen):
            # The step count is a tensor (or a number): a host sync, at bind only.
            step = 0 if kind == "sgd" else int(optimizer.state[param]["step"])
            parts.setdefault(step, []).append(i)
        hyper = {key: value for key, value in group.items() if key not in ("params", "lr")}
        for step, members in parts.items():
            update = GroupUpdate(kind, index, [len(params) + i for i in members], hyper,
                                 offset, step)
            updates.append(update)
            states.append([[optimizer.state[chosen[i]][key] for i in members] for key in keys])
            offset += update.num_scalars
        params.extend(chosen)
    return params, updates, states
