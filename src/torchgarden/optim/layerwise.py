"""Layer-wise adaptive optimizers torch lacks: LAMB and LARS (Model Garden's rules).

Both scale each parameter tensor's step by a *trust ratio* of norms, so large-batch
training keeps every layer's relative update bounded. The rules are the ones Model
Garden trains with (TF Addons' ``LAMB``, ``official/modeling/optimization/lars.py``);
``tests/unit/optim/test_layerwise.py`` checks them on hand-computed values.

Per-parameter switches travel in torch param groups, so Model Garden's name-regex lists
become groups (:func:`torchgarden.optim.param_groups.build_param_groups`):
``weight_decay`` (0.0 for excluded names) and ``layer_adaptation`` (False: trust ratio 1).

The trust ratios stay on the device (``torch.where``), so a step never syncs with the
host.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

__all__ = ["LAMB", "LARS"]


def _trust_ratio(numerator: torch.Tensor, denominator: torch.Tensor) -> torch.Tensor:
    """``numerator / denominator`` where both norms are > 0, else 1 (no host sync)."""
    ones = torch.ones_like(numerator)
    safe = torch.where(denominator > 0, denominator, ones)
    return torch.where((numerator > 0) & (denominator > 0), numerator / safe, ones)


def _closure_loss(closure: Callable[[], float] | None) -> float | None:
    """Re-evaluates the loss with gradients on, as ``torch.optim`` optimizers do."""
    if closure is None:
        return None
    with torch.enable_grad():
        return closure()


class LAMB(torch.optim.Optimizer):
    """LAMB (You et al., 2019), TF Addons' update rule as used by Model Garden.

    Per parameter ``w`` with gradient ``g`` at step ``t``::

        m = beta1 * m + (1 - beta1) * g;     v = beta2 * v + (1 - beta2) * g**2
        u = (m / (1 - beta1**t)) / (sqrt(v / (1 - beta2**t)) + eps) + weight_decay * w
        r = ||w|| / ||u|| if both norms > 0 else 1    (1 without layer adaptation)
        w = w - lr * r * u

    Args:
        params: Parameters or param groups (groups may set ``weight_decay`` and
            ``layer_adaptation``).
        lr: Learning rate. Defaults to 1e-3.
        betas: ``(beta1, beta2)``. Defaults to ``(0.9, 0.999)``.
        eps: Added to the root of the bias-corrected second moment. Defaults to 1e-6.
        weight_decay: Decoupled decay added to the update before the trust ratio.
            Defaults to 0.0.
        layer_adaptation: Use the trust ratio. Defaults to True.

    Example:
        >>> model = torch.nn.Linear(4, 2)
        >>> opt = LAMB(model.parameters(), lr=0.01, weight_decay=0.01)
        >>> model(torch.ones(1, 4)).sum().backward(); opt.step()
    """

    def __init__(self, params: Iterable[Any], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-6,
                 weight_decay: float = 0.0, layer_adaptation: bool = True) -> None:
        if lr < 0 or eps < 0 or weight_decay < 0 or not all(0 <= b < 1 for b in betas):
            raise ValueError(f"LAMB: invalid lr={lr}, betas={betas}, eps={eps} or "
                             f"weight_decay={weight_decay}; all must be >= 0, betas < 1.")
        super().__init__(params, {"lr": lr, "betas": tuple(betas), "eps": eps,
                                  "weight_decay": weight_decay,
                                  "layer_adaptation": layer_adaptation})

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        """Applies one update to every parameter with a gradient."""
        loss = _closure_loss(closure)
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for param in group["params"]:
                if param.grad is None:
                    continue
                grad = param.grad
                state = self.state[param]
                if not state:
                    state["step"] = torch.tensor(0.0)  # On the CPU: reading it never syncs.
                    state["exp_avg"] = torch.zeros_like(param)
                    state["exp_avg_sq"] = torch.zeros_like(param)
                state["step"] += 1
                t = float(state["step"])
                exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
                exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
                exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                denom = (exp_avg_sq / (1 - beta2**t)).sqrt_().add_(group["eps"])
                update = (exp_avg / (1 - beta1**t)).div_(denom)
                if group["weight_decay"]:
                    update.add_(param, alpha=group["weight_decay"])
                if group["layer_adaptation"]:
                    update.mul_(_trust_ratio(param.norm(), update.norm()))
                param.add_(update, alpha=-group["lr"])
        return loss


class LARS(torch.optim.Optimizer):
    """LARS (You et al., 2017), Model Garden's update rule.

    Per parameter ``w`` with gradient ``g`` (``g += weight_decay * w`` first)::

        classic momentum (default):
            r = eeta * ||w|| / ||g|| if both norms > 0 else 1   (1 without adaptation)
            v = momentum * v + lr * r * g
            w = w - (momentum * v + lr * r * g  if nesterov else  v)
        popular momentum (classic_momentum=False):
            v = momentum * v + g;  u = momentum * v + g if nesterov else v
            r = eeta * ||w|| / ||u|| if both norms > 0 else 1
            w = w - lr * r * u

    Args:
        params: Parameters or param groups (groups may set ``weight_decay`` and
            ``layer_adaptation``).
        lr: Learning rate. Defaults to 0.01.
        momentum: Momentum factor. Defaults to 0.9.
        eeta: LARS coefficient. Defaults to 0.001.
        weight_decay: L2 term added to the gradient. Defaults to 0.0.
        nesterov: Nesterov momentum. Defaults to False.
        classic_momentum: Where the rate enters (see above). Defaults to True.
        layer_adaptation: Use the trust ratio. Defaults to True.
    """

    def __init__(self, params: Iterable[Any], lr: float = 0.01, momentum: float = 0.9,
                 eeta: float = 0.001, weight_decay: float = 0.0, nesterov: bool = False,
                 classic_momentum: bool = True, layer_adaptation: bool = True) -> None:
        if lr < 0 or momentum < 0 or eeta <= 0 or weight_decay < 0:
            raise ValueError(f"LARS: invalid lr={lr}, momentum={momentum}, eeta={eeta} or "
                             f"weight_decay={weight_decay}; need >= 0 (eeta > 0).")
        super().__init__(params, {"lr": lr, "momentum": momentum, "eeta": eeta,
                                  "weight_decay": weight_decay, "nesterov": nesterov,
                                  "classic_momentum": classic_momentum,
                                  "layer_adaptation": layer_adaptation})

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        """Applies one update to every parameter with a gradient."""
        loss = _closure_loss(closure)
        for group in self.param_groups:
            for param in group["params"]:
                if param.grad is not None:
                    self._update(param, group)
        return loss

    def _update(self, param: torch.Tensor, group: dict[str, Any]) -> None:
        grad = param.grad
        if group["weight_decay"]:
            grad = grad.add(param, alpha=group["weight_decay"])
        state = self.state[param]
        if not state:
            state["momentum_buffer"] = torch.zeros_like(param)
        velocity, momentum, lr = state["momentum_buffer"], group["momentum"], group["lr"]
        adapt, eeta = group["layer_adaptation"], group["eeta"]
        if group["classic_momentum"]:
            scaled = grad * lr
            if adapt:
                scaled.mul_(_trust_ratio(eeta * param.norm(), grad.norm()))
            velocity.mul_(momentum).add_(scaled)
            update = velocity * momentum + scaled if group["nesterov"] else velocity
            param.sub_(update)
            return
        velocity.mul_(momentum).add_(grad)
        update = velocity * momentum + grad if group["nesterov"] else velocity.clone()
        if adapt:
            update.mul_(_trust_ratio(eeta * param.norm(), update.norm()))
        param.sub_(update, alpha=lr)
