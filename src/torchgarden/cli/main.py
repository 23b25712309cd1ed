"""``torchgarden`` / ``python -m torchgarden``: train, eval, list, config, export, report,
convert.

``torchgarden --help`` and ``torchgarden list`` do not import torch.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import shutil
import signal
import sys
import threading
import traceback
from collections.abc import Sequence
from typing import Any

from torchgarden.cli import convert as convert_cli
from torchgarden.cli import export as export_cli
from torchgarden.cli import report as report_cli
from torchgarden.cli.flags import define_flags, parse_configuration
from torchgarden.modes import check_mode

__all__ = ["main", "build_parser", "EXIT_COLLECTIVE", "EXIT_DIVERGED", "EXIT_USAGE",
           "EXIT_PREEMPTED"]

#: Exit status for bad input (config, flags, data, checkpoints, a model_dir in use).
EXIT_USAGE = 2
#: Exit status when training diverged beyond recovery (loss NaN or above the bound).
EXIT_DIVERGED = 3
#: Exit status under torchrun when a collective with the other ranks failed or timed out
#: (``runtime.distributed_timeout``); ``torchrun --max-restarts`` restarts the job.
EXIT_COLLECTIVE = 4
#: Exit status after a preemption checkpoint, so a scheduler can requeue the job.
EXIT_PREEMPTED = 143
#: The modes each subcommand runs.
TRAIN_MODES = ("train", "train_and_eval", "train_and_post_eval", "continuous_train_and_eval")
EVAL_MODES = ("eval", "continuous_eval")


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
    convert_cli.add_parser(sub)
    return parser


_THREAD_EXCEPTHOOK = threading.excepthook


class _UsageError(Exception):
    """Bad input found before anything was trained."""


def _fail(message: str) -> int:
    print(f"torchgarden: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def _input_errors() -> tuple[type[BaseException], ...]:
    """Bad input and a bad environment: one line, exit 2."""
    from torchgarden.train_lib.experiment import bad_input_errors

    return (*bad_input_errors(), _UsageError)


def _diverged_errors() -> tuple[type[BaseException], ...]:
    """Training diverged beyond recovery: one line, exit 3."""
    errors: list[type[BaseException]] = [_NeverRaised]
    for module, name in (("torchgarden.callbacks.actions", "TrainingDivergedError"),
                         ("torchgarden.checkpoint.errors", "NonFiniteCheckpointError")):
        if module in sys.modules:
            errors.append(getattr(sys.modules[module], name))
    return tuple(errors)


def _preempted() -> type[BaseException]:
    if "torchgarden.runtime.preemption" in sys.modules:
        return sys.modules["torchgarden.runtime.preemption"].Preempted
    return _NeverRaised


class _NeverRaised(Exception):
    """Stands in for ``Preempted`` before the runtime (and torch) is imported."""


def _message(error: BaseException) -> str:
    if isinstance(error, OSError) and error.strerror and error.filename:
        text = f"{error.filename}: {error.strerror}"
    elif isinstance(error, KeyError) and error.args:
        text = str(error.args[0])
    else:
        text = str(error)
    worker = _WORKER_ERROR.match(text)
    if worker is not None:  # torch re-raises a DataLoader worker's error with its traceback.
        inner = worker["error"].strip()
        if isinstance(error, KeyError) and len(inner) > 1 and inner[0] == inner[-1] in "'\"":
            inner = inner[1:-1]  # KeyError's repr quotes
        text = f"{inner} (in DataLoader worker {worker['worker']})"
    return " ".join(text.split()) or type(error).__name__


#: How torch's ExceptionWrapper words an error raised in a DataLoader worker.
_WORKER_ERROR = re.compile(r"Caught \w+ in DataLoader worker process (?P<worker>\d+)\."
                           r".*Original Traceback.*\n\w+(?:\.\w+)*: (?P<error>.*?)\s*$",
                           re.DOTALL)


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


def _check_subcommand_mode(args: argparse.Namespace) -> None:
    check_mode(args.mode, flag="--mode")
    allowed = TRAIN_MODES if args.command == "train" else EVAL_MODES
    if args.mode not in allowed:
        other = "eval" if args.command == "train" else "train"
        raise _UsageError(
            f"`torchgarden {args.command}` runs --mode {' or '.join(allowed)}; --mode "
            f"{args.mode} is a mode of `torchgarden {other}`."
        )


def _command_run(args: argparse.Namespace) -> int:
    _check_subcommand_mode(args)
    params = _configuration(args, training=args.command == "train")
    from torchgarden.runtime.strategy import chief_of, resolve_strategy
    from torchgarden.train_lib.experiment import run_experiment

    try:  # It checks --model_dir and takes its lock before torch is imported.
        eval_logs = run_experiment(mode=args.mode, params=params, model_dir=args.model_dir)[1]
    except OSError as error:
        if error.filename or not args.model_dir:
            raise
        raise _UsageError(_write_failure(error, args.model_dir)) from error
    except RuntimeError as error:
        failure = _collective_failure(error, params.runtime.distributed_timeout)
        if failure is None:
            raise
        raise _CollectiveFailed(failure) from error
    if chief_of(resolve_strategy(params.runtime)):
        from torchgarden.loop.logs import to_host
        from torchgarden.utils.logs import flatten

        model_dir = args.model_dir
        print(f"torchgarden: done. Results in {os.path.abspath(model_dir)} "
              f"(TensorBoard: tensorboard --logdir {model_dir})", flush=True)
        shown = {k: v for k, v in flatten(to_host(eval_logs)).items()  # Sets, tasks: a/b.
                 if isinstance(v, (int, float))}
        if shown:
            print("torchgarden: final eval: " + ", ".join(
                f"{k}={v:.4f}" for k, v in shown.items()), flush=True)
    return 0


def _configuration(args: argparse.Namespace, *, training: bool) -> Any:
    """The flags' config; an evaluation starts from the config that trained ``--model_dir``."""
    saved = os.path.join(args.model_dir or "", "params.yaml")
    if training or not args.model_dir or not os.path.isfile(saved):
        if not training and args.model_dir and not getattr(args, "experiment", None):
            where = ("does not exist" if not os.path.exists(args.model_dir)
                     else "holds no params.yaml (no finished train loop)")
            raise _UsageError(f"--model_dir {args.model_dir} {where}: point it at a trained "
                              "run's directory, or name the config with --experiment.")
        return parse_configuration(args)
    params = parse_configuration(args, base_file=saved)
    print(f"torchgarden: config read from {saved} (then --config_file, --params_override).",
          flush=True)
    return params


class _CollectiveFailed(Exception):
    """A collective with the other torchrun ranks failed or timed out (one line, exit 4)."""


def _collective_failure(error: RuntimeError, minutes: float) -> str | None:
    """The one line of a collective that failed or timed out under torchrun, naming the
    rank, where torchgarden called it and the timeout; None for any other error."""
    dist = sys.modules.get("torch.distributed")
    text = str(error)
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or not (
            (dist is not None and isinstance(error, dist.DistError))
            or "gloo" in text or "NCCL" in text):
        return None
    frames = [f for f in traceback.extract_tb(error.__traceback__) if "torchgarden" in f.filename]
    where = f" in {frames[-1].name} ({os.path.basename(frames[-1].filename)})" if frames else ""
    reason = " ".join(text.split("]", 1)[-1].split()) if text.startswith("[") else _message(error)
    return (f"rank {os.environ.get('RANK', '?')}: a collective with the other ranks failed"
            f"{where}: {reason} (runtime.distributed_timeout={minutes:g} min); with torchrun "
            "--max-restarts the job restarts from its newest checkpoint.")


def _write_failure(error: OSError, model_dir: str) -> str:
    """An OSError that names no file (a background writer's): say where and what is left."""
    try:
        free = f" ({shutil.disk_usage(model_dir).free / 2**20:.1f} MiB free there)"
    except OSError:
        free = ""
    kept = sorted((n for n in os.listdir(model_dir) if n.startswith("ckpt-")),
                  key=lambda n: int(n.partition("-")[2]) if n.partition("-")[2].isdigit() else -1,
                  ) if os.path.isdir(model_dir) else []
    resume = f"it resumes from {kept[-1]}" if kept else "it starts over"
    return (f"writing to {model_dir} failed: {error.strerror or error}{free}; what was there is "
            f"intact: fix it, then rerun ({resume}).")


def _quiet_writer_threads(verbose: bool) -> None:
    """TensorBoard's writer thread dies on a full disk with a traceback, then hands the same
    error to the main thread, which reports it in one line: print the thread's only with
    ``--verbose``."""
    def hook(info: Any) -> None:
        writer = type(info.thread).__name__ == "_AsyncWriterThread"
        if verbose or not (writer and isinstance(info.exc_value, OSError)):
            _THREAD_EXCEPTHOOK(info)

    threading.excepthook = hook


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the process exit status.

    A torchrun worker (``WORLD_SIZE`` > 1) that trained or evaluated ends here with
    ``distribute.exit_worker`` (flush, then ``os._exit``): the interpreter's own exit
    can abort it (SIGABRT or SIGSEGV instead of the status below).
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    _quiet_writer_threads(args.verbose)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    status = _dispatch(args)
    if args.command in ("train", "eval") and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        from torchgarden.distribute import exit_worker

        exit_worker(status)
    return status


def _dispatch(args: argparse.Namespace) -> int:
    handlers = {"list": _command_list, "config": _command_config,
                "train": _command_run, "eval": _command_run, **export_cli.COMMANDS,
                **report_cli.COMMANDS, **convert_cli.COMMANDS}
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
        if isinstance(error, _diverged_errors()):
            if args.verbose:
                traceback.print_exc()
            print(f"torchgarden: training diverged: {_message(error)}", file=sys.stderr)
            return EXIT_DIVERGED
        if isinstance(error, _input_errors()):
            if args.verbose:
                traceback.print_exc()
            return _fail(_message(error))
        if isinstance(error, _CollectiveFailed):
            if args.verbose:
                traceback.print_exc()
            print(f"torchgarden: error: {error}", file=sys.stderr)
            return EXIT_COLLECTIVE
        raise
