"""Keras' update rules for ``update_rule: keras`` (Model Garden's, where torch's differ).

torch and Keras (the optimizers Model Garden builds) agree on the idea of each optimizer but
not on every detail; the default ``update_rule: torch`` uses torch's optimizers, and
``update_rule: keras`` these, which follow Keras:

* :class:`KerasSGD`: the momentum accumulates rate-scaled steps, ``v = momentum * v - lr * g``,
  ``p += v`` (Nesterov: ``p += momentum * v - lr * g``); torch accumulates gradients and
  scales the sum by the current rate, which differs whenever the rate changes.
* :class:`KerasAdam`: ``p -= lr * sqrt(1 - beta_2^t) / (1 - beta_1^t) * m / (sqrt(v) +
  epsilon)`` (Keras' "epsilon hat"); torch adds epsilon to the bias-corrected root. With
  ``decoupled=True`` (``adamw``) the weights first decay by ``lr * weight_decay``, as Model
  Garden's ``AdamWeightDecay`` and torch's AdamW do.
* :class:`KerasRMSprop`: with momentum, ``mom = momentum * mom + lr * g / sqrt(ms +
  epsilon)``, ``p -= mom`` (epsilon inside the root, the rate inside the momentum);
  without, ``p -= lr * g / (sqrt(ms) + epsilon)``; ``centered`` subtracts the squared mean
  gradient from ``ms``.

A group's ``weight_decay`` other than Adam's decoupled one is the L2 term torch adds to the
gradient (an extra of torchgarden's ``sgd``, ``adam`` and ``rmsprop`` configs). Each step is
a for-loop over the parameters (no fused or foreach kernels).
"""

from __future__ import annotations

import math
from typing import Any

import torch

__all__ = ["KerasAdam", "KerasRMSprop", "KerasSGD"]


class PerParameterOptimizer(torch.optim.Optimizer):
    """Runs ``_update(p, grad, state, group)`` for each parameter with a gradient (the
    Keras rules here and Model Garden's ``SGDTorch``)."""

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        """One update; ``closure`` re-evaluates the loss (optional)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    self._update(p, p.grad, self.state[p], group)
        return loss

    def _update(self, p: torch.Tensor, grad: torch.Tensor, state: dict[str, Any],
                group: dict[str, Any]) -> None:
        raise NotImplementedError


def _l2(p: torch.Tensor, grad: torch.Tensor, group: dict[str, Any]) -> torch.Tensor:
    return grad.add(p, alpha=group["weight_decay"]) if group["weight_decay"] else grad


class KerasSGD(PerParameterOptimizer):
    """SGD with Keras' momentum (see the module docstring)."""

    def __init__(self, params: Any, *, lr: float, momentum: float = 0.0,
                 nesterov: bool = False, weight_decay: float = 0.0) -> None:
        super().__init__(params, {"lr": lr, "momentum": momentum, "nesterov": nesterov,
                                  "weight_decay": weight_decay})

    def _update(self, p: torch.Tensor, grad: torch.Tensor, state: dict[str, Any],
                group: dict[str, Any]) -> None:
        grad, lr, momentum = _l2(p, grad, group), group["lr"], group["momentum"]
        if not momentum:
            p.add_(grad, alpha=-lr)
            return
        velocity = state.setdefault("velocity", torch.zeros_like(p))
        velocity.mul_(momentum).add_(grad, alpha=-lr)
        if group["nesterov"]:
            p.add_(velocity, alpha=momentum).add_(grad, alpha=-lr)
        else:
            p.add_(velocity)


class KerasAdam(PerParameterOptimizer):
    """Adam with Keras' epsilon; ``decoupled`` weight decay for ``adamw`` (module docstring)."""

    def __init__(self, params: Any, *, lr: float, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-7, amsgrad: bool = False, weight_decay: float = 0.0,
                 decoupled: bool = False) -> None:
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "amsgrad": amsgrad,
                                  "weight_decay": weight_decay, "decoupled": decoupled})

    def _update(self, p: torch.Tensor, grad: torch.Tensor, state: dict[str, Any],
                group: dict[str, Any]) -> None:
        lr, (beta_1, beta_2) = group["lr"], group["betas"]
        if group["decoupled"]:
            if group["weight_decay"]:
                p.mul_(1.0 - lr * group["weight_decay"])
        else:
            grad = _l2(p, grad, group)
        t = state["step"] = state.get("step", 0) + 1
        m = state.setdefault("exp_avg", torch.zeros_like(p))
        v = state.setdefault("exp_avg_sq", torch.zeros_like(p))
        m.mul_(beta_1).add_(grad, alpha=1.0 - beta_1)
        v.mul_(beta_2).addcmul_(grad, grad, value=1.0 - beta_2)
        if group["amsgrad"]:
            v = torch.maximum(state.setdefault("max_exp_avg_sq", torch.zeros_like(p)), v,
                              out=state["max_exp_avg_sq"])
        rate = lr * math.sqrt(1.0 - beta_2**t) / (1.0 - beta_1**t)
        p.addcdiv_(m, v.sqrt().add_(group["eps"]), value=-rate)


class KerasRMSprop(PerParameterOptimizer):
    """RMSprop with Keras' epsilon and momentum (module docstring)."""

    def __init__(self, params: Any, *, lr: float, rho: float = 0.9, momentum: float = 0.0,
                 eps: float = 1e-7, centered: bool = False, weight_decay: float = 0.0) -> None:
        super().__init__(params, {"lr": lr, "rho": rho, "momentum": momentum, "eps": eps,
                                  "centered": centered, "weight_decay": weight_decay})

    def _update(self, p: torch.Tensor, grad: torch.Tensor, state: dict[str, Any],
                group: dict[str, Any]) -> None:
        grad, lr, rho, eps = _l2(p, grad, group), group["lr"], group["rho"], group["eps"]
        ms = state.setdefault("square_avg", torch.zeros_like(p))
        ms.mul_(rho).addcmul_(grad, grad, value=1.0 - rho)
        denom = ms
        if group["centered"]:
            mg = state.setdefault("grad_avg", torch.zeros_like(p))
            mg.mul_(rho).add_(grad, alpha=1.0 - rho)
            denom = ms - mg * mg
        if group["momentum"]:
            mom = state.setdefault("momentum_buffer", torch.zeros_like(p))
            mom.mul_(group["momentum"]).addcdiv_(grad, (denom + eps).sqrt(), value=lr)
            p.sub_(mom)
        else:
            p.addcdiv_(grad, denom.sqrt().add_(eps), value=-lr)


def keras_rule(kind: str, config: Any, param_groups: Any, *, lr: float, fused: bool | None,
               weight_decay: float = 0.0) -> torch.optim.Optimizer | None:
    """The Keras-rule optimizer for ``kind`` when ``config.update_rule`` is "keras", else None.

    ``kind`` is the family (``sgd``, ``adam``, ``adamw``, ``rmsprop``); ``weight_decay`` is
    the L2 term, or for ``adamw`` the decoupled rate.

    Raises:
        ValueError: ``fused`` asked for with the Keras rule (it has no fused kernel).
    """
    if getattr(config, "update_rule", "torch") != "keras":
        return None
    if fused:
        raise ValueError(f"trainer.optimizer_config.optimizer.{kind}: update_rule keras has no "
                         "fused kernel; set fused to None, or update_rule to torch.")
    if kind == "sgd":
        return KerasSGD(param_groups, lr=lr, momentum=config.momentum,
                        nesterov=config.nesterov, weight_decay=weight_decay)
    if kind == "rmsprop":
        return KerasRMSprop(param_groups, lr=lr, rho=config.rho, momentum=config.momentum,
                            eps=config.epsilon, centered=config.centered,
                            weight_decay=weight_decay)
    return KerasAdam(param_groups, lr=lr, betas=(config.beta_1, config.beta_2),
                     eps=config.epsilon, amsgrad=config.amsgrad, weight_decay=weight_decay,
                     decoupled=kind == "adamw")
