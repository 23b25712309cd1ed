"""PreemptionWatcher: the flag, the rank agreement, and a signal that lands mid-agreement."""

from __future__ import annotations

import signal

import pytest
import torch
import torch.distributed as dist

from torchgarden.runtime.preemption import PreemptionWatcher


def test_one_process_agrees_with_its_own_flag():
    watcher = PreemptionWatcher()
    assert watcher.agreed() is False
    watcher._handle(signal.SIGTERM, None)
    assert watcher.requested and watcher.agreed() is True


class _TwoRanks:
    """Stands in for a 2-rank gloo world: all_reduce(MAX) with the peer's flag, and a
    SIGTERM handler that may run while the all-reduce blocks (as Python runs handlers once
    the C call returns)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, watcher: PreemptionWatcher) -> None:
        self.peer_flag = 0
        self.signal_during_next_reduce = False
        self.watcher = watcher
        monkeypatch.setattr(dist, "is_initialized", lambda: True)
        monkeypatch.setattr(dist, "get_world_size", lambda *a, **k: 2)
        monkeypatch.setattr(dist, "get_backend", lambda *a, **k: "gloo")
        monkeypatch.setattr(dist, "all_reduce", self.all_reduce)

    def all_reduce(self, tensor: torch.Tensor, op: object = None) -> None:
        tensor.copy_(torch.maximum(tensor, torch.tensor([self.peer_flag])))
        if self.signal_during_next_reduce:
            self.signal_during_next_reduce = False
            self.watcher._handle(signal.SIGTERM, None)


def test_a_signal_during_the_all_reduce_is_kept_for_the_next_boundary(monkeypatch):
    watcher = PreemptionWatcher()
    world = _TwoRanks(monkeypatch, watcher)
    world.signal_during_next_reduce = True
    # Both ranks reduced 0: this boundary goes on (the peer got False too) ...
    assert watcher.agreed() is False
    # ... but the flag the handler raised meanwhile is not lost: the next boundary stops.
    assert watcher.requested is True
    assert watcher.agreed() is True


def test_a_peer_signal_is_agreed_and_remembered(monkeypatch):
    watcher = PreemptionWatcher()
    world = _TwoRanks(monkeypatch, watcher)
    assert watcher.agreed() is False
    world.peer_flag = 1
    assert watcher.agreed() is True and watcher.requested is True
