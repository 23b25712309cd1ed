"""``torch.optim`` updates as functions of tensor lists, for the whole-step graph.

An SGD, Adam or AdamW param group is applied with torch's own functional algorithm
(``torch.optim.sgd.sgd``, ``torch.optim.adam.adam``) on the optimizer's own state
tensors, in the plain per-tensor form that ``torch.compile`` fuses with the rest of the
step. The group's hyperparameters other than the learning rate are read once, when
the update is built; the rate is a 0-d tensor argument.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["GroupUpdate", "has_step_hooks", "is_supported"]


@dataclass(frozen=True)
class _Algorithm:
    """How one optimizer class maps onto its torch functional update."""

    function: Callable[..., None]
    state_keys: Callable[[dict[str, Any]], tuple[str, ...]]
    hyper: Callable[[dict[str, Any]], dict[str, Any]]


def _adam_keys(group: dict[str, Any]) -> tuple[str, ...]:
    amsgrad = ("max_exp_avg_sq",) if group["amsgrad"] else ()
    return ("exp_avg", "exp_avg_sq", *amsgrad, "step")


def _adam_hyper(group: dict[str, Any]) -> dict[str, Any]:
    beta1, beta2 = group["betas"]
    return {
        "amsgrad": group["amsgrad"],
        "beta1": beta1,
        "beta2": beta2,
        "weight_decay": group["weight_decay"],
        "eps": group["eps"],
        "maximize": group["maximize"],
        "decoupled_weight_decay": group.get("decoupled_weight_decay", False),
    }


def _sgd_keys(group: dict[str, Any]) -> tuple[str, ...]:
    return ("momentum_buffer",) if group["momentum"] else ()


def _sgd_hyper(group: dict[str, Any]) -> dict[str, Any]:
    return {
        key: group[key]
        for key in ("weight_decay", "momentum", "dampening", "nesterov", "maximize")
    }


@functools.cache
def _algorithms() -> dict[type, _Algorithm]:
    from torch.optim import adam, adamw, sgd

    table = {
        torch.optim.SGD: _Algorithm(sgd.sgd, _sgd_keys, _sgd_hyper),
        torch.optim.Adam: _Algorithm(adam.adam, _adam_keys, _adam_hyper),
    }
    if "decoupled_weight_decay" in inspect.signature(adam.adam).parameters:
        table[torch.optim.AdamW] = _Algorithm(adam.adam, _adam_keys, _adam_hyper)
    else:  # torch < 2.7: AdamW has its own functional form.
        table[torch.optim.AdamW] = _Algorithm(adamw.adamw, _adam_keys, _adam_hyper)
    return table


# Fixed keywords of torch's functional updates: the plain per-tensor algorithm, which
# inductor fuses with the rest of the step.
_PLAIN = {
    "foreach": False,
    "fused": None,
    "capturable": False,
    "differentiable": False,
    "grad_scale": None,
    "found_inf": None,
    "has_complex": False,
    "has_sparse_grad": False,
}


def is_supported(optimizer: Any) -> bool:
    """True for exactly ``torch.optim.SGD``, ``Adam`` and ``AdamW`` (not subclasses)."""
    return type(optimizer) in _algorithms()


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
    """One param group's update: its parameters' positions and torch's functional step.

    Attributes:
        indices: Positions of the group's parameters in the step's parameter list.
        keys: The optimizer state entries the update reads, in the functional order.
        function: ``torch.optim.sgd.sgd`` or ``torch.optim.adam.adam`` (or ``adamw``).
        keywords: Hyperparameters and implementation switches for ``function``.
    """

    indices: list[int]
    keys: tuple[str, ...]
    function: Callable[..., None]
    keywords: dict[str, Any]

    @classmethod
    def build(
        cls,
        optimizer: torch.optim.Optimizer,
        group: dict[str, Any],
        params: list[torch.Tensor],
        first_index: int,
    ) -> tuple[GroupUpdate, list[list[Any]]]:
        """The update of ``group`` for ``params`` and its state lists (one per key)."""
        algorithm = _algorithms()[type(optimizer)]
        keys = algorithm.state_keys(group)
        states = [[optimizer.state[p][key] for p in params] for key in keys]
        keywords = {**_PLAIN, **algorithm.hyper(group)}
        # Step counters on an accelerator (fused/capturable optimizers): torch's
        # functional updates are only traced in capturable form there, which also keeps
        # the bias corrections on the device.
        keywords["capturable"] = any(
            isinstance(t, torch.Tensor) and t.device.type != "cpu"
            for t in (optimizer.state[p].get("step") for p in params)
        )
        accepted = inspect.signature(algorithm.function).parameters
        keywords = {k: v for k, v in keywords.items() if k in accepted}
        indices = list(range(first_index, first_index + len(params)))
        return cls(indices, keys, algorithm.function, keywords), states

    def update(
        self,
        params: list[torch.Tensor],
        grads: list[torch.Tensor],
        states: list[list[Any]],
        lr: torch.Tensor,
    ) -> None:
        """Applies the step in place to ``params`` and ``states`` (traceable)."""
        self.function(params, grads, *self._lists(states), lr=lr, **self.keywords)

    def _lists(self, states: list[list[Any]]) -> list[list[Any]]:
        # Adam's functional form takes (exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps);
        # max_exp_avg_sqs is an empty list without amsgrad.
        if "exp_avg" in self.keys and "max_exp_avg_sq" not in self.keys:
            return [states[0], states[1], [], states[2]]
        if not self.keys:  # SGD without momentum: no buffers.
            return [[None] * len(self.indices)]
        return states
