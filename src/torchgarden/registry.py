"""Registries: experiment name -> config factory, task config class -> Task class.

Model Garden keeps two registries (``exp_factory`` and ``task_factory``); torchgarden
keeps both in this one module. Registration happens when a module is imported, so a
launcher imports a ``registry_imports`` module (``torchgarden train --import pkg.mod``)
or an installed package declares an entry point in the ``torchgarden.experiments``
group (and, for tasks that should load only when needed, ``torchgarden.tasks``). The
built-ins are registered the same way, by torchgarden's own entry points. This module
does not import torch.

Example:
    >>> from torchgarden import ExperimentConfig, register_experiment
    >>> @register_experiment("my_experiment")
    ... def my_experiment() -> ExperimentConfig:
    ...     return ExperimentConfig()
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import pathlib
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from torchgarden.config.plugins import (
    ENTRY_POINT_GROUP,
    TASK_ENTRY_POINT_GROUP,
    load_entry_points,
)
from torchgarden.utils.suggest import did_you_mean

if TYPE_CHECKING:
    from torchgarden.config import ExperimentConfig, TaskConfig
    from torchgarden.core.task import Task

__all__ = [
    "register_experiment",
    "get_experiment",
    "list_experiments",
    "register_task",
    "get_task",
    "get_task_cls",
    "import_user_module",
    "load_entry_points",
    "ENTRY_POINT_GROUP",
    "TASK_ENTRY_POINT_GROUP",
    "RegistryError",
]

_EXPERIMENTS: dict[str, Callable[[], ExperimentConfig]] = {}
_TASKS: dict[type, Callable[..., Task]] = {}

F = TypeVar("F", bound=Callable[..., Any])


class RegistryError(LookupError):
    """An unknown or duplicate registry key; the message names the closest match."""


def register_experiment(name: str) -> Callable[[F], F]:
    """Registers a zero-argument factory returning an ``ExperimentConfig`` under ``name``.

    Names may be hierarchical (``"retinanet/coco"``). Each ``get_experiment`` call runs
    the factory again, so callers always receive a fresh, mutable config.

    Args:
        name: The experiment name used by ``--experiment``.

    Returns:
        A decorator that registers and returns the factory unchanged.

    Raises:
        RegistryError: If ``name`` is already registered.
    """
    if not isinstance(name, str) or not name:
        raise RegistryError(f"experiment name must be a non-empty string, got {name!r}.")

    def decorator(factory: F) -> F:
        if name in _EXPERIMENTS and _EXPERIMENTS[name] is not factory:
            raise RegistryError(f"experiment '{name}' is registered more than once.")
        _EXPERIMENTS[name] = factory
        return factory

    return decorator


def list_experiments() -> list[str]:
    """Returns the sorted names of all registered experiments (built-ins included)."""
    load_entry_points()
    return sorted(_EXPERIMENTS)


def get_experiment(name: str) -> ExperimentConfig:
    """Builds a fresh config for the registered experiment ``name``.

    Raises:
        RegistryError: If no experiment of that name is registered; the message lists
            what is registered and the closest match.
    """
    load_entry_points()
    try:
        factory = _EXPERIMENTS[name]
    except KeyError:
        known = sorted(_EXPERIMENTS)
        raise RegistryError(
            f"unknown experiment '{name}'.{did_you_mean(name, known, cutoff=0.5)} Registered: "
            f"{', '.join(known) or '(none: reinstall torchgarden to declare its entry points)'}. "
            "Register yours with @register_experiment and pass --import <your_module>."
        ) from None
    return factory()


def register_task(config_cls: type) -> Callable[[F], F]:
    """Registers a ``Task`` subclass (or any callable building one) for ``config_cls``.

    Lookup is by exact config class, as in Model Garden: a subclass of a registered
    config needs its own registration.

    Raises:
        RegistryError: If ``config_cls`` already has a task.
    """
    if not isinstance(config_cls, type):
        raise RegistryError(
            f"register_task expects a TaskConfig class, got {type(config_cls).__name__}."
        )

    def decorator(task_cls: F) -> F:
        if config_cls in _TASKS and _TASKS[config_cls] is not task_cls:
            raise RegistryError(f"a task is already registered for {config_cls.__qualname__}.")
        _TASKS[config_cls] = task_cls
        return task_cls

    return decorator


def get_task_cls(config_cls: type) -> Callable[..., Task]:
    """Returns the task class registered for ``config_cls`` (exact class match)."""
    load_entry_points()
    if config_cls not in _TASKS:
        load_entry_points(TASK_ENTRY_POINT_GROUP)  # The built-in tasks import torch.
    try:
        return _TASKS[config_cls]
    except KeyError:
        known = sorted(c.__qualname__ for c in _TASKS)
        raise RegistryError(
            f"no task is registered for config class {config_cls.__qualname__}."
            f"{did_you_mean(config_cls.__qualname__, known, cutoff=0.5)} Registered task configs: "
            f"{', '.join(known) or '(none)'}. Decorate your Task with "
            f"@register_task({config_cls.__qualname__}) and make sure its module is imported."
        ) from None


def get_task(task_config: TaskConfig, logging_dir: str | None = None, **kwargs: Any) -> Task:
    """Builds the task registered for ``type(task_config)``.

    Args:
        task_config: A ``TaskConfig`` (subclass) instance.
        logging_dir: Directory the task may write to (usually ``model_dir``).
        **kwargs: Passed to the task constructor.
    """
    return get_task_cls(type(task_config))(task_config, logging_dir=logging_dir, **kwargs)


def import_user_module(name: str) -> None:
    """Imports ``name`` (``pkg.registry_imports`` or a ``.py`` path) so it can register.

    A dotted name is looked up the way ``python -m`` looks: the current directory first,
    then ``sys.path``. A ``.py`` file is imported as the module named after its file
    (``my_project.py`` -> ``my_project``), the name its classes have when the same file
    is run as a script.

    Raises:
        RegistryError: If the module cannot be found or imported; the message names it
            (and, for a syntax error, the file and line).
    """
    try:
        if name.endswith(".py"):
            _import_file(name)
            return
        _put_current_directory_first()
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name is None or not (name + ".").startswith(e.name + "."):
                raise  # The module exists; something it imports does not.
            raise RegistryError(
                f"--import {name}: module not found ({e.name}) in the current directory "
                f"{os.getcwd()} or on sys.path;{_where_it_is(name)} check the name and that "
                "its package is installed or on PYTHONPATH."
            ) from e
    except SyntaxError as e:
        raise RegistryError(
            f"--import {name}: {e.filename}, line {e.lineno}: {e.msg}."
        ) from e
    except ModuleNotFoundError as e:
        raise RegistryError(
            f"--import {name}: importing it failed: {e} (install it, or fix the import)."
        ) from e


def _import_file(name: str) -> None:
    path = pathlib.Path(name)
    if not path.is_file():
        raise RegistryError(f"--import {name}: file not found.")
    if not path.stem.isidentifier():
        raise RegistryError(
            f"--import {name}: '{path.stem}' is not a valid module name; rename the file "
            "(letters, digits and underscores)."
        )
    loaded = sys.modules.get(path.stem)
    if loaded is not None and getattr(loaded, "__file__", None) and os.path.samefile(
        loaded.__file__, path
    ):
        return  # Already imported (a second --import in the same process).
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[path.stem]
        raise


def _put_current_directory_first() -> None:
    # `python -m` puts the current directory first on sys.path; a console script puts
    # its own bin directory there instead.
    cwd = os.getcwd()
    if not any(entry in ("", cwd) for entry in sys.path[:1]) and cwd not in sys.path:
        sys.path.insert(0, cwd)


def _where_it_is(name: str) -> str:
    """`` it is under ./examples: run from there or set PYTHONPATH=examples;`` or ``""``."""
    top = name.partition(".")[0]
    try:
        folders = sorted(e.path for e in os.scandir(".") if e.is_dir() and e.name[0] != ".")
    except OSError:
        return ""
    for folder in folders:
        if os.path.isdir(os.path.join(folder, top)) or os.path.isfile(
            os.path.join(folder, top + ".py")
        ):
            where = os.path.normpath(folder)
            return f" it is under {where}/: run from there or set PYTHONPATH={where};"
    return ""
