"""``torchgarden port FILE.yaml [--experiment NAME]``: what a Model Garden YAML becomes here.

Prints the torchgarden config the file resolves to (YAML, over the experiment's defaults)
and then, as YAML comments, a table of every leaf key of the file:

* ``honoured``: read as Model Garden reads it, under the same name;
* ``mapped``: read under another key or value spelling (which one is said);
* ``ignored``: accepted and dropped, with why it has no effect here;
* ``refused``: not accepted, with why and the closest valid key.

Keys are judged one by one, so one refused key does not hide the others; a key that
``validate()`` refuses is dropped and the rest validated again. Exit status 0 when nothing
is refused, else 2 (the config is then not printed). Without ``--experiment`` the
experiment comes from the file: a ``--experiment_type=NAME`` comment (as Model Garden's
YAMLs carry), a directory named like a registered experiment, else the one experiment whose
``task`` section takes every ``task`` key of the file. A file of a Model Garden family
torchgarden does not have (Mask R-CNN, video; `torchgarden.config.families`) is refused in
one line naming the family. Nothing here imports torch.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["COMMANDS", "PortRow", "add_parser", "classify", "command_port"]

_STATUSES = ("honoured", "mapped", "ignored", "refused")


@dataclasses.dataclass(frozen=True)
class PortRow:
    """How one leaf key of a Model Garden YAML is read."""

    key: str
    """The dotted key as the file sets it."""
    status: str
    """``honoured``, ``mapped``, ``ignored`` or ``refused``."""
    detail: str = ""
    """What it became, why it is ignored or refused."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Adds the ``port`` subcommand to ``sub``."""
    port = sub.add_parser(
        "port", help="show what a Model Garden experiment YAML becomes: the resolved config "
                     "and every key honoured / mapped / ignored / refused.")
    port.add_argument("file", metavar="FILE.yaml", help="a Model Garden experiment YAML.")
    port.add_argument("--experiment", help="the registered experiment the file overrides "
                                           "(default: told by the file, see `torchgarden list`).")
    port.add_argument("--import", dest="imports", action="append", default=[],
                      metavar="MODULE", help="module to import first (registers experiments).")
    port.add_argument("--verbose", action="store_true", default=argparse.SUPPRESS)


def command_port(args: argparse.Namespace) -> int:
    """Prints the resolved config and the key table; 0 if nothing is refused, else 2."""
    from torchgarden import registry
    from torchgarden.config import load_yaml_file
    from torchgarden.config.families import experiment_types, unprovided_family

    for module in args.imports:
        registry.import_user_module(module)
    data = load_yaml_file(args.file)
    family = unprovided_family(args.file, data)
    if family is not None and not args.experiment:
        raise family
    name = args.experiment or experiment_for(args.file, data)
    named = experiment_types(args.file)
    over = (f"read over {name}: --experiment_type={named[0]} is not a torchgarden experiment; "
            "pass --experiment NAME to choose (`torchgarden list`)"
            if not args.experiment and named and name not in named else "")
    rows, params = classify(registry.get_experiment(name), data)
    refused = [row for row in rows if row.status == "refused"]
    if family is not None and refused:
        raise family
    if params is not None and not refused:
        sys.stdout.write(params.to_yaml())
    print(f"# {args.file} over --experiment {name}: "
          + ", ".join(f"{sum(r.status == s for r in rows)} {s}" for s in _STATUSES))
    width = max((len(row.key) for row in rows), default=0)
    for row in rows:
        print(f"# {row.key:<{width}}  {row.status:<8}  {row.detail}".rstrip())
    sys.stdout.flush()
    if refused:
        first = refused[0]
        print(f"torchgarden: error: {args.file}: {len(refused)} key(s) refused; first: "
              f"{first.key}: {first.detail}{f' ({over})' if over else ''}", file=sys.stderr)
        return 2
    if over:
        print(f"torchgarden: note: {args.file} {over}", file=sys.stderr)
    return 0


COMMANDS = {"port": command_port}


def classify(base: Any, data: Mapping[str, Any]) -> tuple[list[PortRow], Any]:
    """Judges each leaf key of ``data`` over the config ``base`` (not changed).

    Returns:
        The rows, in the file's order (a problem of the whole config, naming no key of the
        file, last), and the resolved, validated config; None when anything is refused.
    """
    leaves = dict(_leaves(data))
    rows: dict[str, PortRow] = {}
    for key, value in leaves.items():
        rows[key] = _judge(base.copy(), key, value)
    for _ in range(len(leaves) + 1):
        kept = {k: v for k, v in leaves.items() if rows[k].status != "refused"}
        error, notes = _resolve(base.copy(), kept)
        if not isinstance(error, Exception):
            for note in notes:  # Read beside its siblings, a key may say otherwise.
                if note.key in rows:
                    rows[note.key] = PortRow(note.key, note.action, note.detail)
            return [_with_use(row, error) for row in rows.values()], error
        culprit = _culprit(getattr(error, "key", None), kept)
        message = " ".join(str(error).split())
        if culprit is None:  # A problem of the whole config, not of one key of the file.
            rows[getattr(error, "key", None) or "(config)"] = PortRow(
                getattr(error, "key", None) or "(config)", "refused", message)
            return list(rows.values()), None
        rows[culprit] = PortRow(culprit, "refused", message)
    return list(rows.values()), None


def _judge(config: Any, key: str, value: Any) -> PortRow:
    """Applies ``key: value`` alone; its notices say mapped or ignored."""
    from torchgarden.config.notices import collect_notices

    try:
        with collect_notices() as notes:
            config.override({key: value})  # Dotted: the config nests it.
    except Exception as error:  # noqa: BLE001 - any refusal is a row of the table
        return PortRow(key, "refused", " ".join(str(error).split()) or type(error).__name__)
    if not notes:
        return PortRow(key, "honoured")
    note = notes[0]
    return PortRow(key, note.action, "; ".join(n.detail for n in notes))


def _resolve(config: Any, kept: Mapping[str, Any]) -> tuple[Any, list[Any]]:
    """The whole file (refused keys left out) over ``config``, validated and checked as the
    optimizer factory will, with its notices; the error instead of raising it."""
    from torchgarden.config.notices import collect_notices

    try:
        with collect_notices() as notes:
            config.override(dict(kept)).validate()
            config.trainer.optimizer_config.check_buildable()
    except Exception as error:  # noqa: BLE001 - reported as a refused row
        return error, []
    return config, notes


def _culprit(error_key: str | None, kept: Mapping[str, Any]) -> str | None:
    """The file's key an error names: the same key, one under it, or one above it."""
    if not error_key:
        return None
    for key in kept:
        if key == error_key or key.startswith(f"{error_key}.") or error_key.startswith(
                f"{key}."):
            return key
    return None


def _with_use(row: PortRow, config: Any) -> PortRow:
    """``row``, saying when its key sits in a one-of alternative that is not chosen."""
    from torchgarden.config.oneof import OneOfConfig

    if row.status != "honoured":
        return row
    node, path = config, []
    for part in row.key.split("."):
        if isinstance(node, OneOfConfig) and part != "type" and part != node.type:
            where = ".".join(path)
            return PortRow(row.key, row.status, f"inactive: {where}.type is {node.type!r}, "
                                                "as Model Garden reads it")
        node = getattr(node, part, None) if not isinstance(node, Mapping) else node.get(part)
        path.append(part)
        if node is None:
            break
    return row


def experiment_for(path: str, data: Mapping[str, Any]) -> str:
    """The registered experiment ``path`` is for, told by the file alone.

    Raises:
        ConfigError: When the file does not tell (listing the candidates).
    """
    from torchgarden import registry
    from torchgarden.config import ConfigError
    from torchgarden.config.families import experiment_types

    names = registry.list_experiments()
    for name in experiment_types(path):
        if name in names:
            return name
    parts = os.path.normpath(os.path.abspath(path)).split(os.sep)[:-1]
    in_path = [name for name in names if name in parts]
    if len(in_path) == 1:
        return in_path[0]
    task = {k: v for k, v in _leaves(data) if k.startswith("task.")}
    fits = [n for n in names if task and all(
        _judge(registry.get_experiment(n), k, v).status != "refused" for k, v in task.items())]
    if len(fits) == 1:
        return fits[0]
    candidates = fits or in_path or names
    raise ConfigError(f"{path}: cannot tell which experiment it overrides (it fits "
                      f"{', '.join(candidates)}); pass --experiment NAME (see `torchgarden list`)")


def _leaves(data: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """``(dotted key, value)`` of every leaf; a list or an empty mapping is a leaf."""
    if isinstance(data, Mapping) and data:
        for key, value in data.items():
            yield from _leaves(value, f"{prefix}.{key}" if prefix else str(key))
    elif prefix:
        yield prefix, data
