"""Language-model metrics: bits per byte, tokens per second and model FLOPs utilisation."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F

from torchgarden.metrics import Metric

__all__ = ["BitsPerByte", "Throughput", "logits_of"]


def logits_of(outputs: Any) -> torch.Tensor:
    """The ``[B, T, V]`` logits of a causal LM's output (a tensor, ``.logits`` or a dict)."""
    if isinstance(outputs, torch.Tensor):
        return outputs
    if isinstance(outputs, Mapping):
        return outputs["logits"]
    return outputs.logits


class BitsPerByte(Metric):
    """Mean next-token cross-entropy in bits, per byte of text.

    With byte-level tokens (one token per byte) this is the cross-entropy in bits per
    token: ``sum(-log p(target)) / (num_targets * ln 2)``.

    Args:
        bytes_per_token: Average bytes a token stands for. Defaults to 1.0 (bytes).
        name: The log key. Defaults to ``bits_per_byte``.
    """

    def __init__(self, bytes_per_token: float = 1.0, name: str = "bits_per_byte") -> None:
        super().__init__(name, dtype=torch.float64)
        self.bytes_per_token = float(bytes_per_token)
        self.nats = self.add_weight("nats")
        self.tokens = self.add_weight("tokens")

    def update_state(self, y_true: torch.Tensor, y_pred: Any, sample_weight: Any = None) -> None:
        logits = logits_of(y_pred).float()
        self.nats += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y_true.reshape(-1),
                                     reduction="sum").double()
        self.tokens += y_true.numel()

    def result(self) -> torch.Tensor:
        return self.nats / (self.tokens.clamp(min=1) * math.log(2) * self.bytes_per_token)


class Throughput(Metric):
    """Training tokens per second (all processes) and model FLOPs utilisation (MFU).

    The clock starts at the first update after a reset, so a loop's first step (and
    whatever ran before it) is left out; the tokens of the later steps are summed over
    processes when the loop's logs are collected. ``mfu = tokens_per_second *
    flops_per_token / (peak_flops * num_processes)``.

    Args:
        flops_per_token: Model FLOPs of one token's forward and backward pass; 0 leaves
            MFU out. Defaults to 0.
        peak_flops: Peak FLOP/s of one device; 0 leaves MFU out. Defaults to 0.
    """

    def __init__(self, flops_per_token: float = 0.0, peak_flops: float = 0.0) -> None:
        super().__init__("throughput", dtype=torch.float64)
        self.flops_per_token, self.peak_flops = float(flops_per_token), float(peak_flops)
        self.tokens = self.add_weight("tokens")
        self._start: float | None = None

    def update_state(self, y_true: torch.Tensor, y_pred: Any = None,
                     sample_weight: Any = None) -> None:
        if self._start is None:
            self._start = time.perf_counter()
            return
        self.tokens += y_true.numel()  # A host-side shape: no sync.

    def reset_states(self) -> None:
        super().reset_states()
        self._start = None

    def result(self) -> dict[str, torch.Tensor]:
        if self.tokens.is_cuda:
            torch.cuda.synchronize()  # Sync point (once per loop): the clock must see the work.
        elapsed = time.perf_counter() - self._start if self._start is not None else 0.0
        rate = self.tokens / elapsed if elapsed > 0 else torch.zeros_like(self.tokens)
        logs = {"tokens_per_second": rate}
        if self.flops_per_token and self.peak_flops:
            world = torch.distributed.get_world_size() if torch.distributed.is_initialized() else 1
            logs["mfu"] = rate * self.flops_per_token / (self.peak_flops * world)
        return logs
