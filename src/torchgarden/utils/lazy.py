"""Packages whose public names load on first access (their modules import torch)."""

from __future__ import annotations

import ast
import importlib
import pathlib
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["lazy_names"]


def lazy_names(package: str, init_file: str) -> tuple[Callable[[str], Any], list[str]]:
    """``(__getattr__, __all__)`` of ``package``: the names its ``__init__`` imports under
    ``if TYPE_CHECKING:`` (the one list of them), each imported from its module on first
    access and kept.

    Example (in a package's ``__init__.py``):
        >>> if TYPE_CHECKING:
        ...     from mypkg.heavy import Model
        >>> __getattr__, __all__ = lazy_names(__name__, __file__)
    """
    tree = ast.parse(pathlib.Path(init_file).read_text(encoding="utf-8"))
    block = next(node for node in tree.body if isinstance(node, ast.If))
    sources = {alias.asname or alias.name: node.module for node in block.body
               if isinstance(node, ast.ImportFrom) and node.module for alias in node.names}

    def load(name: str) -> Any:
        module = sources.get(name)
        if module is None:
            raise AttributeError(f"module '{package}' has no attribute '{name}'")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    return load, sorted(sources)
