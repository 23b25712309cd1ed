"""Building a ``torch.optim.Optimizer`` from ``OptimizationConfig.optimizer``.

Model Garden's optimizer configs use Keras names; they map to torch as follows:

============  ==========================================================================
config        torch
============  ==========================================================================
``sgd``       ``torch.optim.SGD(momentum, nesterov, weight_decay)``
``adam``      ``torch.optim.Adam(betas=(beta_1, beta_2), eps=epsilon, amsgrad, weight_decay)``
``adamw``     ``torch.optim.AdamW(betas, eps, amsgrad, weight_decay=weight_decay_rate)``;
              parameters whose name matches an ``exclude_from_weight_decay`` regex (and
              no ``include_in_weight_decay`` one) go to a param group with
              ``weight_decay=0``; ``gradient_clip_norm`` (Model Garden's default 1.0;
              0 is off) clips the global norm
``rmsprop``   ``torch.optim.RMSprop(alpha=rho, momentum, eps=epsilon, centered, weight_decay)``
``adagrad``   ``torch.optim.Adagrad(initial_accumulator_value, eps=epsilon, weight_decay)``
============  ==========================================================================

``lamb``, ``lars``, ``adafactor`` and the ``*_experimental`` types are registered by
:mod:`torchgarden.optim.model_garden_optimizers`. Name-pattern lists
(``exclude_from_weight_decay``, ...) are regexes matched with ``re.search`` against
parameter names (:mod:`torchgarden.optim.param_groups`).

The update rules are torch's, which differ from Keras in small ways:

* ``epsilon`` is added after the square root (Keras RMSprop adds it inside) and, for
  Adam, to the bias-corrected denominator (Keras uses "epsilon hat").
* SGD momentum accumulates gradients and multiplies by the current rate (Keras
  accumulates rate-scaled updates); the two agree while the rate is constant.
* ``weight_decay`` of ``sgd``/``adam``/``rmsprop``/``adagrad`` is torch's L2 term added
  to the gradient; ``adamw``'s ``weight_decay_rate`` is decoupled, as in Model Garden.

``fused`` (the sub-config's field, or :func:`build_optimizer`'s keyword) selects the
implementation:

* None or False (the default): no implementation keyword is passed, so torch picks its
  own default, exactly as ``torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)``
  does: a for-loop over the parameters on CPU, ``foreach`` kernels on CUDA. The weights
  then stay bitwise equal (``torch.equal``) to a hand-written ``loss.backward();
  opt.step(); opt.zero_grad()`` loop whose optimizer is built with the same
  hyper-parameters and torch's default implementation, for every built-in optimizer
  (``tests/unit/optim/test_parity.py``: sgd plain/momentum/nesterov/weight decay,
  adam incl. amsgrad and weight decay, adamw incl. decay and exclusions, rmsprop incl.
  centered momentum, adagrad; a 3-layer MLP, 40 steps, CPU). False is not passed on
  because torch's ``fused=False`` also turns off its ``foreach`` default on CUDA.
* True: torch's fused kernel, for ``sgd``, ``adam`` and ``adamw`` (CPU and CUDA) and
  ``adagrad`` (CPU); ``rmsprop`` has none, and True is an error there. It computes the
  same update but rounds differently. Measured on CPU (torch 2.13, one thread, 3-layer
  MLP): fused Adam, AdamW and Adagrad differ from the for-loop from the first step and
  fused SGD with momentum within a few steps (max abs difference ~1e-7 after 30 steps);
  only SGD without momentum stayed bit-equal, and it is no faster. On a 64-128-10 MLP
  (batch 64, one thread) the fused ``optimizer.step()`` took 0.5x the time for
  Adam/AdamW, 0.6x for Adagrad and 0.7x for momentum SGD; the whole training step
  0.7x, 0.9x and 0.95x. With a :class:`~torchgarden.optim.LossScaleOptimizer`, fused
  kernels also skip non-finite steps without a host sync (one ``.item()`` per step
  otherwise).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from torchgarden.optim._config_access import OPTIMIZATION_PATH, selected
from torchgarden.optim.clipping import add_gradient_clipping
from torchgarden.optim.eager_dynamo import defer_dynamo_import
from torchgarden.optim.keras_rules import keras_rule
from torchgarden.optim.learning_rate import build_learning_rate
from torchgarden.optim.param_groups import ParamGroups, build_param_groups, name_overrides

if TYPE_CHECKING:
    from torchgarden.config import OptimizationConfig

__all__ = ["build_optimizer", "get_learning_rate", "register_optimizer", "set_learning_rate"]

OptimizerBuilder = Callable[..., torch.optim.Optimizer]
"""``builder(sub_config, param_groups, *, lr, [fused]) -> Optimizer``."""


@dataclass(frozen=True)
class _Entry:
    builder: OptimizerBuilder
    accepts_fused: bool


_OPTIMIZERS: dict[str, _Entry] = {}
_OPTIMIZER_PATH = f"{OPTIMIZATION_PATH}.optimizer"


def register_optimizer(name: str) -> Callable[[OptimizerBuilder], OptimizerBuilder]:
    """Registers a builder for ``optimizer.type == name`` (a decorator).

    The builder is called as ``builder(sub_config, param_groups, lr=lr)`` where
    ``sub_config`` is ``getattr(optimization_config.optimizer, name)``, ``param_groups``
    is a list of torch param-group dicts and ``lr`` the schedule's value at step 0. A
    builder that also accepts ``fused`` receives the requested implementation (True,
    False or None; the built-ins read None and False as torch's default). Gradient
    clipping from the sub-config's ``clipnorm``, ``clipvalue`` and ``global_clipnorm``
    is added by :func:`build_optimizer`.

    Example:
        >>> @register_optimizer("my_sgd")
        ... def _build(config, param_groups, *, lr):
        ...     return torch.optim.SGD(param_groups, lr=lr, momentum=config.momentum)

    Raises:
        ValueError: If ``name`` is already registered.
    """

    def decorator(builder: OptimizerBuilder) -> OptimizerBuilder:
        if name in _OPTIMIZERS:
            raise ValueError(
                f"Optimizer type {name!r} is already registered (by "
                f"{_OPTIMIZERS[name].builder.__qualname__}); choose another name."
            )
        accepts_fused = "fused" in inspect.signature(builder).parameters
        _OPTIMIZERS[name] = _Entry(builder, accepts_fused)
        return builder

    return decorator


# The devices each fused kernel runs on (torch 2.13). Fused kernels are used only when
# asked for: they round differently from torch's default implementation.
_FUSED_DEVICES = {
    "sgd": frozenset({"cpu", "cuda"}),
    "adam": frozenset({"cpu", "cuda"}),
    "adamw": frozenset({"cpu", "cuda"}),
    "adagrad": frozenset({"cpu"}),
}


def _implementation(kind: str, param_groups: ParamGroups, fused: bool | None) -> dict[str, Any]:
    """Returns the implementation keywords for a built-in optimizer.

    Empty (torch's default implementation, what a hand-written loop gets) unless
    ``fused`` is True.

    Raises:
        ValueError: If ``fused`` is True and torch has no fused ``kind`` for the
            parameters' devices.
    """
    if not fused:
        return {}
    devices = _FUSED_DEVICES.get(kind)
    if devices is None:
        raise ValueError(
            f"{_OPTIMIZER_PATH}.{kind}.fused is True but torch has no fused {kind}; "
            f"set it to None (torch's default). Fused kernels exist for {sorted(_FUSED_DEVICES)}."
        )
    found = {p.device.type for group in param_groups for p in group["params"]}
    if not found <= devices:
        raise ValueError(
            f"{_OPTIMIZER_PATH}.{kind}.fused is True but torch's fused {kind} runs on "
            f"{sorted(devices)} and the parameters are on {sorted(found)}; set it to None "
            "(torch's default)."
        )
    return {"fused": True}


def _sgd(config: Any, param_groups: ParamGroups, *, lr: float, fused: bool | None,
         weight_decay: float) -> torch.optim.Optimizer:
    keras = keras_rule("sgd", config, param_groups, lr=lr, fused=fused, weight_decay=weight_decay)
    return keras or torch.optim.SGD(
        param_groups,
        lr=lr,
        momentum=config.momentum,
        # Keras accepts nesterov without momentum (a no-op); torch rejects it.
        nesterov=config.nesterov and config.momentum > 0,
        weight_decay=weight_decay,
        **_implementation("sgd", param_groups, fused),
    )


@register_optimizer("sgd")
def _build_sgd(config: Any, param_groups: ParamGroups, *, lr: float, fused: bool | None):
    return _sgd(config, param_groups, lr=lr, fused=fused, weight_decay=config.weight_decay)


def _adam_moments(config: Any) -> dict[str, Any]:
    """The keywords of the Adam family's ``AdamMomentsConfig`` fields."""
    return {"betas": (config.beta_1, config.beta_2), "eps": config.epsilon,
            "amsgrad": config.amsgrad}


@register_optimizer("adam")
def _build_adam(config: Any, param_groups: ParamGroups, *, lr: float, fused: bool | None):
    keras = keras_rule("adam", config, param_groups, lr=lr, fused=fused,
                       weight_decay=config.weight_decay)
    return keras or torch.optim.Adam(
        param_groups,
        lr=lr,
        weight_decay=config.weight_decay,
        **_adam_moments(config),
        **_implementation("adam", param_groups, fused),
    )


@register_optimizer("adamw")
def _build_adamw(config: Any, param_groups: ParamGroups, *, lr: float, fused: bool | None):
    keras = keras_rule("adamw", config, param_groups, lr=lr, fused=fused,
                       weight_decay=config.weight_decay_rate)
    return keras or torch.optim.AdamW(
        param_groups,
        lr=lr,
        weight_decay=config.weight_decay_rate,
        **_adam_moments(config),
        **_implementation("adamw", param_groups, fused),
    )


@register_optimizer("rmsprop")
def _build_rmsprop(config: Any, param_groups: ParamGroups, *, lr: float, fused: bool | None):
    keras = keras_rule("rmsprop", config, param_groups, lr=lr, fused=fused,
                       weight_decay=config.weight_decay)
    return keras or torch.optim.RMSprop(
        param_groups,
        lr=lr,
        alpha=config.rho,
        momentum=config.momentum,
        eps=config.epsilon,
        centered=config.centered,
        weight_decay=config.weight_decay,
        **_implementation("rmsprop", param_groups, fused),
    )


@register_optimizer("adagrad")
def _build_adagrad(config: Any, param_groups: ParamGroups, *, lr: float, fused: bool | None):
    return torch.optim.Adagrad(
        param_groups,
        lr=lr,
        initial_accumulator_value=config.initial_accumulator_value,
        eps=config.epsilon,
        weight_decay=config.weight_decay,
        **_implementation("adagrad", param_groups, fused),
    )


def build_optimizer(
    optimization_config: OptimizationConfig,
    params: nn.Module | Iterable[Any],
    *,
    lr: float | None = None,
    fused: bool | None = None,
) -> torch.optim.Optimizer:
    """Builds the optimizer of an ``OptimizationConfig``, gradient clipping included.

    Args:
        optimization_config: Reads ``.optimizer`` (one-of over the registered types:
            ``sgd``, ``adam``, ``adamw``, ``rmsprop``, ``adagrad`` and user types) and,
            when ``lr`` is None, ``.learning_rate``/``.warmup``.
        params: An ``nn.Module`` (its parameters with ``requires_grad``), an iterable
            of parameters, of ``(name, parameter)`` pairs, or of param-group dicts.
            Names are needed for ``exclude_from_weight_decay``.
        lr: The initial learning rate. Defaults to None: the schedule's value at step 0.
        fused: Overrides the sub-config's ``fused`` when not None: True asks for
            torch's fused kernel, False for torch's default implementation. Defaults
            to None (the sub-config's ``fused``; None there is torch's default, which
            keeps the step bitwise equal to a hand-written loop).

    Returns:
        A ``torch.optim.Optimizer`` whose ``step()`` clips gradients as configured.

    Raises:
        ValueError: If the optimizer type is unknown (with the closest valid type), a
            clipping value is invalid, or there are no trainable parameters.
        TypeError: If ``params`` is of an unsupported kind.

    Example:
        >>> from torchgarden.config import OptimizationConfig
        >>> cfg = OptimizationConfig().override({
        ...     "optimizer": {"type": "sgd", "sgd": {"momentum": 0.9}},
        ...     "learning_rate": {"type": "constant", "constant": {"learning_rate": 0.1}}})
        >>> opt = build_optimizer(cfg, nn.Linear(2, 1))
        >>> get_learning_rate(opt)
        0.1
    """
    kind, sub_config = selected(optimization_config.optimizer, _OPTIMIZER_PATH, _OPTIMIZERS)
    defer_dynamo_import()
    if lr is None:
        lr = build_learning_rate(optimization_config)(0)
    param_groups = build_param_groups(
        params, name_overrides(sub_config), path=f"{_OPTIMIZER_PATH}.{kind}")
    entry = _OPTIMIZERS[kind]
    kwargs: dict[str, Any] = {"lr": float(lr)}
    # A registered type's sub-config need not declare fused or the clips: absent is off.
    if entry.accepts_fused:
        kwargs["fused"] = fused if fused is not None else getattr(sub_config, "fused", None)
    optimizer = entry.builder(sub_config, param_groups, **kwargs)
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(
            f"The builder registered for optimizer type {kind!r} returned "
            f"{type(optimizer).__name__}; expected a torch.optim.Optimizer."
        )
    _add_clips(optimizer, sub_config, f"{_OPTIMIZER_PATH}.{kind}")
    return optimizer


def _add_clips(optimizer: torch.optim.Optimizer, sub_config: Any, path: str) -> None:
    """Model Garden adamw's ``gradient_clip_norm`` (a global-norm clip; 0 is off), then the
    Keras clips (``clipnorm``, ``clipvalue``, ``global_clipnorm``): step pre-hooks run in
    the order they are added, as Model Garden clips before Keras does."""
    first = getattr(sub_config, "gradient_clip_norm", None)
    if first is not None and first < 0:
        raise ValueError(f"{path}.gradient_clip_norm must be >= 0 (0 does not clip), got "
                         f"{first}.")
    if first:
        add_gradient_clipping(optimizer, global_clipnorm=first)
    add_gradient_clipping(
        optimizer,
        clipnorm=getattr(sub_config, "clipnorm", None),
        clipvalue=getattr(sub_config, "clipvalue", None),
        global_clipnorm=getattr(sub_config, "global_clipnorm", None),
    )


def set_learning_rate(optimizer: Any, lr: float) -> None:
    """Writes ``lr`` into every param group (cheap enough to call every step), times the
    group's ``lr_mult`` where it has one (``trainer.param_rules``,
    :mod:`torchgarden.optim.param_rules`).

    A tensor-valued ``lr`` (capturable / compiled optimizers) is filled in place, so no
    host sync happens. Works for a :class:`LossScaleOptimizer` too.
    """
    for group in optimizer.param_groups:
        rate = lr * group["lr_mult"] if "lr_mult" in group else lr
        if isinstance(group["lr"], torch.Tensor):
            group["lr"].fill_(rate)
        else:
            group["lr"] = rate


def get_learning_rate(optimizer: Any) -> float:
    """Returns the scheduled learning rate: the first param group's, divided by its
    ``lr_mult`` (the first group with a non-zero one).

    A tensor-valued ``lr`` is read with ``.item()``, which syncs with the device.
    """
    groups = optimizer.param_groups
    group = next((g for g in groups if g.get("lr_mult", 1.0) != 0), groups[0])
    lr = group["lr"]
    lr = float(lr.item()) if isinstance(lr, torch.Tensor) else float(lr)  # may sync
    return lr / group.get("lr_mult", 1.0) if group.get("lr_mult", 1.0) else lr
