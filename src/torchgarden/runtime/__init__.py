"""How a run executes: the process, the distribution ``Strategy`` and the ``StepPlan``.

* ``context`` -- ``setup_runtime``: seed, threads, device, precision, torchrun's process
  group -> ``RuntimeContext``;
* ``strategy`` -- one process, DDP or FSDP2, resolved once from the config;
* ``plan`` -- the frozen plan of how the Trainer runs its steps;
* ``precision``, ``preemption`` -- autocast around forward; signals -> checkpoint and exit.

Names are loaded on first access: ``torchgarden.runtime.strategy`` is importable without
torch (a run refuses a busy model_dir before torch is imported).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torchgarden.utils.lazy import lazy_names

if TYPE_CHECKING:
    from torchgarden.runtime.context import (
        RuntimeContext,
        seed_host_rngs,
        setup_runtime,
        teardown_runtime,
    )
    from torchgarden.runtime.plan import LossBound, StepPlan
    from torchgarden.runtime.precision import autocast_forward, precision_dtype
    from torchgarden.runtime.strategy import (
        DDP,
        FSDP,
        SingleProcess,
        Strategy,
        register_strategy,
        resolve_strategy,
    )

__getattr__, __all__ = lazy_names(__name__, __file__)
