"""torchgarden: TensorFlow Model Garden's training design (Task, Trainer, Controller,
registries, typed configs, launch script) rebuilt on PyTorch.

Public names are re-exported here and loaded lazily, so ``import torchgarden`` and
``torchgarden --help`` stay cheap: config and registry names never import torch; the
others import it on first access.

Example:
    >>> import torchgarden as tg
    >>> params = tg.get_experiment("toy_regression")
    >>> params.trainer.train_steps
    100
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    # config (torch-free)
    "Config": "torchgarden.config",
    "ConfigError": "torchgarden.config",
    "OneOfConfig": "torchgarden.config",
    "ExperimentConfig": "torchgarden.config",
    "TaskConfig": "torchgarden.config",
    "DataConfig": "torchgarden.config",
    "TrainerConfig": "torchgarden.config",
    "RuntimeConfig": "torchgarden.config",
    "OptimizationConfig": "torchgarden.config",
    # registry (torch-free)
    "register_experiment": "torchgarden.registry",
    "get_experiment": "torchgarden.registry",
    "list_experiments": "torchgarden.registry",
    "register_task": "torchgarden.registry",
    "get_task": "torchgarden.registry",
    # core
    "Task": "torchgarden.core",
    "Trainer": "torchgarden.core",
    "Controller": "torchgarden.loop",
    "run_experiment": "torchgarden.train_lib",
    "create_trainer": "torchgarden.train_lib",
    "serialize_config": "torchgarden.train_lib",
    "parse_configuration": "torchgarden.cli.flags",
    "define_flags": "torchgarden.cli.flags",
    "setup_runtime": "torchgarden.runtime",
}

_SUBMODULES = (
    "callbacks", "checkpoint", "config", "core", "data", "distribute", "layers", "loop", "losses",
    "metrics", "optim", "registry", "runtime", "summary", "tasks", "experiments",
)

__all__ = sorted([*_EXPORTS, *_SUBMODULES, "__version__"])


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    if name in _SUBMODULES:
        module = importlib.import_module(f"torchgarden.{name}")
        globals()[name] = module
        return module
    raise AttributeError(f"module 'torchgarden' has no attribute '{name}'")


def __dir__() -> list[str]:
    return __all__


if TYPE_CHECKING:
    from torchgarden import (
        callbacks,
        checkpoint,
        config,
        core,
        data,
        distribute,
        experiments,
        layers,
        loop,
        losses,
        metrics,
        optim,
        registry,
        runtime,
        summary,
        tasks,
    )
    from torchgarden.cli.flags import define_flags, parse_configuration
    from torchgarden.config import (
        Config,
        ConfigError,
        DataConfig,
        ExperimentConfig,
        OneOfConfig,
        OptimizationConfig,
        RuntimeConfig,
        TaskConfig,
        TrainerConfig,
    )
    from torchgarden.core import Task, Trainer
    from torchgarden.loop import Controller
    from torchgarden.registry import (
        get_experiment,
        get_task,
        list_experiments,
        register_experiment,
        register_task,
    )
    from torchgarden.runtime import setup_runtime
    from torchgarden.train_lib import create_trainer, run_experiment, serialize_config
