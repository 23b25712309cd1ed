"""``torchgarden.distribute`` in one process: no group, or a one-rank gloo group.

A one-rank group runs the real FSDP2 code paths (DTensor parameters, state-dict
gathering) in milliseconds; the 2-rank behaviour is covered by ``test_torchrun.py``.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch import nn

from torchgarden import distribute

pytestmark = pytest.mark.distributed


@pytest.fixture
def one_rank_group() -> None:
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    # The autouse hygiene fixture destroys the group after the test.


def trained_pair(optimizer_cls: type, **kwargs: Any) -> tuple[nn.Module, Any, nn.Module, Any]:
    """Two equal models + optimizers after one step on the same batch (one to shard)."""
    torch.manual_seed(0)
    plain = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    other = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    other.load_state_dict(plain.state_dict())
    x = torch.randn(5, 4)
    optimizers = []
    for model in (plain, other):
        optimizer = optimizer_cls(model.parameters(), lr=0.1, **kwargs)
        model(x).square().mean().backward()
        optimizer.step()
        optimizer.zero_grad()
        optimizers.append(optimizer)
    return plain, optimizers[0], other, optimizers[1]


def test_collectives_are_identities_without_a_process_group() -> None:
    assert not distribute.is_distributed()
    assert (distribute.get_rank(), distribute.get_world_size()) == (0, 1)
    assert distribute.is_chief()
    assert distribute.all_gather_object({"a": 1}) == [{"a": 1}]
    assert distribute.all_gather_list((3, 4)) == [3, 4]
    assert distribute.all_gather_list(None) == []
    assert distribute.broadcast_object("chief") == "chief"
    distribute.barrier()


def test_shard_model_rebinds_optimizer_parameters_and_state(one_rank_group) -> None:
    _, _, model, optimizer = trained_pair(torch.optim.SGD, momentum=0.9, fused=True)
    old = [p for group in optimizer.param_groups for p in group["params"]]
    buffers = [optimizer.state[p]["momentum_buffer"].clone() for p in old]
    replaced = distribute.shard_model(model)
    distribute.rebind_optimizer(optimizer, replaced)
    new = optimizer.param_groups[0]["params"]
    assert [id(p) for p in new] == [id(p) for p in model.parameters()]
    assert all(type(p).__name__ == "DTensor" for p in new)
    moved = [optimizer.state[p]["momentum_buffer"] for p in new]
    assert all(type(b).__name__ == "DTensor" for b in moved)
    torch.testing.assert_close([b.full_tensor() for b in moved], buffers)
    assert not any(p in optimizer.state for p in old)
    # DTensor has no fused SGD kernel (torch 2.13): the group falls back to foreach.
    assert optimizer.param_groups[0]["fused"] is False
    distribute.rebind_optimizer(optimizer, replaced)  # idempotent
    assert [id(p) for p in optimizer.param_groups[0]["params"]] == [id(p) for p in new]


def test_adam_keeps_its_fused_kernel_on_sharded_parameters(one_rank_group) -> None:
    _, _, model, optimizer = trained_pair(torch.optim.Adam, fused=True)
    distribute.rebind_optimizer(optimizer, distribute.shard_model(model))
    assert optimizer.param_groups[0]["fused"] is True


def test_shard_model_refuses_a_sharded_model(one_rank_group) -> None:
    model = nn.Linear(2, 2)
    distribute.shard_model(model)
    with pytest.raises(ValueError, match="already sharded"):
        distribute.shard_model(model)


def test_shard_model_makes_each_listed_submodule_a_unit(one_rank_group) -> None:
    from torch.distributed.fsdp import FSDPModule

    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    distribute.shard_model(model, module_classes=(nn.Linear,))
    assert [isinstance(m, FSDPModule) for m in model] == [True, False, True]
    assert isinstance(model, FSDPModule)


def test_rebind_optimizer_rejects_a_foreign_parameter(one_rank_group) -> None:
    model = nn.Linear(2, 2)
    stray = nn.Parameter(torch.zeros(7))
    optimizer = torch.optim.SGD([*model.parameters(), stray], lr=0.1)
    with pytest.raises(ValueError, match=r"shape \(7,\) that is not in the sharded model"):
        distribute.rebind_optimizer(optimizer, distribute.shard_model(model))


def test_full_state_is_the_single_process_layout_and_loads_back(one_rank_group) -> None:
    plain, plain_optimizer, model, optimizer = trained_pair(torch.optim.Adam)
    distribute.rebind_optimizer(optimizer, distribute.shard_model(model))
    model_state = distribute.FullModelState(model)
    optimizer_state = distribute.FullOptimizerState(model, optimizer)

    saved = {"model": model_state.state_dict(), "optimizer": optimizer_state.state_dict()}
    torch.testing.assert_close(saved["model"], dict(plain.state_dict()))
    expected = plain_optimizer.state_dict()
    assert saved["optimizer"]["param_groups"][0]["params"] == [0, 1, 2, 3]
    torch.testing.assert_close(saved["optimizer"]["state"], expected["state"])

    # Load the plain process' state into a differently initialised sharded twin.
    torch.manual_seed(1)
    twin = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    twin_optimizer = torch.optim.Adam(twin.parameters(), lr=0.1)
    distribute.rebind_optimizer(twin_optimizer, distribute.shard_model(twin))
    distribute.FullModelState(twin).load_state_dict(plain.state_dict())
    distribute.FullOptimizerState(twin, twin_optimizer).load_state_dict(expected)
    torch.testing.assert_close(distribute.FullModelState(twin).state_dict(), saved["model"])
    reloaded = distribute.FullOptimizerState(twin, twin_optimizer).state_dict()
    torch.testing.assert_close(reloaded["state"], expected["state"])


def test_full_model_state_names_missing_and_misshaped_keys(one_rank_group) -> None:
    model = nn.Linear(3, 2)
    distribute.shard_model(model)
    bad = {"weight": torch.zeros(2, 4)}
    with pytest.raises(ValueError, match=r"missing keys \(1\): bias; mis-shaped keys .*\(2, 4\)"):
        distribute.FullModelState(model).load_state_dict(bad)


def test_full_optimizer_state_refuses_another_parameter_count(one_rank_group) -> None:
    model = nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    distribute.rebind_optimizer(optimizer, distribute.shard_model(model))
    state = {"state": {}, "param_groups": [{"lr": 0.1, "params": [0, 1, 2]}]}
    with pytest.raises(ValueError, match="holds 3 parameters in 1 groups, this optimizer 2"):
        distribute.FullOptimizerState(model, optimizer).load_state_dict(state)


def test_full_tensor_state_gathers_and_reshards_dtensors(one_rank_group) -> None:
    from torchgarden.optim import ExponentialMovingAverage

    model = nn.Linear(3, 2)
    distribute.shard_model(model)
    ema = ExponentialMovingAverage(model, average_decay=0.5)
    items = distribute.full_state_items({"ema": ema, "step": 3}, model=model)
    assert isinstance(items["ema"], distribute.FullTensorState) and items["step"] == 3
    saved = items["ema"].state_dict()
    assert all(type(t) is torch.Tensor for t in saved["shadow"].values())
    changed = {"shadow": {k: v + 1 for k, v in saved["shadow"].items()}, "swapped": False}
    items["ema"].load_state_dict(changed)
    torch.testing.assert_close(items["ema"].state_dict(), changed)


class _SyncFlag(nn.Module):
    """Stands in for DDP: only the attribute matters."""

    def __init__(self) -> None:
        super().__init__()
        self.require_backward_grad_sync = True


def test_set_gradient_sync_reaches_ddp_through_a_compile_wrapper() -> None:
    inner = _SyncFlag()
    wrapper = nn.Module()
    wrapper._orig_mod = inner
    distribute.set_gradient_sync(wrapper, False)
    assert inner.require_backward_grad_sync is False
    distribute.set_gradient_sync(inner, True)
    assert inner.require_backward_grad_sync is True
    plain = nn.Linear(2, 2)
    distribute.set_gradient_sync(plain, False)  # neither DDP nor FSDP: untouched
    assert not hasattr(plain, "require_backward_grad_sync")


def test_init_checkpoint_weights_load_into_a_sharded_model(one_rank_group, tmp_path) -> None:
    from torchgarden.checkpoint import load_model_weights

    model = nn.Sequential(nn.Linear(3, 2), nn.Linear(2, 2))
    pretrained = {k: torch.full_like(v, 0.5) for k, v in model.state_dict().items()}
    torch.save({"model": pretrained}, tmp_path / "weights.pt")
    distribute.shard_model(model)
    load_model_weights(model, tmp_path / "weights.pt", prefixes=["0"])
    assert type(model[0].weight).__name__ == "DTensor"
    torch.testing.assert_close(model[0].weight.full_tensor(), pretrained["0.weight"])
    assert not torch.equal(model[1].weight.full_tensor(), pretrained["1.weight"])
