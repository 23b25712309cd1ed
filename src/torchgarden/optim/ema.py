"""Exponential moving average of model weights (Model Garden's ``ema`` option).

Model Garden wraps the optimizer; here the average is a separate object the trainer
updates after each optimizer step and swaps in around evaluation and export.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

__all__ = ["ExponentialMovingAverage"]


class ExponentialMovingAverage:
    """Keeps shadow copies of a model's weights, averaged after every optimizer step.

    ``shadow = decay * shadow + (1 - decay) * weight`` with ``decay = 0`` (a plain
    copy) before ``start_step``, ``min(average_decay, (1 + t) / (10 + t))`` with
    ``t = step - start_step`` when ``dynamic_decay``, else ``average_decay``.

    The shadows live on the weights' devices, so build this after moving the model
    (``model.to()`` replaces buffer objects, which the average would no longer see).
    Integer buffers (e.g. BatchNorm's ``num_batches_tracked``) are never averaged.

    Args:
        model: The model whose weights are averaged.
        average_decay: The (maximum) decay. Defaults to 0.99.
        start_step: Steps before which the average just copies the weights. Defaults to 0.
        dynamic_decay: Ramp the decay up early in training. Defaults to True.
        trainable_weights_only: Average only parameters with ``requires_grad``; False
            also averages the other parameters and the floating-point buffers (e.g.
            BatchNorm running statistics). Defaults to True.

    Example:
        >>> model = nn.Linear(2, 1)
        >>> ema = ExponentialMovingAverage(model, average_decay=0.9)
        >>> ema.update(step=1)            # after optimizer.step()
        >>> with ema.average_weights():   # evaluate with the averaged weights
        ...     _ = model(torch.ones(1, 2))
    """

    def __init__(
        self,
        model: nn.Module,
        *,
        average_decay: float = 0.99,
        start_step: int = 0,
        dynamic_decay: bool = True,
        trainable_weights_only: bool = True,
    ) -> None:
        if not 0.0 <= average_decay <= 1.0:
            raise ValueError(
                f"ExponentialMovingAverage average_decay must be in [0, 1], got {average_decay!r}."
            )
        self.average_decay = float(average_decay)
        self.start_step = int(start_step)
        self.dynamic_decay = bool(dynamic_decay)
        self.trainable_weights_only = bool(trainable_weights_only)
        named = self._tracked(model)
        if not named:
            raise ValueError(
                "ExponentialMovingAverage found no weights to average in "
                f"{type(model).__name__} (trainable_weights_only={trainable_weights_only})."
            )
        self._names = [name for name, _ in named]
        # The live tensors themselves (not detached views), so `param.data = ...` is followed.
        self._weights = [tensor for _, tensor in named]
        self._shadows = [tensor.detach().clone() for tensor in self._weights]
        self._swapped = False

    def _tracked(self, model: nn.Module) -> list[tuple[str, torch.Tensor]]:
        if self.trainable_weights_only:
            return [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        named = list(model.named_parameters()) + list(model.named_buffers())
        return [(n, t) for n, t in named if t.is_floating_point()]

    def decay(self, step: int) -> float:
        """Returns the decay used by ``update(step)``; plain Python, no device work."""
        if step < self.start_step:
            return 0.0
        if self.dynamic_decay:
            t = step - self.start_step
            return min(self.average_decay, (1.0 + t) / (10.0 + t))
        return self.average_decay

    @torch.no_grad()
    def update(self, step: int) -> None:
        """Moves the averages towards the current weights (call after each optimizer step).

        Args:
            step: The number of optimizer steps taken so far, counting this one
                (the trainer's global step after its increment).

        Raises:
            RuntimeError: If the averaged weights are swapped into the model.
        """
        if self._swapped:
            raise RuntimeError(
                "ExponentialMovingAverage.update() called while the averages are swapped "
                "into the model; call swap_weights() again (or leave average_weights()) first."
            )
        decay = self.decay(step)
        if decay == 0.0:
            torch._foreach_copy_(self._shadows, self._weights)
        else:
            # lerp_(end, w) = shadow + w * (weight - shadow) = decay * shadow + w * weight
            torch._foreach_lerp_(self._shadows, self._weights, 1.0 - decay)

    @torch.no_grad()
    def swap_weights(self) -> None:
        """Exchanges the model's weights and the averages in place; call again to undo.

        Runs outside the hot path (at evaluation boundaries); it needs one temporary the
        size of the largest tensor at a time.
        """
        for weight, shadow in zip(self._weights, self._shadows):
            held = weight.clone()
            weight.copy_(shadow)
            shadow.copy_(held)
        self._swapped = not self._swapped

    @property
    def swapped(self) -> bool:
        """True while the model holds the averaged weights."""
        return self._swapped

    @contextmanager
    def average_weights(self) -> Iterator[None]:
        """Context manager: the model holds the averages inside, its own weights after."""
        self.swap_weights()
        try:
            yield
        finally:
            self.swap_weights()

    @torch.no_grad()
    def copy_to(self, model: nn.Module) -> None:
        """Copies the averaged weights into ``model`` (e.g. a separate export copy).

        Raises:
            ValueError: If ``model`` lacks a tracked weight.
        """
        averages = self._weights if self._swapped else self._shadows
        targets = dict(model.named_parameters()) | dict(model.named_buffers())
        missing = [name for name in self._names if name not in targets]
        if missing:
            raise ValueError(
                f"ExponentialMovingAverage.copy_to: the model has no weights named {missing[:5]}; "
                "expected the same architecture as the averaged model."
            )
        for name, average in zip(self._names, averages):
            targets[name].copy_(average)

    def state_dict(self) -> dict[str, Any]:
        """Returns ``{"shadow": {name: tensor}, "swapped": bool}``.

        While swapped, the shadows hold the model's own (non-averaged) weights; the
        flag records that, so a restored run resumes in the same arrangement.
        """
        shadow = dict(zip(self._names, self._shadows))
        return {"shadow": shadow, "swapped": self._swapped}

    @torch.no_grad()
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restores the shadows and the swapped flag from :meth:`state_dict`'s output.

        Raises:
            ValueError: If names or shapes do not match the tracked weights.
        """
        shadow = state_dict.get("shadow")
        if not isinstance(shadow, dict):
            raise ValueError(
                "ExponentialMovingAverage.load_state_dict expects {'shadow': {name: tensor}, "
                f"'swapped': bool}}; got keys {sorted(state_dict)}."
            )
        missing = sorted(set(self._names) - set(shadow))
        unexpected = sorted(set(shadow) - set(self._names))
        if missing or unexpected:
            raise ValueError(
                f"ExponentialMovingAverage.load_state_dict: missing {missing[:5]}, "
                f"unexpected {unexpected[:5]}; was the state saved with the same model and "
                "trainable_weights_only setting?"
            )
        for name, target in zip(self._names, self._shadows):
            source = shadow[name]
            if source.shape != target.shape:
                raise ValueError(
                    f"ExponentialMovingAverage.load_state_dict: {name!r} has shape "
                    f"{tuple(source.shape)}, expected {tuple(target.shape)}."
                )
            target.copy_(source)
        self._swapped = bool(state_dict.get("swapped", False))

    def __repr__(self) -> str:
        return (
            f"ExponentialMovingAverage(average_decay={self.average_decay}, "
            f"start_step={self.start_step}, dynamic_decay={self.dynamic_decay}, "
            f"tensors={len(self._shadows)})"
        )
