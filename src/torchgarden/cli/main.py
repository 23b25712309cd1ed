"""``torchgarden`` / ``python -m torchgarden``: train, eval, list, config, export, report,
convert, port.

``torchgarden --help`` and ``torchgarden list`` do not import torch.
"""

from __future__ import annotations

import argparse
import gc
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
from torchgarden.cli import port as port_cli
from torchgarden.cli import report as report_cli
from torchgarden.cli import tune as tune_cli
from torchgarden.cli.flags import define_flags, parse_configuration
from torchgarden.cli.usage import CommandLineError, Parser, explain_unknown
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
VERBOSE_HELP = "on an error, also print the traceback; log at DEBUG level."


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="torchgarden",
        description="Config-driven PyTorch training in the style of TF Model Garden.",
    )
    parser.add_argument("--verbose", action="store_true", help=VERBOSE_HELP)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    train = sub.add_parser("train", help="train (and evaluate) an experiment.")
    define_flags(train, mode_default="train_and_eval", modes=TRAIN_MODES)

    evaluate = sub.add_parser("eval", help="evaluate the latest checkpoint of --model_dir.")
    define_flags(evaluate, mode_default="eval", modes=EVAL_MODES)

    lister = sub.add_parser("list", help="list registered experiments.")
    lister.add_argument("--import", dest="imports", action="append", default=[],
                        metavar="MODULE", help="module to import first.")

    config = sub.add_parser(
        "config", help="print the resolved config as YAML (of --experiment, or of the run "
                       "in --model_dir).")
    define_flags(config, modes=())
    export_cli.add_parsers(sub)
    report_cli.add_parser(sub)
    convert_cli.add_parser(sub)
    tune_cli.add_parser(sub)
    port_cli.add_parser(sub)
    for command in sub.choices.values():  # `torchgarden train ... --verbose` works too.
        if "--verbose" not in command._option_string_actions:
            command.add_argument("--verbose", action="store_true", default=argparse.SUPPRESS,
                                 help=VERBOSE_HELP)
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
    params = _configuration(args, training=False)
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
        from torchgarden.train_lib.model_dir import EVAL_SUBDIR
        from torchgarden.utils.logs import flatten

        results = (args.model_dir if args.command == "train"  # eval writes only under eval/.
                   else os.path.join(args.model_dir, EVAL_SUBDIR))
        print(f"torchgarden: done. Results in {os.path.abspath(results)} "
              f"(TensorBoard: tensorboard --logdir {results})", flush=True)
        shown = {k: v for k, v in flatten(to_host(eval_logs)).items()  # Sets, tasks: a/b.
                 if isinstance(v, (int, float))}
        if shown:
            print("torchgarden: final eval: " + ", ".join(
                f"{k}={v:.4f}" for k, v in shown.items()), flush=True)
    return 0


def _configuration(args: argparse.Namespace, *, training: bool) -> Any:
    """The flags' config; an evaluation (and ``config --model_dir``) starts from the config
    that trained ``--model_dir``, whose task ``--experiment`` may only repeat."""
    saved = os.path.join(args.model_dir or "", "params.yaml")
    if training or not args.model_dir or not os.path.isfile(saved):
        if not training and args.model_dir and not getattr(args, "experiment", None):
            where = ("does not exist" if not os.path.exists(args.model_dir)
                     else "holds no params.yaml (no finished train loop)")
            raise _UsageError(f"--model_dir {args.model_dir} {where}: point it at a trained "
                              "run's directory, or name the config with --experiment.")
        return parse_configuration(args)
    if args.experiment:
        _check_experiment(args, saved)
    params = parse_configuration(args, base_file=saved)
    over = f", over --experiment {args.experiment}'s defaults" if args.experiment else ""
    note = f"config read from {saved}{over} (then --config_file, --params_override)"
    if args.command == "config":  # stdout is the YAML: the note is a YAML comment.
        print(f"# {note}", flush=True)
    else:
        print(f"torchgarden: {note}.", flush=True)
    return params


def _check_experiment(args: argparse.Namespace, saved: str) -> None:
    """Refuses ``--experiment X`` with a ``--model_dir`` trained with another task or model
    class: the run's ``params.yaml`` would silently win over X."""
    from torchgarden import registry
    from torchgarden.config import load_yaml_file

    for module in args.imports:
        registry.import_user_module(module)
    wanted = _classes(registry.get_experiment(args.experiment).as_dict())
    trained = _classes(load_yaml_file(saved))
    if wanted == trained:
        return
    same = [name for name in registry.list_experiments()
            if _classes(registry.get_experiment(name).as_dict()) == trained]
    named = f"experiment {' or '.join(same)}" if same else "another experiment"
    task = (trained[0] or "TaskConfig").rpartition(".")[2]
    raise _UsageError(
        f"--experiment {args.experiment} does not match --model_dir {args.model_dir}, which "
        f"was trained as {named} (task {task}, see its params.yaml): leave --experiment out "
        f"to use the run's own config, or point --model_dir at a {args.experiment} run.")


def _classes(config: dict[str, Any]) -> tuple[Any, Any]:
    """The task's and the model's recorded ``_type`` (None for the base classes)."""
    task = config.get("task") or {}
    model = task.get("model") if isinstance(task, dict) else None
    return task.get("_type"), model.get("_type") if isinstance(model, dict) else None


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
    try:
        args, extras = parser.parse_known_args(argv)
        if extras:
            raise CommandLineError(explain_unknown(parser, args, extras))
    except CommandLineError as error:
        return _fail(str(error))
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
    if argv is None:  # The process' own command: it ends when this returns.
        # Interpreter shutdown would walk every object torch and the run made (~1.4 s
        # after a compiled run); frozen, they are left to the OS. atexit handlers and the
        # finalizers of objects freed by reference counting still run.
        gc.freeze()
    return status


def _dispatch(args: argparse.Namespace) -> int:
    handlers = {"list": _command_list, "config": _command_config,
                "train": _command_run, "eval": _command_run, **export_cli.COMMANDS,
                **report_cli.COMMANDS, **convert_cli.COMMANDS, **tune_cli.COMMANDS,
                **port_cli.COMMANDS}
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
