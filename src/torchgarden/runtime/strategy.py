"""How a run's processes execute: one process, DDP or FSDP2 -- the ``Strategy``.

:func:`resolve_strategy` turns ``runtime.distribution_strategy`` (and torchrun's
``WORLD_SIZE``) into one Strategy, once per run; it is the only place that compares a
strategy or checkpoint-format name. The Strategy wraps the model, switches gradient sync
off for accumulation, chooses what a checkpoint saves and its format, and says whether the
compiled multi-step graph runs under it. Importing this module does not import torch.

Example:
    >>> @register_strategy("ddp_static")
    ... class StaticGraphDDP(DDP):
    ...     def wrap_model(self, model, *, optimizer=None, device=None, **kwargs):
    ...         return super().wrap_model(model, device=device, static_graph=True)
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

if TYPE_CHECKING:
    from torch import nn

    from torchgarden.config import RuntimeConfig

__all__ = ["DDP", "FSDP", "SingleProcess", "Strategy", "register_strategy", "resolve_strategy"]

_STRATEGIES: dict[str, type[Strategy]] = {}
S = TypeVar("S", bound="type[Strategy]")


def register_strategy(name: str) -> Callable[[S], S]:
    """Registers a ``Strategy`` subclass as ``runtime.distribution_strategy: name``."""

    def decorator(cls: S) -> S:
        from torchgarden.config.runtime import STRATEGY_NAMES

        _STRATEGIES[name] = cls
        if name not in STRATEGY_NAMES:
            STRATEGY_NAMES.append(name)  # The config accepts it from now on.
        cls.name = name
        return cls

    return decorator


class Strategy:
    """The base, and one process: the model as built, nothing synchronised.

    Args:
        auto_checkpoint_format: What ``trainer.checkpoint_format: auto`` means: the
            configured strategy's format, kept when one process runs it (a run configured
            for FSDP2 writes DCP checkpoints at any world size, so it resumes at any).
    """

    name: ClassVar[str] = "single"
    #: Needs torchrun's process group (its rank 0 is the chief).
    distributed: ClassVar[bool] = False
    #: Parameters are sharded over ranks (checkpoints gather or shard them).
    shards_parameters: ClassVar[bool] = False
    #: The checkpoint format of ``auto``: ``"single"`` (one ``state.pt``) or ``"dcp"``.
    default_checkpoint_format: ClassVar[str] = "single"

    def __init__(self, *, auto_checkpoint_format: str | None = None) -> None:
        self.auto_checkpoint_format = auto_checkpoint_format or self.default_checkpoint_format

    def checkpoint_format(self, requested: str) -> str:
        """``trainer.checkpoint_format`` resolved: ``"auto"`` is this strategy's format."""
        return self.auto_checkpoint_format if requested == "auto" else requested

    def wrap_model(self, model: nn.Module, *, optimizer: Any = None, device: Any = None,
                   find_unused_parameters: bool = False) -> nn.Module:
        """The module steps call (here the model itself); ``optimizer`` follows the
        parameters where the wrapper replaces them."""
        return model

    def set_gradient_sync(self, model: nn.Module, enabled: bool) -> None:
        """Gradient all-reduce on or off for the next backward passes (accumulation)."""

    def checkpoint_items(self, items: Mapping[str, Any], *, model: nn.Module,
                         optimizer: Any = None) -> dict[str, Any]:
        """The items a checkpoint saves (as given here)."""
        return dict(items)

    def compiled_step_unsupported(self) -> str | None:
        """Why the compiled multi-step graph cannot run under this strategy, or None."""
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(checkpoint_format={self.auto_checkpoint_format!r})"


@register_strategy("single")
class SingleProcess(Strategy):
    """One process (also each process of a torchrun job configured ``off``/``single``)."""


@register_strategy("ddp")
class DDP(Strategy):
    """``DistributedDataParallel``: replicated weights, gradients all-reduced in backward."""

    distributed = True

    def wrap_model(self, model: nn.Module, *, optimizer: Any = None, device: Any = None,
                   find_unused_parameters: bool = False, **kwargs: Any) -> nn.Module:
        from torch.nn.parallel import DistributedDataParallel

        ids = [device.index] if device is not None and device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=ids,
                                       find_unused_parameters=find_unused_parameters, **kwargs)

    def set_gradient_sync(self, model: nn.Module, enabled: bool) -> None:
        from torchgarden.distribute import set_gradient_sync

        set_gradient_sync(model, enabled)

    def compiled_step_unsupported(self) -> str | None:
        return f"distribution strategy '{self.name}' (the graph has no gradient all-reduce)"



@register_strategy("fsdp")
class FSDP(DDP):
    """FSDP2 (``fully_shard``): each rank holds a shard of every parameter; checkpoints are
    gathered into the one-process layout, or written as DCP shards (the default)."""

    shards_parameters = True
    default_checkpoint_format = "dcp"

    def wrap_model(self, model: nn.Module, *, optimizer: Any = None, device: Any = None,
                   find_unused_parameters: bool = False, **kwargs: Any) -> nn.Module:
        """Shards ``model`` in place and points ``optimizer`` (built on the unsharded
        parameters) at the shards."""
        from torchgarden import distribute

        replaced = distribute.shard_model(model)
        if optimizer is not None:
            distribute.rebind_optimizer(optimizer, replaced)
        return model

    def checkpoint_items(self, items: Mapping[str, Any], *, model: nn.Module,
                         optimizer: Any = None) -> dict[str, Any]:
        """Sharded state saved gathered, in the single-process layout."""
        from torchgarden import distribute

        return distribute.full_state_items(items, model=model, optimizer=optimizer)


def get_strategy(name: str) -> type[Strategy]:
    """The strategy class registered as ``name`` (KeyError names the registered ones)."""
    try:
        return _STRATEGIES[name]
    except KeyError:
        raise KeyError(f"no strategy {name!r} is registered; registered: "
                       f"{', '.join(sorted(_STRATEGIES))}.") from None


def resolve_strategy(config: RuntimeConfig, *, world_size: int | None = None) -> Strategy:
    """The Strategy of ``runtime.distribution_strategy`` for this process.

    ``auto`` is DDP when torchrun starts more than one process, else one process; ``off``
    and ``single`` are one process (under torchrun each process trains alone); any
    distributed strategy on one process runs as one process (DDP or FSDP2 would only add
    overhead) but keeps its checkpoint format.

    Args:
        config: The runtime config.
        world_size: The number of processes; default torchrun's ``WORLD_SIZE`` (or 1).
    """
    if world_size is None:
        world_size = int(os.environ.get("WORLD_SIZE", "1"))
    name = {"auto": "ddp" if world_size > 1 else "single", "off": "single"}.get(
        config.distribution_strategy, config.distribution_strategy)
    configured = get_strategy(name)
    if configured.distributed and world_size == 1:
        return SingleProcess(auto_checkpoint_format=configured.default_checkpoint_format)
    return configured()


def chief_of(strategy: Strategy) -> bool:
    """Whether this process writes the run's files: rank 0 of a distributed strategy, and
    every process that trains alone. Reads torchrun's ``RANK`` (no torch import)."""
    return not strategy.distributed or int(os.environ.get("RANK", "0")) == 0
