"""Runtime set-up: seed, threads, device, precision and torchrun process groups."""

from torchgarden.runtime.context import (
    RuntimeContext,
    seed_host_rngs,
    setup_runtime,
    teardown_runtime,
)
from torchgarden.runtime.precision import autocast_forward, precision_dtype

__all__ = [
    "RuntimeContext",
    "seed_host_rngs",
    "setup_runtime",
    "teardown_runtime",
    "autocast_forward",
    "precision_dtype",
]
