"""Running a study's trials: a process takes trials from the shared study, one at a time,
until the study holds ``spec.trials`` finished (complete + pruned) trials.

Each trial is an ordinary ``train_and_eval`` run (``run_experiment``) in
``<study_dir>/trial-<n>/``. ``ReportToStudy`` hands each validation result to Optuna
(``trial.report``) and stops the run at that validation point when the pruner says so;
the Controller then saves its checkpoint, so a pruned trial's run is intact.

Recovery. A process holds ``<study_dir>/.claims/trial-<n>.lock`` (``flock``, dropped by
the kernel when the process dies, ``kill -9`` included) while it runs trial ``n``, and
takes trials under ``<study_dir>/.claims/study.lock``. A RUNNING trial of this host
whose claim is free is an interrupted one: the next process adopts it before asking
Optuna for a new trial, with the parameters stored for it, and its run resumes from its
newest checkpoint; results already reported are not reported twice. A process on
another host that dies is found by Optuna's heartbeat instead (``spec.heartbeat``): its
trial is failed and re-queued with the same parameters (``RetryFailedTrialCallback``),
and the re-queued trial trains in the first attempt's directory.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import logging
import os
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

from torchgarden.callbacks.base import Callback
from torchgarden.config import ConfigError, ExperimentConfig
from torchgarden.tune.space import SearchSpace
from torchgarden.tune.study import StudySpec, study_lock, trial_dir_name, write_results
from torchgarden.utils.metric_path import find_metric, has_metric, metric_paths

__all__ = ["ReportToStudy", "run_trials"]

_logger = logging.getLogger("torchgarden")
_HOST = "torchgarden.host"
_PRUNED_AT = "pruned_at"
_RETRY = "failed_trial"  # Optuna's mark on a trial re-queued after a heartbeat stopped.
#: A RUNNING trial with no host recorded yet is left alone this long (seconds).
_UNCLAIMED_GRACE = 60.0


class ReportToStudy(Callback):
    """Reports ``metric`` after each evaluation to an Optuna trial and stops training
    when the study's pruner prunes the trial.

    Args:
        trial: The ``optuna.Trial``.
        metric: The validation metric (``|`` or ``/`` addresses nested logs).
        reported: Steps already reported (a resumed trial's); not reported again.
    """

    def __init__(self, trial: Any, metric: str, reported: set[int] | None = None) -> None:
        self.trial, self.metric = trial, metric
        self.reported = set(reported or ())
        self.pruned_at: int | None = None

    def on_eval_end(self, step: int, logs: Any) -> None:
        if not has_metric(logs, self.metric):
            raise ConfigError(f"--metric {self.metric} is not in the validation logs; they "
                              f"hold: {', '.join(metric_paths(logs)) or 'nothing'}")
        if step not in self.reported:
            self.trial.report(float(find_metric(logs, self.metric)), step)
            self.reported.add(step)
        if self.trial.should_prune():
            self.pruned_at = step
            self.trial.set_user_attr(_PRUNED_AT, step)
            self.controller.stop_training = True  # Saves its checkpoint, then returns.


def run_trials(spec: StudySpec, space: SearchSpace, base: ExperimentConfig, study: Any,
               *, log: Callable[[str], None] = print) -> int:
    """Runs trials of ``study`` until it holds ``spec.trials`` finished ones (counting
    every process's); returns how many this process finished."""
    import optuna

    study.pruner = _pruner(spec, base)
    claims = os.path.join(spec.study_dir, ".claims")
    finished = 0
    while True:
        with study_lock(spec.study_dir):
            taken = _adopt(study, claims)
            if taken is None and spec.heartbeat > 0:  # Another host's silent trials.
                optuna.storages.fail_stale_trials(study)
            taken = taken or _ask(study, spec, claims)
        if taken is None:
            return finished
        trial, claim = taken
        try:
            _run_trial(study, trial, spec, space, base, log)
        finally:
            os.close(claim)
        finished += 1
        write_results(study, spec.study_dir)


def _claim(claims: str, number: int) -> int | None:
    """The claim of trial ``number`` (an open, locked fd), or None if a live process has it."""
    fd = os.open(os.path.join(claims, f"trial-{number}.lock"), os.O_RDWR | os.O_CREAT
                 | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _adopt(study: Any, claims: str) -> tuple[Any, int] | None:
    """An interrupted trial of this host (RUNNING, its claim free), claimed."""
    import optuna

    now = datetime.datetime.now()
    for frozen in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        host = frozen.system_attrs.get(_HOST)
        started = frozen.datetime_start or now
        if host not in (None, socket.gethostname()) or (
                host is None and (now - started).total_seconds() < _UNCLAIMED_GRACE):
            continue
        claim = _claim(claims, frozen.number)
        if claim is not None:
            # Optuna has no public way to reopen a RUNNING trial; Trial(study, id) is how
            # its own optimize loop builds one.
            return optuna.trial.Trial(study, frozen._trial_id), claim
    return None


def _ask(study: Any, spec: StudySpec, claims: str) -> tuple[Any, int] | None:
    """A new trial (a re-queued one first), claimed; None once the study has enough."""
    from optuna.trial import TrialState

    trials = study.get_trials(deepcopy=False)
    count = {state: sum(t.state == state for t in trials) for state in TrialState}
    done = count[TrialState.COMPLETE] + count[TrialState.PRUNED]
    if not count[TrialState.WAITING] and done + count[TrialState.RUNNING] >= spec.trials:
        return None
    # Seeded by how many trials were drawn before (re-queued copies are not drawn), so a
    # study interrupted and resumed draws what an uninterrupted one draws.
    study.sampler = _sampler(spec, sum(_RETRY not in t.system_attrs for t in trials))
    trial = study.ask()
    study._storage.set_trial_system_attr(trial._trial_id, _HOST, socket.gethostname())
    claim = _claim(claims, trial.number)
    if claim is None:  # Unreachable: numbers are unique and nobody else claims a new one.
        raise RuntimeError(f"trial {trial.number} is claimed by another process.")
    return trial, claim


def _sampler(spec: StudySpec, drawn: int) -> Any:
    """The sampler of the trial drawn after ``drawn`` others, seeded ``seed + drawn``: a
    trial's parameters depend on the seed and the finished trials only, not on which
    process drew them or when."""
    import optuna

    if spec.sampler == "random":
        return optuna.samplers.RandomSampler(seed=spec.seed + drawn)
    return optuna.samplers.TPESampler(seed=spec.seed + drawn)


def _pruner(spec: StudySpec, base: ExperimentConfig) -> Any:
    import optuna

    if spec.pruner == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=spec.pruner_startup_trials)
    if spec.pruner == "hyperband":
        cfg = base.trainer
        return optuna.pruners.HyperbandPruner(
            min_resource=cfg.validation_interval or cfg.train_steps,
            max_resource=cfg.train_steps, reduction_factor=3)
    return optuna.pruners.NopPruner()


def _frozen(study: Any, number: int) -> Any:
    return next(t for t in study.get_trials(deepcopy=False) if t.number == number)


def _run_trial(study: Any, trial: Any, spec: StudySpec, space: SearchSpace,
               base: ExperimentConfig, log: Callable[[str], None]) -> None:
    from optuna.trial import TrialState

    frozen = _frozen(study, trial.number)
    name = trial_dir_name(frozen)
    if _PRUNED_AT in frozen.user_attrs:  # Pruned, then killed before it was told.
        study.tell(trial, state=TrialState.PRUNED)
        return
    overrides = space.suggest(trial, base)
    try:
        params = base.copy().override(overrides)
        params.validate()
    except ConfigError as error:
        study.tell(trial, state=TrialState.FAIL)
        raise ConfigError(f"trial {trial.number} ({overrides}): {error}") from None
    params.lock()
    model_dir = os.path.join(spec.study_dir, name)
    resumed = " (resumed)" if os.path.isdir(model_dir) else ""
    log(f"torchgarden: trial {trial.number}{resumed} in {model_dir}: "
        + ", ".join(f"{k.rpartition('.')[2]}={v!r}" for k, v in overrides.items()))
    report = ReportToStudy(trial, spec.metric, set(frozen.intermediate_values))
    note = _train(trial, params, model_dir, report, spec)
    values = _frozen(study, trial.number).intermediate_values
    if values:
        trial.set_user_attr("steps", max(values))
    if note:
        trial.set_user_attr("note", note)
    if report.pruned_at is not None or note:
        study.tell(trial, state=TrialState.PRUNED)
        log(f"torchgarden: trial {trial.number} pruned at step {report.pruned_at or '?'}"
            + (f" ({note})" if note else ""))
        return
    best = (max if spec.direction == "maximize" else min)(values.values())
    value = best if spec.objective == "best" else values[max(values)]
    study.tell(trial, value)
    log(f"torchgarden: trial {trial.number} complete: {spec.metric}={value:.6g}")


def _train(trial: Any, params: ExperimentConfig, model_dir: str, report: ReportToStudy,
           spec: StudySpec) -> str:
    """Runs the trial's training; returns a note when it diverged (counted as pruned)."""
    from torchgarden.train_lib.experiment import run_experiment

    with _heartbeat(trial, spec.heartbeat):
        try:
            run_experiment(mode="train_and_eval", params=params, model_dir=model_dir,
                           callbacks=[report])
        except Exception as error:
            kind = type(error).__name__
            if kind in ("TrainingDivergedError", "NonFiniteCheckpointError"):
                return f"diverged: {' '.join(str(error).split())}"
            if kind != "Preempted":  # A preempted trial stays RUNNING: the rerun resumes it.
                from optuna.trial import TrialState

                trial.set_user_attr("note", " ".join(str(error).split())[:500])
                trial.study.tell(trial, state=TrialState.FAIL)
            raise
    return ""


@contextlib.contextmanager
def _heartbeat(trial: Any, interval: int) -> Iterator[None]:
    """Records the trial's heartbeat every ``interval`` seconds while it trains."""
    if interval <= 0:
        yield
        return
    stop = threading.Event()

    def beat() -> None:
        while True:
            try:
                trial.storage.record_heartbeat(trial._trial_id)
            except Exception as error:  # A busy database: the next beat retries.
                _logger.warning("trial %d: heartbeat not recorded: %s", trial.number, error)
            if stop.wait(interval):
                return

    thread = threading.Thread(target=beat, name="tune-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
