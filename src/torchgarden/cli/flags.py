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
from collections.abc import Mapping
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


def _apply_layers(params: ExperimentConfig, files: list[str],
                  texts: list[str]) -> ExperimentConfig:
    """Applies each ``--config_file``, then each ``--params_override``, and validates. When that
    fails, the first refusal is the one that makes the rest moot: a file of a Model Garden
    family torchgarden does not have (Mask R-CNN, video) names the family, and a backbone no
    library builds that the layers choose in the end (`Config.screen`) comes before any other
    key."""
    from torchgarden.config import ConfigError, load_yaml_file
    from torchgarden.config.families import UnprovidedFamilyError, unprovided_family
    from torchgarden.config.overrides import parse_override

    layers = [(path, load_yaml_file(path)) for path in files]
    layers += [("", parse_override(text)) for text in texts if text]
    start = params.copy()
    try:
        for path, data in layers:
            try:
                params.override(data)
            except ConfigError:
                family = unprovided_family(path, data) if path else None
                if family is not None:
                    raise family from None
                raise
        return params.validate()
    except ConfigError as error:
        if isinstance(error, UnprovidedFamilyError):
            raise
        merged: dict[str, Any] = {}
        for _, data in layers:
            _merge_dotted(merged, data)
        start.screen(merged)
        raise


def _merge_dotted(into: dict[str, Any], data: Any) -> None:
    """Merges an override into one nested mapping (dotted keys nested; later values win)."""
    for key, value in data.items():
        head, _, rest = str(key).partition(".")
        value = {rest: value} if rest else value
        if isinstance(value, Mapping):
            node = into.get(head)
            if not isinstance(node, dict):
                node = into[head] = {}
            _merge_dotted(node, value)
        else:
            into[head] = value


def _build_params(flags: argparse.Namespace | Any, base_file: str | None) -> ExperimentConfig:
    from torchgarden import registry
    from torchgarden.config import ConfigError, ExperimentConfig, load_yaml_file

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
    overrides = getattr(flags, "params_override", None) or []
    return _apply_layers(params, list(getattr(flags, "config_file", None) or []),
                         [overrides] if isinstance(overrides, str) else list(overrides))
