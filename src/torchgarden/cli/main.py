"""``torchgarden`` / ``python -m torchgarden``: train, eval, list, config, export, report.

``torchgarden --help`` and ``torchgarden list`` do not import torch.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import signal
import sys
import traceback
from collections.abc import Sequence

from torchgarden.cli import export as export_cli
from torchgarden.cli import report as report_cli
from torchgarden.cli.flags import define_flags, parse_configuration
from torchgarden.modes import check_mode

__all__ = ["main", "build_parser", "EXIT_USAGE", "EXIT_PREEMPTED"]

#: Exit status for bad input (config, flags, data, checkpoints): nothing was trained.
EXIT_USAGE = 2
#: Exit status after a preemption checkpoint, so a scheduler can requeue the job.
EXIT_PREEMPTED = 143


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="torchgarden",
        description="Config-driven PyTorch training in the style of TF Model Garden.",
    )
    parser.add_argument("--verbose", action="store_true", help="show tracebacks and debug logs.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    train = sub.add_parser("train", help="train (and evaluate) an experiment.")
    define_flags(train, mode_default="train_and_eval")
    train.add_argument("--verbose", action="store_true", default=argparse.SUPPRESS)

    evaluate = sub.add_parser("eval", help="evaluate the latest checkpoint of --model_dir.")
    define_flags(evaluate, mode_default="eval")
    evaluate.add_argument("--verbose", action="store_true", default=argparse.SUPPRESS)

    lister = sub.add_parser("list", help="list registered experiments.")
    lister.add_argument("--import", dest="imports", action="append", default=[],
                        metavar="MODULE", help="module to import first.")

    config = sub.add_parser("config", help="print the resolved config as YAML.")
    define_flags(config)
    config.add_argument("--verbose", action="store_true", default=argparse.SUPPRESS)
    export_cli.add_parsers(sub)
    report_cli.add_parser(sub)
    return parser


class _UsageError(Exception):
    """Bad input found before anything was trained."""


def _fail(message: str) -> int:
    print(f"torchgarden: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def _input_errors() -> tuple[type[BaseException], ...]:
    from torchgarden.config import ConfigError
    from torchgarden.registry import RegistryError

    errors: list[type[BaseException]] = [
        ConfigError, RegistryError, ValueError, KeyError, FileNotFoundError, PermissionError,
        NotADirectoryError, IsADirectoryError, TypeError, ImportError, _UsageError,
    ]
    if "torchgarden.checkpoint" in sys.modules:
        from torchgarden.checkpoint import CheckpointError

        errors.append(CheckpointError)
    return tuple(errors)


def _preempted() -> type[BaseException]:
    if "torchgarden.runtime.preemption" in sys.modules:
        return sys.modules["torchgarden.runtime.preemption"].Preempted
    return _NeverRaised


class _NeverRaised(Exception):
    """Stands in for ``Preempted`` before the runtime (and torch) is imported."""


def _message(error: BaseException) -> str:
    text = str(error.args[0]) if isinstance(error, KeyError) and error.args else str(error)
    return " ".join(text.split()) or type(error).__name__


def _command_list(args: argparse.Namespace) -> int:
    from torchgarden import registry

    for module in args.imports:
        registry.import_user_module(module)
    for name in registry.list_experiments():
        print(name)
    return 0


def _command_config(args: argparse.Namespace) -> int:
    params = parse_configuration(args)
    sys.stdout.write(params.to_yaml())
    return 0


def _check_model_dir(model_dir: str | None) -> str:
    if not model_dir:
        raise _UsageError("--model_dir is required: the directory for checkpoints and summaries.")
    if os.path.exists(model_dir) and not os.path.isdir(model_dir):
        raise _UsageError(f"--model_dir {model_dir} exists and is not a directory.")
    parent = os.path.dirname(os.path.abspath(model_dir))
    probe = model_dir if os.path.isdir(model_dir) else parent
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        raise _UsageError(
            f"--model_dir {model_dir} cannot be created: {probe} is a file, not a directory; "
            "choose a path under a directory."
        )
    if not os.access(probe, os.W_OK):
        raise _UsageError(f"--model_dir {model_dir} is not writable (check permissions of {probe}).")
    return model_dir


def _remove_if_new_and_untrained(model_dir: str, existed: bool) -> None:
    """Removes a model_dir this run created, unless it already holds a checkpoint."""
    if existed or not os.path.isdir(model_dir):
        return
    if not any(name.startswith("ckpt-") for name in os.listdir(model_dir)):
        shutil.rmtree(model_dir, ignore_errors=True)


def _command_run(args: argparse.Namespace) -> int:
    check_mode(args.mode, flag="--mode")
    model_dir = _check_model_dir(args.model_dir)
    params = parse_configuration(args)
    existed = os.path.isdir(model_dir)

    from torchgarden import registry
    from torchgarden.loop.logs import to_host
    from torchgarden.runtime import setup_runtime, teardown_runtime
    from torchgarden.train_lib import run_experiment

    runtime = setup_runtime(params.runtime)
    try:
        task = registry.get_task(params.task, logging_dir=model_dir)
        _, eval_logs = run_experiment(
            task=task, mode=args.mode, params=params, model_dir=model_dir, runtime=runtime
        )
    except _input_errors():
        _remove_if_new_and_untrained(model_dir, existed)
        raise
    finally:
        teardown_runtime(runtime)
    if runtime.is_chief:
        print(f"torchgarden: done. Results in {os.path.abspath(model_dir)} "
              f"(TensorBoard: tensorboard --logdir {model_dir})", flush=True)
        shown = {k: v for k, v in to_host(eval_logs).items() if isinstance(v, (int, float))}
        if shown:
            print("torchgarden: final eval: " + ", ".join(
                f"{k}={v:.4f}" for k, v in shown.items()), flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the process exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    handlers = {"list": _command_list, "config": _command_config,
                "train": _command_run, "eval": _command_run, **export_cli.COMMANDS,
                **report_cli.COMMANDS}
    try:
        return handlers[args.command](args)
    except _preempted() as preempted:
        print(f"torchgarden: {preempted}; exiting with status {preempted.exit_code} so the job "
              "can be requeued.", file=sys.stderr)
        return preempted.exit_code
    except KeyboardInterrupt:
        print("torchgarden: interrupted.", file=sys.stderr)
        return 128 + signal.SIGINT
    except Exception as error:  # Bad input is one line and exit 2; the rest is a bug.
        if isinstance(error, _input_errors()):
            if args.verbose:
                traceback.print_exc()
            return _fail(_message(error))
        raise
