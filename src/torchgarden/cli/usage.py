"""A command line argparse cannot read: one line with the closest valid spelling.

argparse answers an unknown flag with the program's usage and exits; torchgarden answers
every bad command line as it answers bad config: one ``torchgarden: error:`` line, exit
status 2, and a did-you-mean -- the subcommand's flag (``--model-dir`` -> ``--model_dir``),
or, for a config key given as a flag (``--train_steps 5``), the ``--params_override``
that sets it. Nothing here imports torch.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from typing import Any

from torchgarden.utils.suggest import closest, did_you_mean

__all__ = ["CommandLineError", "Parser", "explain_unknown"]

_INVALID_CHOICE = re.compile(r"invalid choice: '([^']*)'")


class CommandLineError(Exception):
    """A command line argparse could not read; the message is one line."""


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors raise :class:`CommandLineError` (with a
    did-you-mean for a misspelt subcommand) instead of printing the usage and exiting."""

    def error(self, message: str) -> Any:  # type: ignore[override]
        found = _INVALID_CHOICE.search(message)
        if found and self._subparsers is not None:
            choices = [c for action in self._subparsers._group_actions
                       for c in getattr(action, "choices", None) or ()]
            message = (f"unknown command {found.group(1)!r}; commands: "
                       f"{', '.join(choices)}{did_you_mean(found.group(1), choices, style='clause')}")
        elif " " in self.prog:  # A subcommand's parser: name it.
            message = f"`{self.prog}`: {message}"
        raise CommandLineError(" ".join(message.split()))


def explain_unknown(parser: argparse.ArgumentParser, args: argparse.Namespace,
                    extras: Sequence[str]) -> str:
    """The one line for the arguments ``extras`` that ``parser`` did not recognize.

    Args:
        parser: The top-level parser.
        args: What it did parse (``args.command`` picks the subcommand's flags).
        extras: The unrecognized arguments, in order.
    """
    command = getattr(args, "command", None)
    sub = _subcommand(parser, command)
    prog = sub.prog if sub is not None else parser.prog
    flags = sorted(option for action in (sub or parser)._actions
                   for option in action.option_strings if option.startswith("--"))
    first = extras[0]
    if not first.startswith("-"):
        hint = (f"; did you mean --model_dir {first}?"
                if "--model_dir" in flags and not getattr(args, "model_dir", None) else "")
        return f"`{prog}` takes no argument {first!r}{hint} (see `{prog} --help`)."
    name, _, value = first.lstrip("-").partition("=")
    if not value and len(extras) > 1 and not extras[1].startswith("-"):
        value = extras[1]
    spelt = "--" + name.replace("-", "_")
    if spelt in flags:
        hint = f"; did you mean {spelt}?"
    else:
        keys = _config_keys(args, name.replace("-", "_"))
        if keys:
            hint = (f"; {name.replace('-', '_')} is a config key: use --params_override "
                    f"{keys[0]}={value or '...'}")
        else:
            match = closest(spelt, flags)
            hint = f"; did you mean {match}?" if match else f"; flags: {', '.join(flags)}"
    return f"`{prog}` has no flag {first.partition('=')[0]}{hint}"


def _subcommand(parser: argparse.ArgumentParser,
                command: str | None) -> argparse.ArgumentParser | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and command in action.choices:
            return action.choices[command]
    return None


def _config_keys(args: argparse.Namespace, name: str) -> list[str]:
    """The dotted config keys ending in ``name`` (of ``--experiment``'s config when it
    names a registered one, else of the base ``ExperimentConfig``)."""
    from torchgarden.config import ExperimentConfig
    from torchgarden.config.base import nested_paths

    config: Any = ExperimentConfig()
    experiment = getattr(args, "experiment", None)
    if experiment:
        try:
            from torchgarden import registry

            for module in getattr(args, "imports", None) or []:
                registry.import_user_module(module)
            config = registry.get_experiment(experiment)
        except Exception:  # An unknown experiment is reported once the flags are fixed.
            pass
    return nested_paths(config, name)
