"""Plug-ins: the only modules a config may cause to be imported.

When a `_type: module.QualName` key names a config class that is not defined yet,
two kinds of module may define it, and nothing else is ever imported:

* a module inside torchgarden itself (a name starting with `torchgarden.`), such as
  the built-in experiment configs in `torchgarden.experiments`;
* the modules that installed packages declare in the `torchgarden.experiments`
  entry-point group (the registry loads the same group to list experiments; torchgarden
  declares its own built-ins there too, and its tasks in `torchgarden.tasks`).

This module sits below both `config` and `registry` and imports neither (nor torch).
"""

from __future__ import annotations

import importlib
import logging

__all__ = ["ENTRY_POINT_GROUP", "OWN_PACKAGE", "TASK_ENTRY_POINT_GROUP", "import_own_module",
           "load_entry_points"]

_logger = logging.getLogger("torchgarden")

ENTRY_POINT_GROUP = "torchgarden.experiments"
"""The entry-point group whose modules register experiments (and define their configs)."""

TASK_ENTRY_POINT_GROUP = "torchgarden.tasks"
"""The entry-point group whose modules register tasks (may import torch; loaded on demand)."""

OWN_PACKAGE = "torchgarden"
"""The only package whose modules a class name read from a config may import."""

_loaded_groups: set[str] = set()


def import_own_module(class_name: str) -> None:
    """Imports the torchgarden module that defines `class_name` (`module.QualName`), if any.

    Candidate modules are tried from the longest dotted prefix down (a qualified name may
    hold dots of nested classes) and one that does not exist is skipped; a name outside
    torchgarden, or with a part that is not a plain identifier, imports nothing.
    """
    parts = class_name.split(".")
    # Dunder modules (`torchgarden.__main__` runs the CLI) never define config classes.
    if parts[0] != OWN_PACKAGE or not all(p.isidentifier() and p[:2] != "__" for p in parts):
        return
    for end in range(len(parts) - 1, 1, -1):
        module = ".".join(parts[:end])
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as e:
            if e.name is not None and (module + ".").startswith(e.name + "."):
                continue  # No such module (or package): try a shorter prefix.
            raise
        return


def load_entry_points(group: str = ENTRY_POINT_GROUP) -> None:
    """Imports every module declared in the entry-point ``group``, once.

    A plug-in that fails to import is logged as a warning and skipped, so a broken
    plug-in never breaks every other experiment.
    """
    if group in _loaded_groups:
        return
    _loaded_groups.add(group)
    from importlib.metadata import entry_points  # Slow to import; needed only here.

    for ep in entry_points(group=group):
        try:
            ep.load()
        except Exception as e:  # A broken plug-in must not break every other experiment.
            _logger.warning("could not load %s from %s: %s", group, ep.value, e)
