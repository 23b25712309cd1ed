"""The standard flags and config parsing, public for custom launch scripts.

Model Garden's ``official/common/flags.py`` + ``train_utils.parse_configuration``:
defaults of the registered experiment, then each ``--config_file`` in order, then each
``--params_override`` (CSV ``a.b=1``, a YAML/JSON string, or a YAML file path); then
``validate()`` and ``lock()``. Nothing here imports torch.

Example (a custom launch script):
    >>> import argparse
    >>> parser = argparse.ArgumentParser()
    >>> define_flags(parser)
    >>> flags = parser.parse_args(["--experiment", "image_classification",
    ...                            "--params_override", "trainer.train_steps=10"])
    >>> parse_configuration(flags).trainer.train_steps
    10
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from torchgarden.modes import MODES

if TYPE_CHECKING:
    from torchgarden.config import ExperimentConfig

__all__ = ["define_flags", "parse_configuration", "MODES"]


def define_flags(
    parser: argparse.ArgumentParser, *, mode_default: str | None = None,
    modes: tuple[str, ...] = MODES,
) -> None:
    """Adds ``--experiment --mode --model_dir --config_file --params_override --import``.

    Args:
        parser: The parser (or subcommand parser) to add the flags to.
        mode_default: The default of ``--mode``. Defaults to None.
        modes: The modes ``--mode`` accepts, as its help lists them; empty for a command
            that reads no mode (the flag is still accepted, and ignored). Defaults to
            all of ``MODES``.
    """
    parser.add_argument("--experiment", help="registered experiment name (see `list`).")
    mode_help = (f"one of {', '.join(modes)}" if modes
                 else "accepted and ignored: the config does not depend on the mode")
    parser.add_argument(
        "--mode",
        default=mode_default,
        help=mode_help + (f" (default {mode_default})" if mode_default else ""),
    )
    parser.add_argument("--model_dir", help="directory for checkpoints, summaries, params.yaml.")
    parser.add_argument(
        "--config_file",
        action="append",
        default=[],
        help="YAML/JSON config file applied over the defaults; repeat to apply several in order.",
    )
    parser.add_argument(
        "--params_override",
        action="append",
        default=[],
        help="overrides applied last: 'a.b=1,c=[1,2]', a YAML/JSON string, or a YAML path.",
    )
    parser.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="MODULE",
        help="module (or .py file) to import first so it can register experiments/tasks.",
    )


def parse_configuration(
    flags: argparse.Namespace | Any, *, lock_return: bool = True, base_file: str | None = None
) -> ExperimentConfig:
    """Builds the validated (and locked) experiment config from parsed ``flags``.

    ``flags`` needs ``experiment``, and optionally ``config_file`` (list),
    ``params_override`` (str or list) and ``imports`` (list of modules to import first).

    Args:
        flags: The parsed flags.
        lock_return: Lock the returned config. Defaults to True.
        base_file: A resolved config (a model_dir's ``params.yaml``) applied right after
            the experiment's defaults; with it, ``--experiment`` may be left out.
            Defaults to None.

    Raises:
        ConfigError / RegistryError: With a one-line message naming the problem.
    """
    from torchgarden.config.notices import collect_notices

    with collect_notices() as notes:
        params = _build_params(flags, base_file)
    for note in notes:  # Model Garden keys read differently: said once, before anything runs
        print(f"torchgarden: note: {note}", file=sys.stderr)
    if lock_return:
        params.lock()
    return params


def _override_with_file(params: ExperimentConfig, path: str) -> None:
    """Applies one ``--config_file``; a file of a Model Garden family torchgarden does not
    have (Mask R-CNN, video) is refused naming that family, not its first unknown key."""
    from torchgarden.config import ConfigError, load_yaml_file
    from torchgarden.config.families import unprovided_family

    data = load_yaml_file(path)
    try:
        params.screen(data)
        params.override(data)
    except ConfigError as error:
        raise unprovided_family(path, data) or error from None


def _build_params(flags: argparse.Namespace | Any, base_file: str | None) -> ExperimentConfig:
    from torchgarden import registry
    from torchgarden.config import ConfigError, ExperimentConfig, load_yaml_file
    from torchgarden.config.overrides import parse_override

    for module in getattr(flags, "imports", None) or []:
        registry.import_user_module(module)
    if not (getattr(flags, "experiment", None) or base_file):
        raise ConfigError("the flag --experiment must be specified (see `torchgarden list`).")
    params = (
        registry.get_experiment(flags.experiment) if getattr(flags, "experiment", None)
        else ExperimentConfig()
    )
    if base_file is not None:
        try:
            base = load_yaml_file(base_file)
            if getattr(flags, "experiment", None):
                params.override(base)
            else:
                params = ExperimentConfig.from_dict(base)
        except ConfigError as e:
            message = str(e) if base_file in str(e) else f"{base_file}: {e}"
            raise type(e)(message, key=e.key) from None
    for path in getattr(flags, "config_file", None) or []:
        _override_with_file(params, path)
    overrides = getattr(flags, "params_override", None) or []
    if isinstance(overrides, str):
        overrides = [overrides]
    for text in overrides:
        if text:
            data = parse_override(text)
            params.screen(data)
            params.override(data)
    return params.validate()
