"""``Layer``: an ``nn.Module`` that can add auxiliary losses during forward (Keras ``add_loss``).

A layer calls ``self.add_loss(tensor)`` inside ``forward`` (an activity regulariser, a
KL term, ...). The losses of the latest forward pass of every ``Layer`` inside a model
are returned by :func:`model_losses`, which the default ``Task.train_step`` passes to
``build_losses(..., aux_losses=...)``, so they are added to the training loss like
Keras' ``model.losses``.

Example:
    >>> import torch
    >>> class ActivityRegularization(Layer):
    ...     def __init__(self, rate: float = 1e-2):
    ...         super().__init__()
    ...         self.rate = rate
    ...     def forward(self, x):
    ...         self.add_loss(self.rate * x.square().sum())
    ...         return x
    >>> model = torch.nn.Sequential(torch.nn.Linear(4, 4), ActivityRegularization())
    >>> _ = model(torch.ones(2, 4))
    >>> len(model_losses(model))
    1
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

__all__ = ["Layer", "Lambda", "model_losses"]


class Layer(nn.Module):
    """A module whose ``forward`` may call :meth:`add_loss`; losses reset on every call.

    Calling a layer accepts Keras' ``training`` argument: ``layer(x, training=True)``
    runs this call in train mode (dropout on, batch-norm batch statistics) and
    ``training=False`` in eval mode; the previous ``.train()``/``.eval()`` modes are
    restored afterwards. A ``forward`` that declares ``training`` receives it instead.
    Defaults to None: the module's current mode.
    """

    def __init__(self) -> None:
        super().__init__()
        self._aux_losses: list[torch.Tensor] = []

    def __call__(self, *args: Any, training: bool | None = None, **kwargs: Any) -> Any:
        # Keras semantics: losses describe the most recent forward pass only.
        self._aux_losses = []
        if training is None:
            return super().__call__(*args, **kwargs)
        if _accepts_training(self.forward):
            return super().__call__(*args, training=training, **kwargs)
        modes = [(module, module.training) for module in self.modules()]
        self.train(bool(training))
        try:
            return super().__call__(*args, **kwargs)
        finally:
            for module, mode in modes:
                module.training = mode

    def add_loss(self, loss: torch.Tensor | float) -> None:
        """Records a scalar auxiliary loss for the current forward pass."""
        self._aux_losses.append(loss if isinstance(loss, torch.Tensor) else torch.tensor(loss))

    @property
    def losses(self) -> list[torch.Tensor]:
        """Auxiliary losses of this layer and every ``Layer`` inside it (latest pass)."""
        return [loss for m in self.modules() if isinstance(m, Layer) for loss in m._aux_losses]


class Lambda(nn.Module):
    """Wraps a function as a layer (Keras ``Lambda``): ``Lambda(lambda x: x.abs())``.

    Args:
        fn: Any callable of tensors; it has no parameters of its own.
        name: Optional name shown in ``repr``. Defaults to the function's name.
    """

    def __init__(self, fn: Callable[..., Any], name: str | None = None) -> None:
        super().__init__()
        if not callable(fn):
            raise TypeError(f"Lambda expects a callable, got {type(fn).__name__}.")
        self.fn = fn
        self.name = name or getattr(fn, "__name__", "lambda")

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def extra_repr(self) -> str:
        return self.name


def _accepts_training(forward: Callable[..., Any]) -> bool:
    """Whether ``forward`` takes a ``training`` keyword (by name or through ``**kwargs``)."""
    try:
        parameters = inspect.signature(forward).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(
        p.name == "training" or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters
    )


#: The ``Layer`` submodules of each model seen, by ``id(model)``; an entry is dropped when
#: its model is collected. A plain dict: a ``WeakKeyDictionary`` lookup is a Python call
#: and a new weak reference on every step.
_LAYER_CACHE: dict[int, tuple[Layer, ...]] = {}


def model_losses(model: nn.Module) -> list[torch.Tensor]:
    """Returns the auxiliary losses added during the model's latest forward pass.

    The set of ``Layer`` submodules is found once per model and cached, so a model
    without any ``Layer`` costs one dictionary lookup per step.
    """
    layers = _LAYER_CACHE.get(id(model))
    if layers is None:
        layers = _LAYER_CACHE[id(model)] = tuple(
            m for m in model.modules() if isinstance(m, Layer))
        weakref.finalize(model, _LAYER_CACHE.pop, id(model), None)
    if not layers:
        return []
    return [loss for layer in layers for loss in layer._aux_losses]
