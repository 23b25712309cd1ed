"""Model Garden's other optimizer types: ``lamb``, ``lars``, ``adafactor`` and the
``*_experimental`` Keras spellings, registered with :func:`register_optimizer`.

============================  ===========================================================
config                        torch
============================  ===========================================================
``lamb``                      :class:`torchgarden.optim.LAMB` (TF Addons' rule)
``lars``                      :class:`torchgarden.optim.LARS` (Model Garden's rule)
``adafactor``                 ``torch.optim.Adafactor(beta2_decay=-decay_rate,
                              eps=(sqrt(epsilon1), epsilon2), d=clipping_threshold,
                              weight_decay)``
``sgd_experimental``          ``torch.optim.SGD(momentum, nesterov)``
``adam_experimental``         ``torch.optim.Adam`` as ``adam``
``adamw_experimental``        ``torch.optim.AdamW(weight_decay=weight_decay)``
``sgd_torch``                 :class:`SGDTorch`: torch SGD's step, weight decay only on
                              ``weight_keys`` matches, momentum warmed up over
                              ``warmup_steps`` (Model Garden's YOLO ``SGDTorch``)
============================  ===========================================================

``exclude_from_weight_decay`` / ``exclude_from_layer_adaptation`` /
``include_in_weight_decay`` become param groups (see
:mod:`torchgarden.optim.param_groups`). ``jit_compile: true`` is an error: the whole
step is compiled with ``runtime.enable_xla: true`` instead.

Adafactor: torch floors the factored second moment at ``eps1 ** 2`` where Model Garden's
(Mesh TensorFlow's) rule adds ``epsilon1`` to the squared gradient, so ``epsilon1`` is
passed as its square root; torch factors every tensor with two or more dims, so
``min_dim_size_to_factor`` above 1 only logs a warning; ``factored: false``,
``multiply_by_parameter_scale: false``, a ``beta1`` and a ``step_offset`` have no torch
counterpart and are errors.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import torch

from torchgarden.optim._config_access import OPTIMIZATION_PATH
from torchgarden.optim.factory import (
    _adam_moments,
    _build_adam,
    _implementation,
    _sgd,
    register_optimizer,
)
from torchgarden.optim.keras_rules import PerParameterOptimizer, keras_rule
from torchgarden.optim.layerwise import LAMB, LARS
from torchgarden.optim.param_groups import ParamGroups

__all__ = ["SGDTorch"]

_logger = logging.getLogger("torchgarden")
_PATH = f"{OPTIMIZATION_PATH}.optimizer"


def _no_jit(kind: str, config: Any) -> None:
    if config.jit_compile:
        raise ValueError(
            f"{_PATH}.{kind}.jit_compile is True; torch compiles the whole step instead: set "
            f"runtime.enable_xla=true and {_PATH}.{kind}.jit_compile=false.")


@register_optimizer("lamb")
def _build_lamb(config: Any, param_groups: ParamGroups, *, lr: float) -> torch.optim.Optimizer:
    return LAMB(param_groups, lr=lr, betas=(config.beta_1, config.beta_2), eps=config.epsilon,
                weight_decay=config.weight_decay_rate)


@register_optimizer("lars")
def _build_lars(config: Any, param_groups: ParamGroups, *, lr: float) -> torch.optim.Optimizer:
    return LARS(param_groups, lr=lr, momentum=config.momentum, eeta=config.eeta,
                weight_decay=config.weight_decay_rate, nesterov=config.nesterov,
                classic_momentum=config.classic_momentum)


_ADAFACTOR_UNSUPPORTED = {
    "factored": (True, "torch's Adafactor always factors matrices"),
    "multiply_by_parameter_scale": (True, "torch's Adafactor always scales by the RMS"),
    "beta1": (None, "torch's Adafactor has no first moment (momentum)"),
    "step_offset": (0, "torch's Adafactor counts steps from 0"),
}


@register_optimizer("adafactor")
def _build_adafactor(config: Any, param_groups: ParamGroups, *, lr: float
                     ) -> torch.optim.Optimizer:
    for field, (supported, why) in _ADAFACTOR_UNSUPPORTED.items():
        value = getattr(config, field)
        if value != supported:
            raise ValueError(f"{_PATH}.adafactor.{field} is {value!r} but {why}; set it to "
                             f"{supported!r} or choose another optimizer type.")
    if config.min_dim_size_to_factor > 1:
        _logger.warning(
            "%s.adafactor.min_dim_size_to_factor=%s: torch's Adafactor factors every tensor "
            "with 2+ dims, also smaller ones.", _PATH, config.min_dim_size_to_factor)
    return torch.optim.Adafactor(
        param_groups, lr=lr, beta2_decay=-float(config.decay_rate),
        eps=(math.sqrt(config.epsilon1), config.epsilon2), d=config.clipping_threshold,
        weight_decay=config.weight_decay or 0.0)  # None: no decay


@register_optimizer("sgd_experimental")
def _build_sgd_experimental(config: Any, param_groups: ParamGroups, *, lr: float,
                            fused: bool | None) -> torch.optim.Optimizer:
    _no_jit("sgd_experimental", config)
    # Its config has no weight_decay field.
    return _sgd(config, param_groups, lr=lr, fused=fused, weight_decay=0.0)


@register_optimizer("adam_experimental")
def _build_adam_experimental(config: Any, param_groups: ParamGroups, *, lr: float,
                             fused: bool | None) -> torch.optim.Optimizer:
    _no_jit("adam_experimental", config)
    return _build_adam(config, param_groups, lr=lr, fused=fused)


@register_optimizer("adamw_experimental")
def _build_adamw_experimental(config: Any, param_groups: ParamGroups, *, lr: float,
                              fused: bool | None) -> torch.optim.Optimizer:
    _no_jit("adamw_experimental", config)
    keras = keras_rule("adamw", config, param_groups, lr=lr, fused=fused,
                       weight_decay=config.weight_decay)
    return keras or torch.optim.AdamW(
        param_groups, lr=lr, weight_decay=config.weight_decay, **_adam_moments(config),
        **_implementation("adamw", param_groups, fused))


class SGDTorch(PerParameterOptimizer):
    """Model Garden's ``sgd_torch``: torch SGD with a momentum warmup.

    At optimizer step ``t`` (from 0) the momentum is ``momentum_start + t * (momentum -
    momentum_start) / warmup_steps`` while ``t <= warmup_steps``, then ``momentum``; the
    update is ``d = g + weight_decay * p`` (the group's decay), ``buf = mu * buf + d``,
    ``d = d + mu * buf`` with Nesterov else ``buf``, ``p -= lr * d``; the momentum buffer
    starts at zero, as Model Garden's slot does.

    Args:
        params: Parameters or param groups.
        lr: Learning rate.
        momentum: Momentum after the warmup; 0 turns momentum off.
        momentum_start: Momentum at step 0.
        warmup_steps: Steps of the momentum ramp; 0 or less: no ramp.
        nesterov: Use Nesterov momentum.
        weight_decay: L2 term added to the gradient (a group may set its own).
    """

    def __init__(self, params: Any, *, lr: float, momentum: float = 0.9,
                 momentum_start: float = 0.0, warmup_steps: int = 0, nesterov: bool = False,
                 weight_decay: float = 0.0) -> None:
        if not 0.0 <= momentum <= 1.0:
            raise ValueError(f"{_PATH}.sgd_torch.momentum must be in [0, 1], got {momentum}.")
        defaults = {"lr": lr, "momentum": momentum, "momentum_start": momentum_start,
                    "warmup_steps": warmup_steps, "nesterov": nesterov,
                    "weight_decay": weight_decay}
        super().__init__(params, defaults)

    def _momentum(self, group: dict[str, Any], step: int) -> float:
        end, start, warmup = group["momentum"], group["momentum_start"], group["warmup_steps"]
        if warmup > 0 and step <= warmup:
            return start + step * (end - start) / warmup
        return end

    def _update(self, p: torch.Tensor, grad: torch.Tensor, state: dict[str, Any],
                group: dict[str, Any]) -> None:
        t = state.get("step", 0)
        d = grad.add(p, alpha=group["weight_decay"]) if group["weight_decay"] else grad.clone()
        if group["momentum"] > 0:
            mu = self._momentum(group, t)
            buf = state.setdefault("momentum_buffer", torch.zeros_like(p))
            buf.mul_(mu).add_(d)
            d = d.add(buf, alpha=mu) if group["nesterov"] else buf
        p.add_(d, alpha=-group["lr"])
        state["step"] = t + 1


@register_optimizer("sgd_torch")
def _build_sgd_torch(config: Any, param_groups: ParamGroups, *, lr: float
                     ) -> torch.optim.Optimizer:
    if config.momentum > 0 and config.warmup_steps < 1:
        raise ValueError(
            f"{_PATH}.sgd_torch.warmup_steps is {config.warmup_steps}: Model Garden divides "
            "by it at step 0 (the momentum becomes NaN); set it >= 1 (set momentum_start "
            "equal to momentum for no ramp).")
    return SGDTorch(param_groups, lr=lr, momentum=config.momentum,
                    momentum_start=config.momentum_start, warmup_steps=config.warmup_steps,
                    nesterov=config.nesterov, weight_decay=config.weight_decay)
