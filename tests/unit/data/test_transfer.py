from __future__ import annotations

import collections

import torch

from torchgarden.data import make_batch_mover, move_to_device

Pair = collections.namedtuple("Pair", ["x", "y"])


def test_cpu_batch_to_cpu_returns_same_objects():
    batch = {"a": (torch.ones(2), [torch.zeros(1)]), "meta": "id"}
    assert move_to_device(batch, "cpu") is batch


def test_structure_is_preserved_when_tensors_move():
    batch = Pair(torch.ones(2, dtype=torch.float64), {"k": torch.zeros(1)})
    moved = move_to_device(batch, torch.device("meta"))
    assert isinstance(moved, Pair) and moved.x.device.type == "meta"
    assert moved.y["k"].device.type == "meta" and moved.x.dtype == torch.float64


def test_cpu_mover_is_identity():
    batch = (torch.ones(1),)
    mover = make_batch_mover("cpu")
    assert mover(batch) is batch
    assert make_batch_mover("meta")(batch)[0].device.type == "meta"
