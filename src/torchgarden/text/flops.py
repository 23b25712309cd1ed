"""FLOPs per token (counted by ``torch.utils.flop_counter``) and a device's peak FLOP/s."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

__all__ = ["PEAK_BF16_FLOPS", "flops_per_token", "peak_flops"]

#: Dense bf16 tensor-core peak FLOP/s by CUDA device-name fragment (vendor data sheets;
#: the first fragment found in ``torch.cuda.get_device_name()`` wins).
PEAK_BF16_FLOPS: dict[str, float] = {
    "H100 PCIe": 756e12,
    "H100 NVL": 835e12,
    "H100": 989e12,
    "H200": 989e12,
    "GH200": 989e12,
    "B200": 2250e12,
    "A100": 312e12,
    "L40S": 362e12,
    "L4": 121e12,
    "A10G": 70e12,
}


def flops_per_token(build_model: Callable[[], nn.Module], seq_length: int) -> float:
    """Training FLOPs (forward and backward) per token of the transformers causal LM
    ``build_model`` makes.

    A twin of the model is built on the ``meta`` device, so counting allocates no memory
    and computes nothing; ``torch.utils.flop_counter.FlopCounterMode`` adds up the
    matmul, convolution and attention FLOPs of one ``[1, seq_length]`` sequence.
    Recomputation under activation checkpointing is not counted (model FLOPs, as MFU
    is defined).
    """
    with torch.device("meta"):
        twin = build_model()
    twin.train()
    ids = torch.zeros(1, seq_length, dtype=torch.long, device="meta")
    with FlopCounterMode(display=False) as counter:
        outputs = twin(ids)
        logits = outputs if isinstance(outputs, torch.Tensor) else outputs["logits"]
        logits.float().sum().backward()
    return counter.get_total_flops() / seq_length


def peak_flops(device: torch.device) -> float:
    """Peak FLOP/s of ``device`` for MFU: the bf16 data-sheet peak of a known CUDA GPU
    (0.0 for an unknown one), or on a CPU the measured fp32 matmul rate of this process'
    threads (best of 3 runs of a 1024x1024 matmul)."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        return next((v for k, v in PEAK_BF16_FLOPS.items() if k in name), 0.0)
    if device.type != "cpu":
        return 0.0
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - start)
    return 2 * 1024**3 / best
