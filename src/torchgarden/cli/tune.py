"""``torchgarden tune``: a hyperparameter search on Optuna (docs/tuning.md).

    torchgarden tune --experiment NAME --space space.yaml --study_dir D [--trials N]
        [--workers K] [--storage URL] [--pruner median|hyperband|none]
    torchgarden tune --study_dir D --summary

Everything given is checked (flags, config, search space, study directory, storage)
before any trial writes; Optuna is imported only by this subcommand.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import multiprocessing
import os
import signal
import sys
import warnings
from typing import Any

__all__ = ["COMMANDS", "add_parser", "command_tune"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Adds the ``tune`` subcommand to ``sub``."""
    tune = sub.add_parser("tune", help="search hyperparameters with Optuna (many trials).")
    tune.add_argument("--experiment", help="registered experiment name (see `list`).")
    tune.add_argument("--config_file", action="append", default=[],
                      help="YAML config applied over the defaults of every trial (repeatable).")
    tune.add_argument("--params_override", action="append", default=[],
                      help="overrides applied to every trial, before the searched keys.")
    tune.add_argument("--import", dest="imports", action="append", default=[],
                      metavar="MODULE", help="module to import first (registers experiments).")
    tune.add_argument("--space", metavar="FILE", help="the search space (YAML over config keys).")
    tune.add_argument("--study_dir", required=True, metavar="DIR",
                      help="trial runs (DIR/trial-<n>), results, and the SQLite study.")
    tune.add_argument("--trials", type=int, default=10,
                      help="finished (complete + pruned) trials wanted in the study, all "
                           "processes together (default 10).")
    tune.add_argument("--workers", type=int, default=1,
                      help="trials run at once by this command, each in its own process.")
    tune.add_argument("--storage", metavar="URL",
                      help="a SQLAlchemy URL (default sqlite:///DIR/study.db); processes on "
                           "several machines share a study through one database.")
    tune.add_argument("--study_name", help="the study's name in --storage (default: DIR's name).")
    tune.add_argument("--metric", help="the validation metric to optimise (default "
                      "trainer.best_checkpoint_eval_metric, else validation_loss).")
    tune.add_argument("--direction", choices=("maximize", "minimize"),
                      help="default from trainer.best_checkpoint_metric_comp.")
    tune.add_argument("--objective", choices=("best", "last"), default="best",
                      help="a trial's value: its best validation result or its last.")
    tune.add_argument("--sampler", choices=("tpe", "random"), default="tpe")
    tune.add_argument("--seed", type=int, default=0,
                      help="sampler seed; the n-th trial drawn uses seed + n (default 0).")
    tune.add_argument("--pruner", choices=("median", "hyperband", "none"), default="median")
    tune.add_argument("--pruner_startup_trials", type=int, default=5,
                      help="median pruner: finished trials before it prunes (default 5).")
    tune.add_argument("--heartbeat", type=int, default=60, metavar="SECONDS",
                      help="a trial silent for twice this is re-queued by any process (0: off).")
    tune.add_argument("--summary", action="store_true",
                      help="print the trials table of --study_dir and exit.")
    tune.add_argument("--verbose", action="store_true", default=argparse.SUPPRESS)


def _check_flags(args: argparse.Namespace) -> None:
    from torchgarden.config import ConfigError

    for flag, value, low in (("--trials", args.trials, 0), ("--workers", args.workers, 1),
                             ("--heartbeat", args.heartbeat, 0),
                             ("--pruner_startup_trials", args.pruner_startup_trials, 0)):
        if value < low:
            raise ConfigError(f"{flag} must be >= {low}, received {value}.")
    if not args.space:
        raise ConfigError("the flag --space must be specified (a YAML file of config keys "
                          "and their distributions; see docs/tuning.md).")


def _objective(args: argparse.Namespace, base: Any) -> tuple[str, str]:
    from torchgarden.config import ConfigError

    configured = base.trainer.best_checkpoint_eval_metric
    metric = args.metric or configured or "validation_loss"
    if args.direction:
        return metric, args.direction
    if metric == configured:
        comp = base.trainer.best_checkpoint_metric_comp
        return metric, "maximize" if comp == "higher" else "minimize"
    if metric.endswith("loss"):
        return metric, "minimize"
    raise ConfigError(f"--metric {metric}: say whether to --direction maximize or minimize it.")


def _spec(args: argparse.Namespace) -> tuple[Any, Any, Any]:
    """The study's spec, search space and base config, all checked; nothing written."""
    from torchgarden.cli.flags import parse_configuration
    from torchgarden.tune.space import load_search_space
    from torchgarden.tune.study import StudySpec, default_storage

    _check_flags(args)
    base = parse_configuration(args, lock_return=False)
    space = load_search_space(args.space, base)
    metric, direction = _objective(args, base)
    study_dir = args.study_dir
    spec = StudySpec(
        study_dir=study_dir, storage=args.storage or default_storage(study_dir),
        study_name=args.study_name or os.path.basename(os.path.abspath(study_dir)),
        experiment=args.experiment or "", metric=metric, direction=direction,
        objective=args.objective, trials=args.trials, sampler=args.sampler, seed=args.seed,
        pruner=args.pruner, pruner_startup_trials=args.pruner_startup_trials,
        heartbeat=args.heartbeat)
    return spec, space, base


def _summary(args: argparse.Namespace) -> int:
    import optuna

    from torchgarden.tune.study import default_storage, recorded_study, write_results
    from torchgarden.tune.summary import format_summary

    name = recorded_study(args.study_dir).get("study_name")
    storage = args.storage or default_storage(args.study_dir)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(study_name=args.study_name or name, storage=storage)
    print(format_summary(write_results(study, args.study_dir)), flush=True)
    return 0


def command_tune(args: argparse.Namespace) -> int:
    """Runs (or summarises) the study; returns the exit status."""
    import optuna

    if not getattr(args, "verbose", False):
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        # Heartbeats and re-attaching a trial are "experimental" in Optuna; said once here.
        warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
        warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed")
    if args.summary:
        return _summary(args)
    from torchgarden.tune.study import open_study
    from torchgarden.tune.trials import run_trials

    spec, space, base = _spec(args)
    study = open_study(spec, space.as_dict(), base)
    if args.workers == 1 or getattr(args, "_worker", False):
        run_trials(spec, space, base, study)
        if getattr(args, "_worker", False):
            return 0
    else:
        status = _run_workers(args)
        if status:
            return status
    return _summary(args)


def _run_workers(args: argparse.Namespace) -> int:
    """Runs ``--workers`` processes, each taking trials from the study; the first non-zero
    exit status, else 0. Each dies with this process (so a ``kill -9`` of the command
    leaves no trial running, and the rerun resumes them)."""
    context = multiprocessing.get_context("spawn")
    child_args = argparse.Namespace(**{**vars(args), "_worker": True})
    workers = [context.Process(target=_worker, args=(child_args,), name=f"tune-worker-{i}")
               for i in range(args.workers)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    for worker in workers:
        if worker.exitcode and worker.exitcode < 0:  # Killed: its trial waits for a rerun.
            print(f"torchgarden: {worker.name} was killed (signal {-worker.exitcode}); rerun "
                  "the same command to resume its trial.", file=sys.stderr, flush=True)
    codes = [w.exitcode if w.exitcode >= 0 else 128 - w.exitcode for w in workers]
    return next((code for code in codes if code), 0)


def _worker(args: argparse.Namespace) -> None:
    """A worker process: ``torchgarden tune`` for one trial at a time."""
    with contextlib.suppress(OSError, AttributeError):  # Linux: SIGKILL when the parent dies.
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() == 1:  # The parent died before prctl.
        sys.exit(128 + signal.SIGKILL)
    # The workers share the command's stdout: a write per line (log blocks end theirs in the
    # same write), so that no worker's line starts inside another's unfinished one.
    with contextlib.suppress(AttributeError):
        sys.stdout.reconfigure(line_buffering=True)
    from torchgarden.train_lib.experiment import bad_input_errors

    try:
        status = command_tune(args)
    except KeyboardInterrupt:
        status = 128 + signal.SIGINT
    except bad_input_errors() as error:  # As the command's own process reports it.
        print(f"torchgarden: error: {' '.join(str(error).split())}", file=sys.stderr)
        status = 2
    sys.exit(status)


COMMANDS = {"tune": command_tune}
