"""The two benchmark workloads: the peers' tiny linear model and the digits MLP.

A ``Workload`` says everything a contender needs to train the same thing: the model
(built from a fixed seed), the loss, the optimizer (as torch arguments for hand-written
loops and Lightning, and as a torchgarden ``optimizer_config``), the in-memory data and
the batch size.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["Workload", "digits_mlp", "tiny_linear"]


@dataclass(frozen=True)
class Workload:
    """One training problem, described identically for every contender.

    Attributes:
        name: Short name used in tables.
        build_model: Returns a freshly initialised model (seeded: same weights each time).
        loss: ``loss(outputs, labels) -> scalar``.
        optimizer: ``"sgd"`` or ``"adam"``.
        optimizer_kwargs: torch keyword arguments (``lr``, ``eps``, ...).
        features: All inputs, first dimension = examples.
        labels: All labels.
        batch_size: Examples per step.
    """

    name: str
    build_model: Callable[[], nn.Module]
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    optimizer: str
    optimizer_kwargs: dict[str, Any]
    features: torch.Tensor
    labels: torch.Tensor
    batch_size: int

    def torch_optimizer(self, params: Any, **overrides: Any) -> torch.optim.Optimizer:
        """The optimizer a hand-written loop builds (torch defaults unless overridden)."""
        cls = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam}[self.optimizer]
        return cls(params, **{**self.optimizer_kwargs, **overrides})

    def optimizer_config(self, fused: bool | None = None) -> dict[str, Any]:
        """The same optimizer as a torchgarden ``trainer.optimizer_config`` (constant lr);
        ``fused=True`` asks for torch's fused kernel (default: torch's default one)."""
        kwargs = dict(self.optimizer_kwargs)
        if fused is not None:
            kwargs["fused"] = fused
        lr = kwargs.pop("lr")
        if self.optimizer == "adam" and "eps" in kwargs:
            kwargs["epsilon"] = kwargs.pop("eps")
        return {
            "optimizer": {"type": self.optimizer, self.optimizer: kwargs},
            "learning_rate": {"type": "constant", "constant": {"learning_rate": lr}},
        }


def _seeded(build: Callable[[], nn.Module]) -> Callable[[], nn.Module]:
    def build_seeded() -> nn.Module:
        with torch.random.fork_rng():
            torch.manual_seed(0)
            return build()

    return build_seeded


def tiny_linear(num_examples: int = 4096) -> Workload:
    """``nn.Linear(64, 64)``, MSE, SGD(lr=0.01), batch 32: the peers' overhead workload."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(num_examples, 64, generator=generator)
    y = torch.randn(num_examples, 64, generator=generator)
    return Workload(
        name="tiny_linear",
        build_model=_seeded(lambda: nn.Linear(64, 64)),
        loss=F.mse_loss,
        optimizer="sgd",
        optimizer_kwargs={"lr": 0.01},
        features=x,
        labels=y,
        batch_size=32,
    )


def digits_mlp(hidden_sizes: tuple[int, ...] = (128,)) -> Workload:
    """scikit-learn's 8×8 digits (train split), an MLP, Adam(3e-3, eps 1e-7), batch 64.

    ``hidden_sizes=(128,)`` (64-128-10, 9.6k parameters) is torchgarden's
    ``image_classification`` default (``build_classifier``: Flatten, Linear(64, 128),
    ReLU, Linear(128, 10)); ``(256, 256)`` (64-256-256-10, 85k parameters) is the model
    of Model Garden's own benchmark figure.
    """
    from torchgarden.data import load_digits_arrays

    x, y = load_digits_arrays("train")

    def build() -> nn.Module:
        layers: list[nn.Module] = [nn.Flatten()]
        width = 64
        for hidden in hidden_sizes:
            layers += [nn.Linear(width, hidden), nn.ReLU()]
            width = hidden
        return nn.Sequential(*layers, nn.Linear(width, 10))

    return Workload(
        name="digits_mlp_" + "-".join(str(h) for h in (64, *hidden_sizes, 10)),
        build_model=_seeded(build),
        loss=F.cross_entropy,
        optimizer="adam",
        optimizer_kwargs={"lr": 3e-3, "eps": 1e-7},
        features=x.float(),
        labels=y.long(),
        batch_size=64,
    )
