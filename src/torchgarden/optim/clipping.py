"""Keras-style gradient clipping that runs inside ``optimizer.step()``.

Keras optimizers clip in ``apply_gradients`` when built with ``clipnorm``,
``clipvalue`` or ``global_clipnorm``. Here the same three options become step
pre-hooks on a ``torch.optim.Optimizer``: they run at the start of ``step()``, so they
see the true (unscaled) gradients when a :class:`~torchgarden.optim.LossScaleOptimizer`
has unscaled them, and a custom ``train_step`` needs no extra call. An option left at
None registers nothing and costs nothing.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch.utils.hooks import RemovableHandle

__all__ = ["add_gradient_clipping", "clip_each_norm_", "clip_global_norm_", "clip_rules",
           "clip_value_"]


def add_gradient_clipping(
    optimizer: torch.optim.Optimizer,
    *,
    clipnorm: float | None = None,
    clipvalue: float | None = None,
    global_clipnorm: float | None = None,
) -> list[RemovableHandle]:
    """Makes ``optimizer.step()`` clip gradients first, like a Keras optimizer.

    The order is: per-parameter norm (``clipnorm``) or global norm (``global_clipnorm``),
    then value clipping (``clipvalue``). None of the clips synchronizes with the device:
    non-finite norms are not checked (``error_if_nonfinite=False``).

    Args:
        optimizer: The optimizer whose ``step()`` should clip. Parameters added later
            with ``add_param_group`` are not clipped.
        clipnorm: Clip each gradient tensor to this L2 norm on its own:
            ``g * clipnorm / max(norm(g), clipnorm)``. Defaults to None (off).
        clipvalue: Clamp every gradient element to ``[-clipvalue, clipvalue]``.
            Defaults to None (off).
        global_clipnorm: Scale all gradients so their joint L2 norm is at most this
            (``torch.nn.utils.clip_grad_norm_``). Defaults to None (off).

    Returns:
        The hook handles; ``handle.remove()`` turns a clip off again.

    Raises:
        ValueError: If a value is not positive, or both ``clipnorm`` and
            ``global_clipnorm`` are set (Keras rejects that too).
    """
    for name, value in (("clipnorm", clipnorm), ("clipvalue", clipvalue),
                        ("global_clipnorm", global_clipnorm)):
        if value is not None and not value > 0:
            raise ValueError(f"Gradient clipping `{name}` must be > 0 or None, got {value!r}.")
    if clipnorm is not None and global_clipnorm is not None:
        raise ValueError(
            f"Set only one of clipnorm ({clipnorm}) and global_clipnorm ({global_clipnorm}); "
            "use global_clipnorm to bound the norm of all gradients together."
        )
    params = [p for group in optimizer.param_groups for p in group["params"]]
    clips = ((global_clipnorm, clip_global_norm_), (clipnorm, clip_each_norm_),
             (clipvalue, clip_value_))
    return [optimizer.register_step_pre_hook(functools.partial(_clip, rule, params,
                                                               float(value)))
            for value, rule in clips if value is not None]


def clip_rules(optimizer: torch.optim.Optimizer) -> list[tuple[Any, list[Any], float]] | None:
    """``(rule, params, limit)`` of each of ``optimizer``'s step pre-hooks, in their order,
    when every one is a clip added here (the compiled step applies them to its gradients);
    None when it has another hook."""
    hooks = list(optimizer._optimizer_step_pre_hooks.values())
    if optimizer._optimizer_step_post_hooks or not all(
            isinstance(h, functools.partial) and h.func is _clip for h in hooks):
        return None
    return [h.args for h in hooks]


# A step pre-hook is _clip bound to (rule, params, limit) with functools.partial; it returns
# None (a pre-hook that returns a value replaces the arguments of step()). Each rule scales
# a list of gradients in place, without a host sync (non-finite norms are not checked).
def _clip(rule: Any, params: list[torch.Tensor], limit: float, *hook_args: Any) -> None:
    grads = [p.grad for p in params if p.grad is not None]
    if grads:
        with torch.no_grad():
            rule(grads, limit)


def clip_global_norm_(grads: list[torch.Tensor], max_norm: float) -> None:
    """Scales ``grads`` so their joint L2 norm is at most ``max_norm``, with the arithmetic
    of ``torch.nn.utils.clip_grad_norm_`` (coefficient ``max_norm / (norm + 1e-6)``)."""
    total = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
    torch._foreach_mul_(grads, torch.clamp(max_norm / (total + 1e-6), max=1.0))


def clip_each_norm_(grads: list[torch.Tensor], limit: float) -> None:
    """Scales each gradient to L2 norm at most ``limit`` on its own: by ``limit /
    max(norm, limit)``, exactly 1.0 for small gradients."""
    factors = torch._foreach_norm(grads)
    torch._foreach_clamp_min_(factors, limit)
    torch._foreach_reciprocal_(factors)
    torch._foreach_mul_(factors, limit)
    torch._foreach_mul_(grads, factors)


def clip_value_(grads: list[torch.Tensor], bound: float) -> None:
    """Clamps every gradient element to ``[-bound, bound]``."""
    torch._foreach_clamp_min_(grads, -bound)
    torch._foreach_clamp_max_(grads, bound)
