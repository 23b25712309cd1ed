"""Throughput of train loops: examples/s, tokens/s, MFU, data wait, peak memory.

Everything here reads host clocks and counters at loop boundaries: nothing syncs with
the device per step. A loop is timed from the call of ``trainer.train(n)`` to its logs on
the host (the Controller's one sync per loop), so the device has finished the loop's
work when the clock stops; checkpoints, summaries and evaluations between loops are not
in the window.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import torch

__all__ = ["PEAK_FLOPS_BF16", "ThroughputMeter", "peak_flops_per_device"]

_GIB = float(2**30)

#: Dense bf16 peak FLOP/s of CUDA devices by name fragment (vendor data sheets); the
#: first fragment found in ``torch.cuda.get_device_name()`` wins.
PEAK_FLOPS_BF16: dict[str, float] = {
    "H100 PCIe": 756e12,
    "H100 NVL": 835e12,
    "H100": 989e12,
    "GH200": 989e12,
    "H200": 989e12,
    "B200": 2250e12,
    "A100": 312e12,
    "L40S": 362e12,
    "L4": 121e12,
    "A10G": 70e12,
    "V100": 125e12,
}


def peak_flops_per_device(device: torch.device) -> float | None:
    """The bf16 data-sheet peak of a known CUDA device, else None (no MFU by default)."""
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    name = torch.cuda.get_device_name(device)
    return next((peak for key, peak in PEAK_FLOPS_BF16.items() if key in name), None)


def _peak_rss_gib() -> float | None:
    try:
        import resource
    except ImportError:  # Windows.
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / _GIB if sys.platform == "darwin" else peak * 1024 / _GIB  # bytes vs KiB


class ThroughputMeter:
    """Figures of one train loop at a time: ``loop_begin()``, then ``loop_end(steps, seconds)``.

    Example:
        >>> meter = ThroughputMeter(examples_per_step=256, tokens_per_example=1024,
        ...                         flops_per_example=6 * 124e6 * 1024, peak_flops=989e12)
        >>> meter.loop_begin(); start = time.perf_counter()
        >>> to_host(trainer.train(100))  # The loop's work is done when its logs are here.
        >>> meter.loop_end(100, time.perf_counter() - start)
        {"throughput/examples_per_second": ..., ...}

    Args:
        examples_per_step: Examples one optimizer step consumes, all processes together
            (global batch size times gradient accumulation). 0 leaves out every rate but
            the data wait.
        tokens_per_example: Tokens in one example, for ``throughput/tokens_per_second``.
            None leaves it out.
        flops_per_example: Training FLOPs (forward and backward) of one example, or a
            zero-argument callable returning them (asked once, at the first loop end:
            e.g. a counter that needs a batch to have been seen). None: no MFU.
        peak_flops: Peak FLOP/s of all devices together. None: no MFU.
        data_wait: Zero-argument callable returning the seconds steps have waited for
            the input pipeline so far (``Trainer.data_wait_seconds``). None: left out.
        device: The training device; a CUDA device adds its peak allocated memory.
    """

    def __init__(
        self,
        *,
        examples_per_step: int = 0,
        tokens_per_example: int | None = None,
        flops_per_example: float | Callable[[], float | None] | None = None,
        peak_flops: float | None = None,
        data_wait: Callable[[], float] | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        self.examples_per_step = int(examples_per_step)
        self.tokens_per_example = tokens_per_example
        self._flops = flops_per_example
        self.peak_flops = peak_flops
        self._data_wait = data_wait
        device = torch.device(device) if device is not None else None
        self._cuda = device if device is not None and device.type == "cuda" else None
        self._wait_start = 0.0

    @property
    def flops_per_example(self) -> float | None:
        """Training FLOPs of one example, once known (a callable is resolved once)."""
        if callable(self._flops):
            self._flops = self._flops()
        return self._flops

    def loop_begin(self) -> None:
        """Reads the data-wait clock (call right before ``trainer.train``)."""
        self._wait_start = self._data_wait() if self._data_wait is not None else 0.0

    def loop_end(self, steps: int, elapsed: float) -> dict[str, float]:
        """The figures of a loop of ``steps`` steps that took ``elapsed`` seconds (call
        once its logs are on the host).

        Returns:
            ``throughput/examples_per_second``, ``throughput/tokens_per_second``,
            ``throughput/mfu`` (fraction of ``peak_flops``),
            ``throughput/data_wait_fraction``, ``memory/cuda_peak_gib`` (peak allocated
            during the loop) and ``memory/rss_peak_gib`` (the process' peak resident
            set), each where it is known.
        """
        out: dict[str, float] = {}
        if elapsed > 0 and steps > 0:
            out.update(self._rates(steps * self.examples_per_step / elapsed))
            if self._data_wait is not None:
                waited = self._data_wait() - self._wait_start
                out["throughput/data_wait_fraction"] = min(max(waited / elapsed, 0.0), 1.0)
        if self._cuda is not None:
            # Allocator counters on the host: no sync.
            out["memory/cuda_peak_gib"] = torch.cuda.max_memory_allocated(self._cuda) / _GIB
            torch.cuda.reset_peak_memory_stats(self._cuda)
        rss = _peak_rss_gib()
        if rss is not None:
            out["memory/rss_peak_gib"] = rss
        return out

    def _rates(self, examples_per_second: float) -> dict[str, float]:
        if not self.examples_per_step:
            return {}
        out = {"throughput/examples_per_second": examples_per_second}
        if self.tokens_per_example:
            out["throughput/tokens_per_second"] = examples_per_second * self.tokens_per_example
        flops = self.flops_per_example
        if flops and self.peak_flops:
            out["throughput/mfu"] = examples_per_second * flops / self.peak_flops
        return out
