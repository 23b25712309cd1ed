"""Checkpoint items that save FSDP2-sharded state as ordinary, unsharded state dicts.

``state_dict()`` gathers the ``DTensor`` shards into what one process would have written
(the optimizer in torch's index-keyed layout), so a checkpoint loads at any world size and
under any strategy. Both directions are collectives (``collective_state_dict = True``).
``sharded_state_dict()`` / ``load_sharded_state_dict`` serve ``checkpoint_format: dcp``:
this rank's shards, which ``torch.distributed.checkpoint`` writes and reshards.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.tensor import DTensor
from torch.utils._pytree import tree_leaves, tree_map_only

from torchgarden.checkpoint.dcp import index_layout
from torchgarden.distribute.sharding import reshard, shard_like

__all__ = ["FullModelState", "FullOptimizerState", "FullTensorState", "full_state_items"]

_MAX_LISTED = 5
# Param-group keys that choose how this process runs the update, not training state: a
# restore keeps this process' choice (one process' fused SGD has no DTensor kernel here).
_IMPLEMENTATION_KEYS = ("fused", "foreach", "capturable", "differentiable")
_FULL_ON_CPU = StateDictOptions(full_state_dict=True, cpu_offload=True)


def _shape(value: Any) -> tuple[int, ...] | None:
    return tuple(value.shape) if isinstance(value, torch.Tensor) else None


def _listed(keys: list[str]) -> str:
    more = len(keys) - _MAX_LISTED
    return ", ".join(keys[:_MAX_LISTED]) + (f", ... and {more} more" if more > 0 else "")


class FullModelState:
    """Checkpoint item for a ``fully_shard``-ed model, saved as its full state dict.

    Args:
        model: The sharded model (``FSDPModule``); its FQNs are those of the user's model.

    Example:
        >>> ckpt = Checkpoint(model=FullModelState(model))  # doctest: +SKIP
    """

    collective_state_dict = True

    def __init__(self, model: nn.Module) -> None:
        self.model = model

    def state_dict(self) -> dict[str, Any]:
        """The full state dict on rank 0 (CPU tensors); ``{}`` on the other ranks."""
        return get_model_state_dict(self.model, options=_FULL_ON_CPU)

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True) -> None:
        """Loads a full state dict (as one process saves it); each rank keeps its shard.

        Raises:
            ValueError: Keys are missing or unexpected (with ``strict``, the default) or
                shapes differ; the message lists them.
        """
        expected = self.model.state_dict()  # DTensor shapes are the global shapes.
        missing = [k for k in expected if k not in state_dict] if strict else []
        unexpected = [k for k in state_dict if k not in expected] if strict else []
        misshaped = [
            f"{k!r}: checkpoint {_shape(v)} vs model {_shape(expected[k])}"
            for k, v in state_dict.items()
            if k in expected and _shape(v) is not None and _shape(v) != _shape(expected[k])
        ]
        problems = [f"{kind} keys ({len(keys)}): {_listed(keys)}" for kind, keys in (
            ("missing", missing), ("unexpected", unexpected), ("mis-shaped", misshaped)) if keys]
        if problems:
            raise ValueError(
                f"the checkpoint does not fit {type(self.model).__name__}: " + "; ".join(problems)
            )
        reshard(self.model)  # A restore mid-run must not be hidden by gathered copies.
        options = StateDictOptions(full_state_dict=True, strict=strict)
        set_model_state_dict(self.model, dict(state_dict), options=options)

    def sharded_state_dict(self) -> dict[str, Any]:
        """This rank's shards (``DTensor`` values), keyed like the unsharded model's."""
        return get_model_state_dict(self.model)

    def load_sharded_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Loads shards laid out like :meth:`sharded_state_dict`'s (already resharded)."""
        reshard(self.model)
        set_model_state_dict(self.model, dict(state_dict))


class FullOptimizerState:
    """Checkpoint item for an optimizer of a sharded model, saved in torch's layout.

    A wrapper exposing ``inner_optimizer`` (``LossScaleOptimizer``) keeps its own keys;
    only its ``"optimizer"`` entry is gathered.

    Args:
        model: The sharded model whose parameters the optimizer updates.
        optimizer: The optimizer (already pointed at the sharded parameters).
    """

    collective_state_dict = True

    def __init__(self, model: nn.Module, optimizer: Any) -> None:
        self.model = model
        self.optimizer = optimizer
        self._inner: torch.optim.Optimizer = getattr(optimizer, "inner_optimizer", optimizer)

    def _parameter_names(self) -> list[str]:
        """FQN of each optimizer parameter, in param-group order (torch's index order)."""
        names = {id(param): name for name, param in self.model.named_parameters()}
        ordered = []
        for group in self._inner.param_groups:
            for param in group["params"]:
                if id(param) not in names:
                    raise ValueError(
                        f"the optimizer holds a parameter of shape {tuple(param.shape)} that "
                        f"is not one of {type(self.model).__name__}'s; build it from "
                        f"model.parameters()."
                    )
                ordered.append(names[id(param)])
        return ordered

    def _wrapped(self, inner_state: dict[str, Any]) -> dict[str, Any]:
        """``inner_state`` inside the wrapper's own state (as it is, without a wrapper)."""
        if self._inner is self.optimizer:
            return inner_state
        return {**self.optimizer.state_dict(), "optimizer": inner_state}

    def _unwrapped(self, state_dict: Mapping[str, Any]) -> Mapping[str, Any]:
        return state_dict if self._inner is self.optimizer else state_dict["optimizer"]

    def _load(self, state: Mapping[str, Any], state_dict: Mapping[str, Any],
              options: StateDictOptions | None = None) -> None:
        """Loads the name-keyed ``state`` into the inner optimizer (keeping its
        implementation keys), then the wrapper's own entries of ``state_dict``."""
        inner = self._inner
        groups = [{**group, **{k: current[k] for k in _IMPLEMENTATION_KEYS if k in current}}
                  for group, current in zip(state["param_groups"], inner.param_groups)]
        if state["state"]:
            set_optimizer_state_dict(self.model, inner, {**state, "param_groups": groups},
                                     options=options)
        else:  # A stateless optimizer (plain SGD): torch's loader needs a tensor to place.
            for group, saved_group in zip(inner.param_groups, groups):
                group.update({k: v for k, v in saved_group.items() if k != "params"})
        if inner is not self.optimizer:
            # Its inner part is reloaded from the freshly set state, which leaves it as is.
            self.optimizer.load_state_dict({**state_dict, "optimizer": inner.state_dict()})

    def state_dict(self) -> dict[str, Any]:
        """The full optimizer state on rank 0 (index-keyed, CPU); ``{}`` elsewhere."""
        full = get_optimizer_state_dict(self.model, self._inner, options=_FULL_ON_CPU)
        return self._wrapped(index_layout(full)) if full else {}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Loads an index-keyed full optimizer state; each rank keeps its shards.

        Raises:
            ValueError: The state is for a different number of parameters.
        """
        inner, indexed = self._inner, self._unwrapped(state_dict)
        names = self._parameter_names()
        saved = sum(len(group["params"]) for group in indexed["param_groups"])
        if saved != len(names) or len(indexed["param_groups"]) != len(inner.param_groups):
            raise ValueError(
                f"the optimizer state holds {saved} parameters in "
                f"{len(indexed['param_groups'])} groups, this optimizer {len(names)} in "
                f"{len(inner.param_groups)}; resume with the same model and optimizer."
            )
        full = {
            "state": {names[int(i)]: value for i, value in indexed["state"].items()},
            "param_groups": [{**group, "params": [names[int(i)] for i in group["params"]]}
                             for group in indexed["param_groups"]],
        }
        self._load(full, state_dict, StateDictOptions(full_state_dict=True))

    def sharded_state_dict(self) -> dict[str, Any]:
        """This rank's optimizer shards, keyed by parameter name (DCP's layout)."""
        return self._wrapped(get_optimizer_state_dict(self.model, self._inner))

    def load_sharded_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Loads name-keyed shards laid out like :meth:`sharded_state_dict`'s."""
        self._load(self._unwrapped(state_dict), state_dict)


class FullTensorState:
    """Checkpoint item for a stateful ``item`` whose state holds ``DTensor`` shards (e.g.
    the EMA of a sharded model), saved with full CPU tensors in their place."""

    collective_state_dict = True

    def __init__(self, item: Any) -> None:
        self.item = item

    def state_dict(self) -> Any:
        """The item's state with every DTensor gathered to a full CPU tensor (collective:
        every rank gathers the same tensors in the same order)."""
        return tree_map_only(DTensor, lambda t: t.full_tensor().cpu(), self.item.state_dict())

    def load_state_dict(self, state_dict: Any) -> None:
        """Loads full tensors into the item as shards shaped like its current state."""
        self.item.load_state_dict(shard_like(state_dict, self.item.state_dict()))

    def sharded_state_dict(self) -> Any:
        """The item's own state, ``DTensor`` shards as they are."""
        return self.item.state_dict()

    def load_sharded_state_dict(self, state_dict: Any) -> None:
        """Loads a state whose ``DTensor`` shards are laid out like the item's."""
        self.item.load_state_dict(state_dict)


def full_state_items(
    items: Mapping[str, Any], *, model: nn.Module, optimizer: Any = None
) -> dict[str, Any]:
    """Trainer checkpoint ``items`` with sharded state wrapped for full saving.

    ``model`` (``fully_shard``-ed) becomes a :class:`FullModelState`, ``optimizer`` (if
    given) a :class:`FullOptimizerState`, and any other item whose state holds ``DTensor``
    shards (e.g. the EMA) a :class:`FullTensorState`; the rest stay as they are.
    """
    wrapped: dict[str, Any] = {}
    for name, item in items.items():
        if item is model:
            wrapped[name] = FullModelState(model)
        elif optimizer is not None and item is optimizer:
            wrapped[name] = FullOptimizerState(model, optimizer)
        elif callable(getattr(item, "state_dict", None)) and any(
                isinstance(leaf, DTensor) for leaf in tree_leaves(item.state_dict())):
            wrapped[name] = FullTensorState(item)
        else:
            wrapped[name] = item
    return wrapped
