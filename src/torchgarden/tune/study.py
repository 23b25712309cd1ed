"""The study: its storage (Optuna's RDB storage), what it searches, and its results.

A study directory ``D`` holds ``study.db`` (the default SQLite storage), ``tune.yaml``
(what the study searches: experiment, space, objective; written once), one
``trial-<n>/`` run per trial, ``trials.json`` (the trials table, rewritten after each
trial, read by ``torchgarden report D``) and ``best/params.yaml`` (the best trial's config).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from typing import Any

import yaml

from torchgarden.config import ConfigError, ExperimentConfig
from torchgarden.report.study import TRIALS_FILE

__all__ = ["StudySpec", "TRIALS_FILE", "open_study", "recorded_study", "study_lock",
           "trial_dir_name", "trial_rows", "write_results"]

_SPEC_FILE = "tune.yaml"
_ATTR = "torchgarden"


@dataclasses.dataclass(frozen=True, kw_only=True)
class StudySpec:
    """How a study runs; plain values, so a worker process receives it as is.

    Attributes:
        study_dir: Where the trials' runs, ``tune.yaml`` and the results live.
        storage: A SQLAlchemy URL; default ``sqlite:///<study_dir>/study.db``.
        study_name: The study's name in the storage (processes sharing it use the same).
        experiment: The registered experiment the trials run.
        metric: The validation metric optimised (``trainer.best_checkpoint_eval_metric``).
        direction: ``"maximize"`` or ``"minimize"``.
        objective: ``"best"`` (the best validation value of the trial) or ``"last"``.
        trials: Finished (complete + pruned) trials wanted in the study, all processes
            together.
        sampler: ``"tpe"`` or ``"random"``; the n-th trial drawn is seeded ``seed + n``.
        seed: The sampler seed.
        pruner: ``"median"``, ``"hyperband"`` or ``"none"``.
        pruner_startup_trials: Median pruner: finished trials before it prunes.
        heartbeat: Seconds between a trial's heartbeats (0: none); a trial silent for
            twice that is failed and re-queued with its parameters by any process.
    """

    study_dir: str
    storage: str
    study_name: str
    experiment: str
    metric: str
    direction: str
    objective: str = "best"
    trials: int = 10
    sampler: str = "tpe"
    seed: int = 0
    pruner: str = "median"
    pruner_startup_trials: int = 5
    heartbeat: int = 60


@contextlib.contextmanager
def study_lock(study_dir: str) -> Iterator[None]:
    """Holds ``<study_dir>/.claims/study.lock`` (``flock``; waits for the holder): the
    processes of this host open the study and take trials one at a time."""
    claims = os.path.join(study_dir, ".claims")
    os.makedirs(claims, exist_ok=True)
    fd = os.open(os.path.join(claims, "study.lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC,
                 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def default_storage(study_dir: str) -> str:
    """``sqlite:///<study_dir>/study.db`` (absolute)."""
    return f"sqlite:///{os.path.join(os.path.abspath(study_dir), 'study.db')}"


def trial_dir_name(trial: Any) -> str:
    """``trial-<n>``: a re-queued trial (heartbeat) keeps its first attempt's directory, so
    it resumes from that run's newest checkpoint."""
    history = trial.system_attrs.get("retry_history") or [trial.number]
    return f"trial-{history[0]}"


def _identity(spec: StudySpec, space: dict[str, Any], base: ExperimentConfig) -> dict[str, Any]:
    config = yaml.safe_dump(base.as_dict(), sort_keys=True)
    return {"experiment": spec.experiment, "space": space, "metric": spec.metric,
            "direction": spec.direction,
            "config_sha256": hashlib.sha256(config.encode()).hexdigest()[:16]}


def _mask(url: str) -> str:
    try:
        from sqlalchemy.engine import make_url

        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # A malformed URL: shown as given.
        return url


def _check_study_dir(spec: StudySpec, identity: dict[str, Any]) -> None:
    """Refuses a directory holding a training run or another study, before any write."""
    directory = spec.study_dir
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise ConfigError(f"--study_dir {directory} exists and is not a directory.")
    recorded_path = os.path.join(directory, _SPEC_FILE)
    if not os.path.isfile(recorded_path):
        if os.path.isfile(os.path.join(directory, "params.yaml")):
            raise ConfigError(f"--study_dir {directory} holds a training run (params.yaml), "
                              "not a study; choose another directory.")
        return
    _compare(f"--study_dir {directory}", recorded_study(directory).get("identity", {}),
             identity)


def recorded_study(study_dir: str) -> dict[str, Any]:
    """What ``study_dir``'s ``tune.yaml`` records (its name, identity, space).

    Raises:
        ConfigError: ``study_dir`` holds no study.
    """
    path = os.path.join(study_dir, _SPEC_FILE)
    if not os.path.isfile(path):
        raise ConfigError(f"--study_dir {study_dir} holds no study (no {_SPEC_FILE}); point "
                          "it at the --study_dir of a `torchgarden tune` run.")
    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f) or {}


def _compare(where: str, recorded: dict[str, Any], identity: dict[str, Any]) -> None:
    for key in ("experiment", "metric", "direction", "space", "config_sha256"):
        if key not in recorded or recorded[key] == identity[key]:
            continue
        if key == "space":
            what = "another search space"
        elif key == "config_sha256":
            what = "another base config (--config_file, --params_override)"
        else:
            what = f"{key} {recorded[key]!r}, not {identity[key]!r}"
        raise ConfigError(f"{where} holds a study of {what}; rerun with the same flags, or "
                          "choose a new --study_dir for a new study.")


def open_study(spec: StudySpec, space: dict[str, Any], base: ExperimentConfig) -> Any:
    """Creates or loads the study (an ``optuna.Study``) after checking that ``study_dir``
    and the storage hold this study or none.

    Raises:
        ConfigError: The directory holds a training run or another study (experiment,
            space, base config or objective differ), or the storage cannot be opened.
    """
    import optuna

    identity = _identity(spec, space, base)
    _check_study_dir(spec, identity)
    created = not os.path.exists(spec.study_dir)
    try:
        with study_lock(spec.study_dir):  # SQLite: one process creates the tables.
            study = optuna.create_study(storage=_storage(spec), study_name=spec.study_name,
                                        direction=spec.direction, load_if_exists=True)
            _compare(f"study {spec.study_name!r} in --storage {_mask(spec.storage)}",
                     study.user_attrs.get(_ATTR, {}), identity)
            _record(study, spec, identity)
    except BaseException:
        if created:
            shutil.rmtree(spec.study_dir, ignore_errors=True)
        raise
    return study


def _record(study: Any, spec: StudySpec, identity: dict[str, Any]) -> None:
    """Records what the study searches, in the storage and in ``tune.yaml``."""
    from torchgarden.utils.files import atomic_write_text

    if _ATTR not in study.user_attrs:
        study.set_user_attr(_ATTR, identity)
    recorded = os.path.join(spec.study_dir, _SPEC_FILE)
    if not os.path.isfile(recorded):
        atomic_write_text(recorded, yaml.safe_dump(
            {"study_name": spec.study_name, "storage": _mask(spec.storage),
             "identity": identity}, sort_keys=False))


def _storage(spec: StudySpec) -> Any:
    import optuna

    engine = {"connect_args": {"timeout": 120}} if spec.storage.startswith("sqlite") else {}
    # Optuna 4.9 renamed the retry callback and its argument; 4.0-4.8 have the old names.
    new = hasattr(optuna.storages, "RetryHeartbeatStaleTrialCallback")
    retry = getattr(optuna.storages, "RetryHeartbeatStaleTrialCallback" if new
                    else "RetryFailedTrialCallback")(max_retry=None,
                                                     inherit_intermediate_values=True)
    beat = {"heartbeat_interval": spec.heartbeat, "grace_period": 2 * spec.heartbeat,
            "heartbeat_stale_trial_callback" if new else "failed_trial_callback": retry,
            } if spec.heartbeat > 0 else {}
    try:
        return optuna.storages.RDBStorage(spec.storage, engine_kwargs=engine, **beat)
    except Exception as error:  # SQLAlchemy's, a missing driver's: one line, exit 2.
        reason = " ".join(str(error).split("\n")[0].split())
        raise ConfigError(f"--storage {_mask(spec.storage)} cannot be opened: {reason}"
                          ) from None


def trial_rows(study: Any) -> list[dict[str, Any]]:
    """One row per trial: number, run directory, state, objective, steps, parameters."""
    rows = []
    for trial in study.get_trials(deepcopy=False):
        steps = trial.user_attrs.get("steps")
        if steps is None and trial.intermediate_values:
            steps = max(trial.intermediate_values)
        rows.append({"number": trial.number, "dir": trial_dir_name(trial),
                     "state": trial.state.name.lower(), "objective": trial.value,
                     "steps": steps, "params": dict(trial.params),
                     "note": trial.user_attrs.get("note", "")})
    return rows


def write_results(study: Any, study_dir: str) -> dict[str, Any]:
    """Writes ``trials.json`` and ``best/params.yaml`` (+ ``best/best.json``); returns
    the table written."""
    from torchgarden.utils.files import atomic_write_text

    identity = study.user_attrs.get(_ATTR, {})
    complete = [t for t in study.get_trials(deepcopy=False) if t.value is not None
                and t.state.name == "COMPLETE"]
    best = study.best_trial if complete else None
    table = {"study_name": study.study_name, "metric": identity.get("metric"),
             "direction": identity.get("direction"), "experiment": identity.get("experiment"),
             "best": best.number if best is not None else None, "trials": trial_rows(study)}
    atomic_write_text(os.path.join(study_dir, TRIALS_FILE), json.dumps(table, indent=1))
    source = os.path.join(study_dir, trial_dir_name(best), "params.yaml") if best else ""
    if best is not None and os.path.isfile(source):
        os.makedirs(os.path.join(study_dir, "best"), exist_ok=True)
        shutil.copyfile(source, os.path.join(study_dir, "best", "params.yaml"))
        atomic_write_text(os.path.join(study_dir, "best", "best.json"), json.dumps(
            {"trial": best.number, "model_dir": os.path.join(study_dir, trial_dir_name(best)),
             "objective": best.value, "params": best.params}, indent=1))
    return table
