"""`Metric`: a Keras-style streaming metric whose state lives in device tensors."""

from __future__ import annotations

import abc
import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

_INITIALIZERS = ("zeros", "ones")
_REDUCTIONS = ("sum", "max", "min", "none")
_DIST_OPS = {"sum": "SUM", "max": "MAX", "min": "MIN"}


def snake_case(name: str) -> str:
    """Turns a class name such as ``SparseCategoricalAccuracy`` into ``sparse_categorical_accuracy``."""
    name = re.sub(r"(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower()


@dataclass(frozen=True)
class _WeightSpec:
    shape: tuple[int, ...]
    initializer: str | float | Callable[..., torch.Tensor]
    reduction: str


class Metric(torch.nn.Module, abc.ABC):
    """A streaming metric: accumulate with `update_state`, read with `result`.

    The state is a set of tensors registered with `add_weight`. They are buffers, so
    `metric.to(device)` moves them and `metric.state_dict()` checkpoints them. Updates are
    pure tensor operations on the state's device, with no host synchronisation; call
    `result()` (and `float(...)` on it) only where a sync is acceptable, e.g. at the end of
    a loop. `update_state` runs under `torch.no_grad()`, so feeding it a loss that still
    carries a graph does not keep the graph alive.

    Weights can be updated the Keras way or the PyTorch way: ``self.total += x``,
    ``self.total.add_(x)`` and ``self.total = self.total + x`` all write into the registered
    buffer in place.

    Example:
        >>> class MeanProduct(Metric):
        ...     def __init__(self, name="mean_product"):
        ...         super().__init__(name)
        ...         self.total = self.add_weight("total", initializer="zeros")
        ...         self.count = self.add_weight("count", initializer="zeros")
        ...     def update_state(self, y_true, y_pred, sample_weight=None):
        ...         self.total += torch.sum(y_true * y_pred)
        ...         self.count += y_true.numel()
        ...     def result(self):
        ...         return self.total / self.count
        >>> m = MeanProduct()
        >>> float(m(torch.tensor([1.0, 2.0]), torch.tensor([3.0, 4.0])))
        5.5

    Args:
        name: Name used as the log key. Defaults to the snake_case class name.
        dtype: Default dtype of the weights created by `add_weight`. Defaults to float32.
    """

    def __init__(self, name: str | None = None, dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        self._weight_specs: dict[str, _WeightSpec] = {}
        self._weight_aliases: dict[str, str] = {}
        self.name = name if name is not None else snake_case(type(self).__name__)
        self._dtype = dtype

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # State updates never build autograd graphs.
        for method in ("update_state", "reset_states", "reset_state"):
            fn = cls.__dict__.get(method)
            if fn is not None and not getattr(fn, "_tg_no_grad", False):
                wrapped = torch.no_grad()(fn)
                functools.update_wrapper(wrapped, fn)
                wrapped._tg_no_grad = True
                setattr(cls, method, wrapped)
        # A subclass may override either spelling; make the other one follow it.
        if "reset_state" in cls.__dict__ and "reset_states" not in cls.__dict__:
            cls.reset_states = cls.__dict__["reset_state"]
        elif "reset_states" in cls.__dict__ and "reset_state" not in cls.__dict__:
            cls.reset_state = cls.__dict__["reset_states"]

    @property
    def dtype(self) -> torch.dtype:
        """Default dtype of the metric's weights."""
        return self._dtype

    def add_weight(
        self,
        name: str,
        shape: tuple[int, ...] | list[int] | int = (),
        initializer: str | float | Callable[..., torch.Tensor] = "zeros",
        dtype: torch.dtype | None = None,
        reduction: str = "sum",
    ) -> torch.Tensor:
        """Creates and registers a state tensor.

        Args:
            name: Buffer name; it is also the `state_dict` key.
            shape: Shape of the tensor. Defaults to a scalar.
            initializer: ``"zeros"`` (default), ``"ones"``, a number to fill with, or a
                callable ``(shape, dtype) -> Tensor``. `reset_states` re-applies it.
            dtype: Tensor dtype. Defaults to the metric's `dtype`.
            reduction: How `sync` combines the weight across processes: ``"sum"``
                (default), ``"max"``, ``"min"`` or ``"none"`` (left per-process).

        Returns:
            The registered buffer (assign it to an attribute of any name).

        Raises:
            ValueError: If the name is taken or an argument is not one of the choices.
        """
        if name in self._weight_specs or hasattr(self, name):
            raise ValueError(f"add_weight: name {name!r} is already used on {type(self).__name__}; "
                             "pick another name.")
        if reduction not in _REDUCTIONS:
            raise ValueError(f"add_weight: reduction must be one of {_REDUCTIONS}, got {reduction!r}.")
        if isinstance(initializer, str) and initializer not in _INITIALIZERS:
            raise ValueError(f"add_weight: initializer must be one of {_INITIALIZERS}, a number or "
                             f"a callable, got {initializer!r}.")
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        spec = _WeightSpec(shape=shape, initializer=initializer, reduction=reduction)
        device = next((b.device for b in self.buffers()), None)
        tensor = self._initial_value(spec, dtype or self._dtype, device)
        self._weight_specs[name] = spec
        self.register_buffer(name, tensor)
        return tensor

    @staticmethod
    def _initial_value(spec: _WeightSpec, dtype: torch.dtype,
                       device: torch.device | None) -> torch.Tensor:
        init = spec.initializer
        if callable(init):
            return torch.as_tensor(init(spec.shape, dtype), dtype=dtype, device=device)
        fill = 0 if init == "zeros" else 1 if init == "ones" else init
        return torch.full(spec.shape, fill, dtype=dtype, device=device)

    def __setattr__(self, name: str, value: Any) -> None:
        weight = self._weight_name(name)
        if weight is not None and isinstance(value, torch.Tensor):
            buffer = self._buffers[weight]
            if value is buffer:
                return
            if value.shape != buffer.shape:
                raise ValueError(f"{type(self).__name__}.{name}: cannot assign a tensor of shape "
                                 f"{tuple(value.shape)} to a weight of shape {tuple(buffer.shape)}.")
            with torch.no_grad():
                buffer.copy_(value)
            return
        if (isinstance(value, torch.Tensor) and "_weight_specs" in self.__dict__
                and not isinstance(value, torch.nn.Parameter)):
            # ``self.total = self.add_weight("count_of_x")``: remember the alias so that the
            # attribute follows the buffer through `.to(device)` and `load_state_dict`.
            for weight_name in self._weight_specs:
                if self._buffers.get(weight_name) is value:
                    self._weight_aliases[name] = weight_name
                    return
        super().__setattr__(name, value)

    def __getattr__(self, name: str) -> Any:
        aliases = self.__dict__.get("_weight_aliases")
        if aliases and name in aliases:
            return self._buffers[aliases[name]]
        return super().__getattr__(name)

    def _weight_name(self, attr: str) -> str | None:
        specs = self.__dict__.get("_weight_specs")
        if not specs:
            return None
        if attr in specs:
            return attr
        return self.__dict__["_weight_aliases"].get(attr)

    @property
    def weights(self) -> dict[str, torch.Tensor]:
        """The state tensors created with `add_weight`, by name."""
        return {name: self._buffers[name] for name in self._weight_specs}

    @abc.abstractmethod
    def update_state(self, *args: Any, **kwargs: Any) -> None:
        """Accumulates one batch, typically ``update_state(y_true, y_pred, sample_weight=None)``."""

    @abc.abstractmethod
    def result(self) -> torch.Tensor | dict[str, torch.Tensor]:
        """Returns the metric value computed from the current state (stays on device)."""

    def reset_states(self) -> None:
        """Re-applies every weight's initializer in place (zeros by default)."""
        self._reset_weights()

    def reset_state(self) -> None:
        """Keras 3 spelling of `reset_states`."""
        self._reset_weights()

    def _reset_weights(self) -> None:
        with torch.no_grad():
            for name, spec in self._weight_specs.items():
                buffer = self._buffers[name]
                if callable(spec.initializer):
                    buffer.copy_(self._initial_value(spec, buffer.dtype, buffer.device))
                else:
                    init = spec.initializer
                    buffer.fill_(0 if init == "zeros" else 1 if init == "ones" else init)

    def sync(self) -> None:
        """All-reduces the weights across processes, each with its `add_weight` reduction.

        A no-op unless `torch.distributed` is initialised with more than one process. The
        trainer calls it before `result()` at the end of a train or eval loop. Weights that
        share a dtype and reduction travel in one collective.
        """
        if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
            return
        groups: dict[tuple[str, torch.dtype], list[torch.Tensor]] = {}
        for name, spec in self._weight_specs.items():
            if spec.reduction != "none":
                buffer = self._buffers[name]
                groups.setdefault((spec.reduction, buffer.dtype), []).append(buffer)
        with torch.no_grad():
            for (reduction, _), buffers in groups.items():
                op = getattr(dist.ReduceOp, _DIST_OPS[reduction])
                flat = torch.cat([b.reshape(-1) for b in buffers])
                dist.all_reduce(flat, op=op)
                offset = 0
                for b in buffers:
                    b.copy_(flat[offset:offset + b.numel()].view_as(b))
                    offset += b.numel()

    def forward(self, *args: Any, **kwargs: Any) -> torch.Tensor | dict[str, torch.Tensor]:
        """Keras semantics for ``metric(...)``: update the state, then return `result()`."""
        self.update_state(*args, **kwargs)
        return self.result()

    def extra_repr(self) -> str:
        return f"name={self.name!r}"
