"""Shared fixtures for the data tests."""

from __future__ import annotations

import types

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def _make_params(**overrides) -> types.SimpleNamespace:
    """A stand-in for `DataConfig` with its documented defaults."""
    values = {
        "input_path": "",
        "global_batch_size": 4,
        "is_training": True,
        "drop_remainder": True,
        "shuffle": None,
        "seed": 0,
        "deterministic": None,
        "sharding": True,
        "num_workers": 0,
        "pin_memory": False,
        "persistent_workers": False,
        "prefetch_factor": None,
        "cache": False,
    }
    values.update(overrides)
    return types.SimpleNamespace(**values)


@pytest.fixture
def make_params():
    """Builds a `DataConfig` stand-in: `make_params(global_batch_size=8, ...)`."""
    return _make_params
