"""torchgarden: TensorFlow Model Garden's training design (Task, Trainer, Controller,
registries, typed configs, launch script) rebuilt on PyTorch.

``import torchgarden`` stays cheap (``torchgarden --help`` never imports torch): config
and registry names are imported here; the names whose modules import torch are loaded
on first access, as are the subpackages (``torchgarden.metrics``, ``.losses``, ...).

Example:
    >>> import torchgarden as tg
    >>> params = tg.get_experiment("toy_regression")
    >>> params.trainer.train_steps
    100
"""

from __future__ import annotations

import importlib
import pathlib
from typing import TYPE_CHECKING, Any

from torchgarden.config import (
    Config,
    ConfigError,
    DataConfig,
    ExperimentConfig,
    OptimizationConfig,
    RuntimeConfig,
    TaskConfig,
    TrainerConfig,
)
from torchgarden.registry import (
    get_experiment,
    get_task,
    list_experiments,
    register_experiment,
    register_task,
)
from torchgarden.utils.lazy import lazy_names
from torchgarden.utils.moved import moved_name_error

if TYPE_CHECKING:  # Loaded on first access (these modules import torch).
    from torchgarden.cli.flags import define_flags, parse_configuration
    from torchgarden.core import Evaluator, Task, Trainer
    from torchgarden.loop import Controller
    from torchgarden.runtime import setup_runtime
    from torchgarden.train_lib import create_trainer, run_experiment

__version__ = "0.1.0"

__all__ = [
    "Config",
    "ConfigError",
    "Controller",
    "DataConfig",
    "Evaluator",
    "ExperimentConfig",
    "OptimizationConfig",
    "RuntimeConfig",
    "Task",
    "TaskConfig",
    "Trainer",
    "TrainerConfig",
    "__version__",
    "create_trainer",
    "define_flags",
    "get_experiment",
    "get_task",
    "list_experiments",
    "parse_configuration",
    "register_experiment",
    "register_task",
    "run_experiment",
    "setup_runtime",
]

_load_name, _ = lazy_names(__name__, __file__)


def __getattr__(name: str) -> Any:
    if name.startswith("__"):  # Dunder probes (copy, pickle, IDEs): never import torch.
        raise AttributeError(name)
    if _is_submodule(name):
        value = importlib.import_module(f"torchgarden.{name}")
        globals()[name] = value
        return value
    moved = moved_name_error(__name__, name)  # Old names say where they went.
    if moved is not None:
        raise moved
    return _load_name(name)


def _is_submodule(name: str) -> bool:
    here = pathlib.Path(__file__).parent
    return name.isidentifier() and ((here / name).is_dir() or (here / f"{name}.py").is_file())


def __dir__() -> list[str]:
    return sorted({*__all__, *globals()})
