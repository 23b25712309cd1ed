"""GPU checks: device tensors are saved from host copies and restore onto the CPU."""

from __future__ import annotations

import os

import pytest
import torch

from torchgarden.checkpoint import Checkpoint, CheckpointManager

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


@pytest.mark.parametrize("enable_async", [False, True])
def test_cuda_state_round_trips_through_host(tmp_path, enable_async):
    model = torch.nn.Linear(64, 32).cuda()
    expected = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    manager = CheckpointManager(Checkpoint(model=model), tmp_path, enable_async=enable_async)
    path = manager.save(1)
    with torch.no_grad():  # in-flight device work after save must not reach the file
        model.weight.mul_(0.0)
    manager.sync()
    state = torch.load(os.path.join(path, "state.pt"), weights_only=True)
    for key, value in expected.items():
        assert state["model"][key].device.type == "cpu"
        assert torch.equal(state["model"][key], value)
    assert manager.restore() == path
    assert torch.equal(model.weight.cpu(), expected["weight"])
    manager.close()
