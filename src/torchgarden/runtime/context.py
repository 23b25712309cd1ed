"""Turns a ``RuntimeConfig`` into a process state: seeds, threads, device, process group."""

from __future__ import annotations

import dataclasses
import datetime
import logging
import os
import random
from typing import TYPE_CHECKING

import numpy as np
import torch

from torchgarden.runtime.precision import precision_dtype
from torchgarden.runtime.strategy import SingleProcess, Strategy, resolve_strategy

if TYPE_CHECKING:
    from torchgarden.config import RuntimeConfig

__all__ = ["RuntimeContext", "setup_runtime", "teardown_runtime"]

_logger = logging.getLogger("torchgarden")

@dataclasses.dataclass(frozen=True)
class RuntimeContext:
    """What the rest of a run needs to know about the process it runs in.

    Attributes:
        device: The device models and batches live on.
        strategy: How the processes execute (``runtime.strategy``: one process, DDP, FSDP2).
        world_size: Number of processes (1 without torchrun).
        rank: This process' global rank.
        local_rank: This process' rank on its node.
        autocast_dtype: ``torch.float16`` / ``torch.bfloat16`` under mixed precision.
        owns_process_group: True when ``setup_runtime`` initialised the process group.
    """

    device: torch.device = torch.device("cpu")
    strategy: Strategy = dataclasses.field(default_factory=SingleProcess)
    world_size: int = 1
    rank: int = 0
    local_rank: int = 0
    autocast_dtype: torch.dtype | None = None
    owns_process_group: bool = False

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_chief(self) -> bool:
        """Rank 0: the only process that writes logs, summaries and checkpoints."""
        return self.rank == 0


def _resolve_device(name: str, local_rank: int) -> torch.device:
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", local_rank % max(1, torch.cuda.device_count()))
        return torch.device("cpu")
    device = torch.device(name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(
                f"runtime.device is '{name}' but CUDA is not available; use 'auto' or 'cpu'."
            )
        if device.index is None:
            device = torch.device("cuda", local_rank % torch.cuda.device_count())
    return device


def default_num_threads(cores: int | None = None) -> int:
    """The intra-op thread count ``runtime.num_threads: null`` chooses: half the cores.

    torch's own default is one thread per core. On the 2-core machine this project is
    built on, the default experiment trained at ~1,700 steps/s with 2 threads and
    ~2,300 with 1 (the other core runs the data, summary and checkpoint threads, and
    other processes; small ops gain nothing from splitting), so half the cores is the
    default, at least 1.
    """
    cores = cores if cores is not None else (os.cpu_count() or 1)
    return max(1, min(torch.get_num_threads(), cores // 2))


def _set_threads(requested: int | None) -> None:
    threads = requested or default_num_threads()
    torch.set_num_threads(threads)
    how = "runtime.num_threads" if requested else (
        f"automatic: half of {os.cpu_count()} cores; set runtime.num_threads to change it")
    _logger.info("torch intra-op threads: %d (%s)", threads, how)


def setup_runtime(config: RuntimeConfig) -> RuntimeContext:
    """Applies ``config`` to this process and returns the resulting context.

    The strategy is :func:`~torchgarden.runtime.strategy.resolve_strategy`'s. Under a
    distributed one the default process group is initialised with ``runtime.backend``
    (``nccl`` on CUDA, else ``gloo``) unless one exists already. Seeds ``random``, NumPy
    and torch with ``runtime.seed`` when set.
    """
    strategy = resolve_strategy(config)
    _set_threads(config.num_threads)
    if config.flush_denormal:
        # TensorFlow flushes denormals by default; PyTorch on CPU does not, and tiny
        # gradients late in training then cost up to 2x per step.
        torch.set_flush_denormal(True)
    if config.matmul_precision:
        torch.set_float32_matmul_precision(config.matmul_precision)
    if config.deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cudnn.benchmark = False
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = _resolve_device(config.device, local_rank)
    world_size, rank, owns_group = 1, 0, False
    if strategy.distributed:
        import torch.distributed as dist

        if not dist.is_initialized():
            if device.type == "cuda":
                torch.cuda.set_device(device)
            _join_process_group(config, device)
            owns_group = True
        world_size, rank = dist.get_world_size(), dist.get_rank()
    elif int(os.environ.get("WORLD_SIZE", "1")) > 1:
        _logger.warning("WORLD_SIZE=%s but runtime.distribution_strategy='%s': every process "
                        "trains alone.", os.environ["WORLD_SIZE"], config.distribution_strategy)
    if config.seed is not None:
        seed_host_rngs(config.seed)
        torch.manual_seed(config.seed)
    return RuntimeContext(
        device=device, strategy=strategy, world_size=world_size, rank=rank,
        local_rank=local_rank, autocast_dtype=precision_dtype(config.mixed_precision_dtype),
        owns_process_group=owns_group,
    )


def _join_process_group(config: RuntimeConfig, device: torch.device) -> None:
    """``init_process_group`` with ``runtime.distributed_timeout`` for every collective.

    Under torchrun the group's keys are namespaced by the restart attempt: torchrun's
    agents keep one store for all their restarts (``TORCHELASTIC_USE_AGENT_STORE``;
    pytorch/pytorch#135712), so a restarted rank could read a dead peer's address left by
    the previous attempt and wait for it (5 of 8 rounds of tests/distributed/
    test_elastic_restart.py without the prefix on one node; 3 of 4 runs of tests/distributed/
    test_two_nodes.py on two nodes). The agents of a job restart together, so their
    attempts agree.
    """
    import torch.distributed as dist

    timeout = datetime.timedelta(minutes=config.distributed_timeout)
    backend = config.backend or ("nccl" if device.type == "cuda" else "gloo")
    env = os.environ
    if env.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        world_size = int(env["WORLD_SIZE"])
        store = dist.PrefixStore(
            f"torchgarden/restart_{env.get('TORCHELASTIC_RESTART_COUNT', '0')}",
            dist.TCPStore(env["MASTER_ADDR"], int(env["MASTER_PORT"]), world_size,
                          is_master=False, timeout=timeout))
        dist.init_process_group(backend=backend, store=store, rank=int(env["RANK"]),
                                world_size=world_size, timeout=timeout)
    else:
        dist.init_process_group(backend=backend, timeout=timeout)


def seed_host_rngs(seed: int) -> None:
    """Seeds Python's ``random`` and NumPy's global RNG with ``seed``.

    ``run_experiment`` calls it again on a fresh start once everything is built:
    libraries draw from ``random`` when first imported (``rich`` does, and scikit-learn
    imports it), so without the second seeding the training stream would depend on
    which imports happened to run after the first one.
    """
    random.seed(seed)
    np.random.seed(seed)


def teardown_runtime(context: RuntimeContext) -> None:
    """Destroys the process group if ``setup_runtime`` created it."""
    if context.owns_process_group:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
