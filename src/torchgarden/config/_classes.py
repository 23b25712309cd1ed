"""Config classes by name (`_type` keys) and how config messages print types and values.

Each `Config` subclass is recorded under `module.QualName` when it is defined; `as_dict`
writes that name under `_type` for a field holding a strict subclass of its annotated
class, and `override` looks it up here, importing only what `plugins` allows (any other
unknown name is an error asking the user to import the defining module).
"""

from __future__ import annotations

import reprlib
import sys
import types
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

from torchgarden.config import plugins as _plugins
from torchgarden.config.errors import ConfigError, ConfigTypeError
from torchgarden.utils.suggest import did_you_mean

TYPE_KEY = "_type"
"""Reserved mapping key naming the Config class of that mapping."""

_REGISTRY: dict[str, type] = {}
ROOT: type | None = None
"""`Config`, the base class of all configs (set once by `base.py`)."""


def key_of(cls: type) -> str:
    """Returns the registry name of a config class: `module.QualName`.

    A class defined in the script Python runs (`__main__`) is named after that script's
    importable name: `python my_project.py` writes `my_project.MyTaskConfig`, the name
    `torchgarden train --import my_project.py` gives the same class, so a run started
    from the script resumes under the command line and the other way round.
    """
    return f"{_module_name(cls.__module__)}.{cls.__qualname__}"


def _module_name(module: str) -> str:
    if module != "__main__":
        return module
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name and not spec.name.endswith("__main__"):
        return spec.name  # python -m pkg.module
    path = getattr(main, "__file__", None)
    stem = Path(path).stem if path else ""
    return stem if stem.isidentifier() else module


def register(cls: type) -> None:
    """Records `cls` under `key_of(cls)`; a redefinition replaces the entry."""
    _REGISTRY[key_of(cls)] = cls


def is_config_class(tp: Any) -> bool:
    return isinstance(tp, type) and ROOT is not None and issubclass(tp, ROOT)


def simple_names() -> dict[str, type]:
    """Registered classes by bare class name (for resolving local annotations)."""
    return {cls.__name__: cls for cls in _REGISTRY.values()}


def lookup(name: Any, *, path: str) -> type:
    """Returns the config class a `_type` value (at dotted key `path`) names.

    Raises:
        ConfigError: If `name` is not a string or no such class was imported.
    """
    check_class_name(name, path)
    if name not in _REGISTRY:  # a torchgarden module or an installed plug-in may define it
        _plugins.import_own_module(name)
    if name not in _REGISTRY:
        _plugins.load_entry_points()
    cls = _REGISTRY.get(name) or _main_script_class(name)
    if cls is None:
        module = name.rpartition(".")[0] or name
        raise ConfigError(
            f"{path}: config class {name!r} is not imported; import the module that "
            f"defines it first (command line: --import {module})"
            f"{did_you_mean(name, _REGISTRY, style='clause')}",
            key=path,
        )
    return cls


def check_class_name(name: Any, path: str) -> None:
    """Raises a ``ConfigTypeError`` unless the `_type` value at ``path`` is a string."""
    if not isinstance(name, str):
        raise ConfigTypeError(
            f"{path} expects a class name 'module.Class', received {show(name)}", key=path
        )


def _main_script_class(name: str) -> type | None:
    """`__main__.X` (written before scripts were named by their file) -> the one imported X."""
    if not name.startswith("__main__."):
        return None
    suffix = "." + name.partition(".")[2]
    found = [cls for key, cls in _REGISTRY.items() if key.endswith(suffix)]
    return found[0] if len(found) == 1 else None


NoneType = type(None)
_UNIONS = (Union, types.UnionType)


def format_type(tp: Any) -> str:
    """Returns an annotation as a user would write it: `int`, `float | None`, `list[int]`."""
    if tp is NoneType:
        return "None"
    origin = get_origin(tp)
    args = get_args(tp)
    if origin in _UNIONS:
        parts = [format_type(arg) for arg in args if arg is not NoneType]
        return " | ".join(parts + (["None"] if NoneType in args else []))
    if origin is Literal:
        return f"one of {', '.join(repr(arg) for arg in args)}"
    if origin is not None:
        name = getattr(origin, "__name__", str(origin))
        if not args:
            return name
        return f"{name}[{', '.join('...' if a is Ellipsis else format_type(a) for a in args)}]"
    if isinstance(tp, type):
        return tp.__name__
    return str(tp).replace("typing.", "")


_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxlist, _REPR.maxtuple, _REPR.maxdict = 2, 4, 4, 4
_REPR.maxstring, _REPR.maxother = 40, 40


def show(value: Any) -> str:
    """Returns `repr(value) (type)` for error messages, shortened to one line.

    The repr is bounded (`reprlib`): a value built from YAML aliases may be huge, and
    a message must never expand it.
    """
    if is_config_class(type(value)):
        return f"a {type(value).__name__}"
    text = _REPR.repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{text} ({type(value).__name__})"
