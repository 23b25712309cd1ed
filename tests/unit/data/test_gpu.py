from __future__ import annotations

import pytest
import torch

from torchgarden.data import ArrayDataset, ArrayLoader, ResumableSampler, move_to_device

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]


def test_move_to_cuda_then_again_is_no_op():
    batch = {"x": torch.ones(2, 3).pin_memory(), "y": (torch.arange(2),)}
    moved = move_to_device(batch, "cuda")
    torch.cuda.synchronize()
    assert moved["x"].is_cuda and moved["y"][0].is_cuda
    assert torch.equal(moved["x"].cpu(), batch["x"])
    assert move_to_device(moved, "cuda") is moved


def test_array_loader_gathers_on_the_tensors_device():
    x = torch.arange(20.0).reshape(10, 2)
    sampler = ResumableSampler(10, shuffle=True, seed=0)
    cpu_batches = list(ArrayLoader(ArrayDataset(x), sampler=sampler, batch_size=4))
    gpu_loader = ArrayLoader(ArrayDataset(x.cuda()), sampler=sampler, batch_size=4)
    gpu_batches = list(gpu_loader)
    assert all(b[0].is_cuda for b in gpu_batches)
    assert all(torch.equal(a[0], b[0].cpu()) for a, b in zip(cpu_batches, gpu_batches))


def test_array_loader_pins_cpu_batches():
    loader = ArrayLoader(
        ArrayDataset(torch.ones(6, 2)),
        sampler=ResumableSampler(6, shuffle=False, seed=0),
        batch_size=3,
        pin_memory=True,
    )
    assert all(batch[0].is_pinned() for batch in loader)
