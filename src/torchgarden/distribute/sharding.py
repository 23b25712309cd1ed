"""FSDP2 (``fully_shard``) for a built model, and gradient-sync switching for DDP/FSDP.

``fully_shard`` swaps every parameter for a new one holding a ``DTensor`` shard, so an
optimizer built before sharding (as Model Garden builds it) is pointed at the new ones
with :func:`rebind_optimizer`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

import torch
from torch import nn

__all__ = ["rebind_optimizer", "reshard", "set_gradient_sync", "shard_model"]

_logger = logging.getLogger("torchgarden")

# Optimizers whose fused kernels DTensor can run (its pointwise rules, torch 2.13).
_FUSED_ON_DTENSOR = (torch.optim.Adam, torch.optim.AdamW)


def shard_model(
    model: nn.Module, *, module_classes: Iterable[type[nn.Module]] = ()
) -> dict[int, nn.Parameter]:
    """Applies FSDP2 ``fully_shard`` to ``model`` (on its device) in place; needs a
    process group.

    Submodules that are instances of ``module_classes`` (e.g. transformer blocks) become
    their own FSDP units first, then the root takes the rest; with none (the default) the
    whole model is one unit, right for small models.

    Returns:
        ``{id(old parameter): new parameter}`` for :func:`rebind_optimizer`.

    Raises:
        ValueError: ``model`` is already sharded.
    """
    from torch.distributed.fsdp import FSDPModule, fully_shard

    if isinstance(model, FSDPModule):
        raise ValueError(
            f"{type(model).__name__} is already sharded with fully_shard; shard it once."
        )
    names = {id(param): name for name, param in model.named_parameters()}
    classes = tuple(module_classes)
    for module in list(model.modules()):
        if module is not model and isinstance(module, classes):  # () matches nothing.
            fully_shard(module)
    fully_shard(model)
    # FSDP2 keeps the root's parameters gathered after forward (backward needs them).
    # After an evaluation forward nothing needs them, and keeping them would hide
    # in-place changes to the shards (EMA swap, checkpoint restore) from the next
    # training forward, so evaluation reshards after every forward.
    model.register_forward_hook(_reshard_in_eval)
    new = dict(model.named_parameters())
    return {old_id: new[name] for old_id, name in names.items() if name in new}


def _reshard_in_eval(module: nn.Module, args: Any, output: Any) -> None:
    if not module.training:
        module.reshard()  # type: ignore[operator]


def reshard(model: nn.Module) -> None:
    """Frees the gathered parameters of every FSDP2 unit of ``model`` (keeps shards); call
    it before changing the shards in place outside of training, or the next forward reuses
    the gathered copies."""
    from torch.distributed.fsdp import FSDPModule

    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.reshard()


def rebind_optimizer(optimizer: Any, replaced: Mapping[int, nn.Parameter]) -> None:
    """Points ``optimizer``'s param groups (and any state) at the sharded parameters.

    Works for any object with torch's ``param_groups`` / ``state`` layout (e.g. a
    ``LossScaleOptimizer``). Groups with a fused kernel that ``DTensor`` cannot run (torch
    2.13: all but Adam and AdamW) fall back to torch's foreach implementation.

    Args:
        optimizer: The optimizer built on the unsharded parameters.
        replaced: :func:`shard_model`'s result.

    Raises:
        ValueError: A parameter of the optimizer is not one the model had.
    """
    state = optimizer.state
    sharded = {id(param) for param in replaced.values()}
    for index, group in enumerate(optimizer.param_groups):
        rebound = []
        for param in group["params"]:
            new = replaced.get(id(param))
            if new is None and id(param) not in sharded:
                raise ValueError(
                    f"optimizer param group {index} holds a parameter of shape "
                    f"{tuple(param.shape)} that is not in the sharded model; build the "
                    f"optimizer from model.parameters()."
                )
            if new is None:
                new = param  # Already rebound.
            elif param in state:
                # State from steps taken before sharding is sharded like its parameter.
                state[new] = {
                    key: shard_like(value, new)
                    if isinstance(value, torch.Tensor) and value.shape == new.shape else value
                    for key, value in state.pop(param).items()
                }
            rebound.append(new)
        group["params"] = rebound
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    for group in optimizer.param_groups:
        if group.get("fused") and not isinstance(inner, _FUSED_ON_DTENSOR):
            group["fused"] = False
            _logger.info("FSDP: %s has no fused kernel for sharded (DTensor) parameters; "
                         "using its foreach implementation.", type(inner).__name__)


def shard_like(value: Any, template: Any) -> Any:
    """``value`` with each full tensor cut into a shard laid out like ``template``'s
    ``DTensor`` (walking dicts, lists and tuples in parallel; other leaves as they are).

    Raises:
        ValueError: A tensor's shape differs from the sharded one's.
    """
    from torch.distributed.tensor import DTensor, distribute_tensor

    if isinstance(template, DTensor) and isinstance(value, torch.Tensor):
        if isinstance(value, DTensor):
            return value
        if tuple(value.shape) != tuple(template.shape):
            raise ValueError(f"a saved tensor has shape {tuple(value.shape)}, the sharded one "
                             f"{tuple(template.shape)}.")
        local = value.to(device=template.device, dtype=template.dtype)
        # src_data_rank=None: every rank cuts its shard from its own copy, no traffic.
        return distribute_tensor(local, template.device_mesh, template.placements,
                                 src_data_rank=None)
    if isinstance(template, Mapping) and isinstance(value, Mapping):
        return {k: shard_like(v, template[k]) if k in template else v for k, v in value.items()}
    if (type(value) in (list, tuple) and isinstance(template, (list, tuple))
            and len(template) == len(value)):
        return type(value)(shard_like(v, t) for v, t in zip(value, template))
    return value


def set_gradient_sync(model: nn.Module, enabled: bool) -> None:
    """Turns gradient all-reduce (DDP) / reduce-scatter (FSDP2) on or off for backward.

    Gradient accumulation turns it off on every micro-step but the last. A model that is
    neither DDP nor FSDP2 (nor a ``torch.compile`` wrapper of one) is left alone.
    """
    target = getattr(model, "_orig_mod", model)  # Through a torch.compile wrapper.
    set_sync = getattr(target, "set_requires_gradient_sync", None)
    if set_sync is not None:  # FSDP2
        set_sync(enabled)
    elif hasattr(target, "require_backward_grad_sync"):  # DDP
        target.require_backward_grad_sync = enabled
