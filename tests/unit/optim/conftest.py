"""Shared fixtures for the optim tests: one thread and config stand-ins."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace as NS
from typing import Any

import pytest
import torch

_OPTIMIZER_DEFAULTS: dict[str, dict[str, Any]] = {
    "sgd": {"momentum": 0.0, "nesterov": False, "weight_decay": 0.0},
    "adam": {
        "beta_1": 0.9,
        "beta_2": 0.999,
        "epsilon": 1e-7,
        "amsgrad": False,
        "weight_decay": 0.0,
    },
    "adamw": {
        "beta_1": 0.9,
        "beta_2": 0.999,
        "epsilon": 1e-7,
        "amsgrad": False,
        "weight_decay_rate": 0.0,
        "exclude_from_weight_decay": [],
    },
    "rmsprop": {
        "rho": 0.9,
        "momentum": 0.0,
        "epsilon": 1e-7,
        "centered": False,
        "weight_decay": 0.0,
    },
    "adagrad": {"initial_accumulator_value": 0.1, "epsilon": 1e-7, "weight_decay": 0.0},
}
_CLIP_DEFAULTS = {"clipnorm": None, "clipvalue": None, "global_clipnorm": None, "fused": None}


@pytest.fixture(autouse=True)
def _one_thread():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def _oneof(kind: str | None, **subs: Any) -> NS:
    return NS(type=kind, **subs)


@pytest.fixture
def make_config() -> Callable[..., NS]:
    """Returns `make(optimizer="sgd", lr=("constant", {...}), warmup=None, **optimizer_fields)`.

    Builds a stand-in for `OptimizationConfig` with the attributes the optim package reads.
    """

    def make(
        optimizer: str = "sgd",
        lr: tuple[str, dict[str, Any]] = ("constant", {"learning_rate": 0.1}),
        warmup: tuple[str, dict[str, Any]] | None = None,
        **optimizer_fields: Any,
    ) -> NS:
        fields = {**_CLIP_DEFAULTS, **_OPTIMIZER_DEFAULTS.get(optimizer, {}), **optimizer_fields}
        lr_kind, lr_fields = lr
        warmup_kind, warmup_fields = warmup if warmup else (None, {})
        return NS(
            optimizer=_oneof(optimizer, **{optimizer: NS(**fields)}),
            learning_rate=_oneof(lr_kind, **{lr_kind: NS(**lr_fields)}),
            warmup=_oneof(
                warmup_kind, **({warmup_kind: NS(**warmup_fields)} if warmup_kind else {})
            ),
            ema=None,
        )

    return make
