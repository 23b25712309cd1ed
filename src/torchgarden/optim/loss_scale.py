"""Loss scaling for float16 training, in the shape of Keras' ``LossScaleOptimizer``.

The scaling itself is ``torch.amp.GradScaler``; this class bundles the scaler with the
optimizer it serves so a custom ``train_step`` reads like Model Garden's:

.. code-block:: python

    with torch.autocast("cuda", dtype=torch.float16):
        loss = loss_fn(model(x), y)
    optimizer.scale(loss).backward()   # Keras: optimizer.get_scaled_loss(loss)
    optimizer.step()                   # unscale, skip on inf/NaN, update the scale
    optimizer.zero_grad()
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["LossScaleOptimizer"]


def _device_of(optimizer: torch.optim.Optimizer) -> str:
    for group in optimizer.param_groups:
        for param in group["params"]:
            return param.device.type
    return "cpu"


def _fresh_fused_momentum_buffers(optimizer: Any) -> list[torch.nn.Parameter]:
    """Parameters of a fused momentum SGD that get their momentum buffer this step."""
    if not isinstance(optimizer, torch.optim.SGD):
        return []
    return [
        p
        for group in optimizer.param_groups
        if group.get("fused") and group.get("momentum", 0)
        for p in group["params"]
        if p.grad is not None and optimizer.state.get(p, {}).get("momentum_buffer") is None
    ]


def _drop_if_skipped(optimizer: Any, params: list[torch.nn.Parameter]) -> None:
    """Removes momentum buffers that a skipped fused SGD step left uninitialised.

    torch's fused SGD allocates the buffers with ``empty_like`` and returns early on
    a non-finite gradient, so they would hold arbitrary memory (training diverges and
    stops being reproducible). Runs only until the first step that is not skipped.
    """
    finite = torch.stack([p.grad.isfinite().all() for p in params]).all()
    if not bool(finite):  # Host sync: only on steps that create momentum buffers.
        for p in params:
            optimizer.state[p].pop("momentum_buffer", None)


class LossScaleOptimizer:
    """Wraps an optimizer with (dynamic or fixed) loss scaling via ``GradScaler``.

    ``step()`` first unscales the gradients in place, so gradient clipping hooks and
    any inspection see true gradients; then it runs the inner optimizer's ``step()``
    unless a gradient is inf/NaN, and updates the scale: halved after a skipped step,
    doubled after ``growth_interval`` finite steps in a row (dynamic only).

    Host syncs: with a fused inner optimizer (``fused: true`` in the optimizer config)
    the skip happens inside the kernel and ``step()`` never syncs; other optimizers pay
    one ``.item()`` per step inside ``GradScaler.step``.

    The inner optimizer must hold float32 (master) parameters; float16 gradients
    cannot be unscaled.

    Args:
        optimizer: The optimizer to wrap.
        dynamic: Adjust the scale on overflow and after stable stretches. False keeps
            ``initial_scale`` for the whole run (Keras' fixed loss scale) while still
            skipping non-finite steps. Defaults to True.
        initial_scale: The starting (or fixed) scale. Defaults to ``2.0**15`` (Keras).
        growth_interval: Finite steps in a row before the scale doubles. Defaults to 2000.
        device: The device type of the scale tensor ("cuda", "cpu", ...). Defaults to
            None: the device of the first parameter.

    Example:
        >>> model = torch.nn.Linear(2, 1)
        >>> opt = LossScaleOptimizer(torch.optim.SGD(model.parameters(), lr=0.1))
        >>> opt.scale(model(torch.ones(1, 2)).sum()).backward()
        >>> opt.step(); opt.zero_grad()
        >>> opt.loss_scale
        32768.0
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        *,
        dynamic: bool = True,
        initial_scale: float = 2.0**15,
        growth_interval: int = 2000,
        device: str | None = None,
    ) -> None:
        if isinstance(optimizer, LossScaleOptimizer):
            raise TypeError("LossScaleOptimizer got a LossScaleOptimizer; wrap the inner one once.")
        if not initial_scale > 0:
            raise ValueError(
                f"LossScaleOptimizer initial_scale must be > 0, got {initial_scale!r}."
            )
        if growth_interval < 1:
            raise ValueError(
                f"LossScaleOptimizer growth_interval must be >= 1, got {growth_interval!r}."
            )
        self.inner_optimizer = optimizer
        self.dynamic = bool(dynamic)
        self._scaler = torch.amp.GradScaler(
            device or _device_of(optimizer),
            init_scale=float(initial_scale),
            growth_interval=int(growth_interval),
        )
        self._apply_fixed_factors()
        self._scaled = False
        self._unscaled = False
        self._watch_momentum = True  # Until every fused-SGD momentum buffer exists.

    def _apply_fixed_factors(self) -> None:
        # GradScaler's constructor rejects factors of 1.0, but its setters accept them, and
        # with both at 1.0 its update keeps the scale constant while still counting skips.
        if not self.dynamic:
            self._scaler.set_growth_factor(1.0)
            self._scaler.set_backoff_factor(1.0)

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        """The inner optimizer's param groups (so LR writes reach it)."""
        return self.inner_optimizer.param_groups

    @property
    def state(self) -> Any:
        """The inner optimizer's per-parameter state."""
        return self.inner_optimizer.state

    @property
    def defaults(self) -> dict[str, Any]:
        """The inner optimizer's default hyper-parameters."""
        return self.inner_optimizer.defaults

    @property
    def loss_scale(self) -> float:
        """The current scale. Reading it syncs with the device (``GradScaler.get_scale``)."""
        return self._scaler.get_scale()  # host sync

    @property
    def grad_scaler(self) -> torch.amp.GradScaler:
        """The underlying ``torch.amp.GradScaler``."""
        return self._scaler

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        """Returns ``loss * loss_scale``; call ``.backward()`` on the result. No host sync."""
        self._scaled = True
        return self._scaler.scale(loss)

    get_scaled_loss = scale
    """Keras spelling of :meth:`scale`."""

    def unscale_(self) -> None:
        """Divides the gradients by the scale in place and records inf/NaN ones.

        Optional: ``step()`` does it when it was not done. Call it explicitly to inspect
        or clip true gradients between ``backward()`` and ``step()``; at most once per step.
        """
        self._check_scaled("unscale_")
        if self._unscaled:
            raise RuntimeError(
                "LossScaleOptimizer.unscale_() was already called since the last step(); "
                "call it at most once per step."
            )
        self._scaler.unscale_(self.inner_optimizer)
        self._unscaled = True

    def step(self) -> None:
        """Unscales (unless done), steps unless a gradient is non-finite, updates the scale."""
        self._check_scaled("step")
        if not self._unscaled:
            self._scaler.unscale_(self.inner_optimizer)
        fresh = _fresh_fused_momentum_buffers(self.inner_optimizer) if self._watch_momentum else []
        self._watch_momentum = bool(fresh)
        # Fused optimizers skip in-kernel; others sync once here on the inf flag.
        self._scaler.step(self.inner_optimizer)
        self._scaler.update()
        self._unscaled = False
        if fresh:
            _drop_if_skipped(self.inner_optimizer, fresh)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clears the inner optimizer's gradients. ``set_to_none`` defaults to True."""
        self.inner_optimizer.zero_grad(set_to_none=set_to_none)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Adds a param group to the inner optimizer."""
        self.inner_optimizer.add_param_group(param_group)
        self._watch_momentum = True

    def state_dict(self) -> dict[str, Any]:
        """Returns ``{"optimizer": ..., "loss_scaler": ..., "dynamic": ...}``.

        Reading the scaler's state syncs with the device; call it between steps.
        """
        return {
            "optimizer": self.inner_optimizer.state_dict(),
            "loss_scaler": self._scaler.state_dict(),
            "dynamic": self.dynamic,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restores the inner optimizer and the scale from :meth:`state_dict`'s output.

        The scale and its growth counter are restored; whether the scale is dynamic
        stays as this object was constructed.

        Raises:
            KeyError: If ``state_dict`` lacks the ``optimizer`` or ``loss_scaler`` key.
        """
        missing = [k for k in ("optimizer", "loss_scaler") if k not in state_dict]
        if missing:
            raise KeyError(
                f"LossScaleOptimizer.load_state_dict needs keys 'optimizer' and 'loss_scaler'; "
                f"missing {missing} (got {sorted(state_dict)})."
            )
        self.inner_optimizer.load_state_dict(state_dict["optimizer"])
        self._scaler.load_state_dict(state_dict["loss_scaler"])
        if self.dynamic:
            self._scaler.set_growth_factor(2.0)
            self._scaler.set_backoff_factor(0.5)
        self._apply_fixed_factors()
        self._watch_momentum = True

    def _check_scaled(self, method: str) -> None:
        if not self._scaled:
            raise RuntimeError(
                f"LossScaleOptimizer.{method}() was called before any scale(loss); "
                "write `optimizer.scale(loss).backward()` instead of `loss.backward()`."
            )

    def __repr__(self) -> str:
        kind = "dynamic" if self.dynamic else "fixed"
        return f"LossScaleOptimizer({kind}, inner={type(self.inner_optimizer).__name__})"
