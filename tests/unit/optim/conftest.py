"""Shared fixtures for the optim tests: one thread and config stand-ins."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace as NS
from typing import Any

import pytest
import torch

from torchgarden.config import OptimizationConfig


@pytest.fixture(autouse=True)
def _one_thread():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def _oneof(oneof: Any, kind: str | None, fields: dict[str, Any]) -> NS:
    """A one-of section choosing ``kind``; its fields default to the real config's."""
    if kind is None:
        return NS(type=None)
    defaults = getattr(oneof, kind, None)  # None for a type the config does not know
    values = {**(defaults.as_dict() if defaults else {}), **fields}
    return NS(type=kind, **{kind: NS(**values)})


@pytest.fixture
def make_config() -> Callable[..., NS]:
    """Returns `make(optimizer="sgd", lr=("constant", {...}), warmup=None, **optimizer_fields)`.

    Builds a stand-in for `OptimizationConfig` whose sections default to the real config's
    and which may also name a type the real config would refuse.
    """

    def make(
        optimizer: str = "sgd",
        lr: tuple[str, dict[str, Any]] = ("constant", {"learning_rate": 0.1}),
        warmup: tuple[str, dict[str, Any]] | None = None,
        **optimizer_fields: Any,
    ) -> NS:
        real = OptimizationConfig()
        return NS(
            optimizer=_oneof(real.optimizer, optimizer, optimizer_fields),
            learning_rate=_oneof(real.learning_rate, *lr),
            warmup=_oneof(real.warmup, *(warmup or (None, {}))),
            ema=None,
        )

    return make
