"""Small stateful objects the Trainer owns and checkpoints: global step, loss meter, RNGs."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import numpy as np
import torch

__all__ = ["GlobalStep", "LossMean", "RngState", "TrainWindow"]


class GlobalStep:
    """The training step counter shared by the Trainer and the Controller (Orbit's
    ``global_step`` variable). A Python int on the host, so reading it never syncs.

    Example:
        >>> step = GlobalStep()
        >>> step.assign_add(3)
        >>> int(step)
        3
    """

    __slots__ = ("value",)

    def __init__(self, value: int = 0) -> None:
        self.value = int(value)

    def __int__(self) -> int:
        return self.value

    __index__ = __int__
    numpy = __int__  # Model Garden's spelling: ``global_step.numpy()``.

    def assign(self, value: int) -> None:
        self.value = int(value)

    def assign_add(self, delta: int) -> None:
        self.value += int(delta)

    def state_dict(self) -> dict[str, int]:
        return {"value": self.value}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.value = int(state["value"])

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (GlobalStep, int)):
            return self.value == int(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.value)

    def __repr__(self) -> str:
        return f"GlobalStep({self.value})"


class LossMean:
    """Window mean of a scalar loss kept on device (the ``training_loss`` /
    ``validation_loss`` meters). One in-place add per update; ``result()`` returns a
    device tensor, so nothing is read back to the host until somebody asks.

    Args:
        name: Log key, e.g. ``"training_loss"``.
        device: Where the running sum lives.
    """

    def __init__(self, name: str, device: torch.device | str = "cpu") -> None:
        self.name = name
        #: The running sum, a device tensor (a compiled loop adds its losses to it in place
        #: and then adds their number to ``count``).
        self.total = torch.zeros((), dtype=torch.float32, device=device)
        #: Number of updates since the last reset.
        self.count = 0

    def update_state(self, value: torch.Tensor | float) -> None:
        self.total += value  # In place, on device: no host sync.
        self.count += 1

    def result(self) -> torch.Tensor:
        return self.total / max(self.count, 1)

    def reset_states(self) -> None:
        self.total.zero_()
        self.count = 0

    reset_state = reset_states

    def sync(self) -> None:
        """Sums the meter over all ranks (call once before ``result()``)."""
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            packed = torch.stack([self.total, self.total.new_tensor(float(self.count))])
            dist.all_reduce(packed)
            self.total.copy_(packed[0])
            self.count = int(packed[1].item())  # Host sync: once per loop.

    def state_dict(self) -> dict[str, Any]:
        """Returns the open window: ``{"sum": 0-d tensor, "count": int}``."""
        return {"sum": self.total, "count": self.count}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        with torch.no_grad():
            self.total.copy_(state["sum"])
        self.count = int(state["count"])


@dataclasses.dataclass(eq=False)
class TrainWindow:
    """The train loop's open averaging window (loss meter + train metrics) as a checkpoint item.

    Windows are reset at every loop end, so a checkpoint taken there holds zeros. A
    preemption checkpoint taken mid-loop holds the partial sums, and the resumed run
    finishes the window: its logged means equal an uninterrupted run's bit for bit.
    Metrics without ``state_dict()`` (or with an empty one, e.g. torchmetrics by
    default) restart from zero.
    """

    loss: LossMean  # The ``training_loss`` meter.
    metrics: list[Any]  # The train metrics.

    def state_dict(self) -> dict[str, Any]:
        metrics = [
            dict(m.state_dict()) if callable(getattr(m, "state_dict", None)) else {}
            for m in self.metrics
        ]
        return {"loss": self.loss.state_dict(), "metrics": metrics}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.loss.load_state_dict(state["loss"])
        for metric, metric_state in zip(self.metrics, state.get("metrics", [])):
            if metric_state and callable(getattr(metric, "load_state_dict", None)):
                metric.load_state_dict(metric_state)


class RngState:
    """Python, NumPy and torch (CPU + CUDA) generator states as a checkpoint item.

    NumPy's state is stored as tensors so checkpoints load with ``weights_only=True``.
    """

    def state_dict(self) -> dict[str, Any]:
        kind, keys, pos, has_gauss, cached = np.random.get_state()
        state: dict[str, Any] = {
            "python": random.getstate(),
            "numpy": {
                "kind": kind,
                "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
                "pos": int(pos),
                "has_gauss": int(has_gauss),
                "cached_gaussian": float(cached),
            },
            "torch": torch.get_rng_state(),
        }
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            state["cuda"] = torch.cuda.get_rng_state_all()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        version, internal, gauss = state["python"]
        random.setstate((version, tuple(internal), gauss))
        np_state = state["numpy"]
        keys = np_state["keys"].numpy().astype(np.uint32)
        np.random.set_state((np_state["kind"], keys, np_state["pos"], np_state["has_gauss"],
                             np_state["cached_gaussian"]))
        torch.set_rng_state(state["torch"])
        if "cuda" in state and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda"])
