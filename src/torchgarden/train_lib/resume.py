"""What a run checks and adjusts before it resumes from (or starts in) a model_dir.

* :func:`check_resume_compatible` — the checkpoint was written for the same task and model;
* :class:`ConfiguredOptimizer` — the optimizer's moments resume, its hyperparameters come
  from the config the run is started with, and another optimizer starts fresh;
* :func:`check_best_metric` — ``trainer.best_checkpoint_eval_metric`` names an eval log.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

from torchgarden.checkpoint import latest_checkpoint, read_meta
from torchgarden.config import ConfigError, ExperimentConfig
from torchgarden.core import Task
from torchgarden.distribute.collectives import is_chief
from torchgarden.metrics import as_metric
from torchgarden.utils.logs import flatten
from torchgarden.utils.suggest import did_you_mean

__all__ = ["ConfiguredOptimizer", "check_best_metric", "check_resume_compatible"]

_logger = logging.getLogger("torchgarden")


def check_resume_compatible(
    params: ExperimentConfig,
    model_dir: str | os.PathLike[str],
    *,
    checkpoint: tuple[str, dict[str, Any]] | None = None,
) -> None:
    """Refuses to resume from a checkpoint written under another model or task
    (``task._type`` or ``task.model`` differ; steps, data and the optimizer may change).

    Args:
        params: The config of the run about to start.
        model_dir: Its model_dir (its latest checkpoint is checked unless ``checkpoint``).
        checkpoint: ``(path, meta)`` of the checkpoint that will be restored
            (``CheckpointManager.prepare_restore``). Defaults to None.

    Raises:
        ConfigError: Listing the differing dotted keys with both values.
    """
    if checkpoint is None:
        path = latest_checkpoint(os.fspath(model_dir))
        if path is None:
            return
        try:
            checkpoint = path, read_meta(path)
        except Exception:  # A corrupt checkpoint is reported (and skipped) by the restore.
            return
    path, meta = checkpoint
    saved = meta.get("config") if isinstance(meta, dict) else None
    if not isinstance(saved, dict):
        return
    current = _plain(params.as_dict())
    differences = _config_differences(saved, current)
    if differences:
        raise ConfigError(
            f"cannot resume {path} under a different model or task ("
            + "; ".join(differences[:5])
            + (f"; and {len(differences) - 5} more" if len(differences) > 5 else "")
            + "). Use a new --model_dir, or set task.init_checkpoint to start from its weights."
        )
    changed = _changed_settings(saved, current)
    if changed and is_chief():
        print(f"torchgarden: resuming {os.path.basename(path)} under settings changed since "
              f"it was written: {'; '.join(changed[:6])}"
              + (f"; and {len(changed) - 6} more" if len(changed) > 6 else "")
              + " (the model is the same; these apply from here on).", flush=True)


def _plain(data: Any) -> Any:
    """The config as meta.json holds it (tuples are lists there)."""
    return json.loads(json.dumps(data, default=str))


def _same_type(old: Any, new: Any) -> bool:
    # A class of a script run as `python my_project.py` was once recorded as `__main__.X`.
    if old == new or not (isinstance(old, str) and isinstance(new, str)):
        return old == new
    return old.startswith("__main__.") and new.endswith("." + old.partition(".")[2])


def _config_differences(saved: dict[str, Any], current: dict[str, Any]) -> list[str]:
    old_task, new_task = saved.get("task") or {}, current.get("task") or {}
    old_type, new_type = old_task.get("_type"), new_task.get("_type")
    if not _same_type(old_type, new_type):
        return [f"task._type: {old_type!r} -> {new_type!r}"]
    old, new = old_task.get("model") or {}, new_task.get("model") or {}
    if not (isinstance(old, dict) and isinstance(new, dict)):
        return [] if old == new else [f"task.model: {old!r} -> {new!r}"]
    return [
        f"task.model.{field}: {old.get(field)!r} -> {new.get(field)!r}"
        for field in sorted(set(old) | set(new))
        if old.get(field) != new.get(field)
    ]


def _changed_settings(saved: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """``key: old -> new`` for each setting outside the model that differs (a resumed run
    may change steps, data or the optimizer, and says so)."""
    old, new = flatten(saved, sep="."), flatten(current, sep=".")
    return [f"{key}: {old.get(key)!r} -> {new.get(key)!r}"
            for key in [*new, *(k for k in old if k not in new)]
            if not key.startswith(("task.model.", "task._type")) and old.get(key) != new.get(key)]


def _param_groups(state: Any) -> list[dict[str, Any]] | None:
    """The param groups of a torch optimizer state (or of a LossScaleOptimizer's inner one)."""
    if not isinstance(state, dict):
        return None
    groups = state.get("param_groups")
    if groups is None and isinstance(state.get("optimizer"), dict):
        groups = state["optimizer"].get("param_groups")
    return groups if isinstance(groups, list) else None


def _shape(groups: list[dict[str, Any]]) -> list[tuple[frozenset[str], int]]:
    return [
        (frozenset(k for k in group if k not in ("params", "initial_lr")),
         len(group.get("params", ())))
        for group in groups
    ]


class ConfiguredOptimizer:
    """The optimizer's checkpoint item: moments resume, hyperparameters follow the config.

    ``torch.optim.Optimizer.load_state_dict`` also restores the saved hyperparameters
    (momentum, weight decay, betas...), silently undoing a change made for the resumed
    run. This item restores the state and then puts back the configured values. A
    checkpoint of another optimizer (other hyperparameter names, or other parameter
    groups) is not loaded at all: the moments start fresh, with one warning.

    Args:
        optimizer: The optimizer whose ``param_groups`` hold the configured values.
        item: The checkpoint item that saves it (the optimizer itself, or a wrapper
            such as FSDP's full-state item).
    """

    def __init__(self, optimizer: Any, item: Any) -> None:
        self._optimizer = optimizer
        self._item = item
        self.collective_state_dict = getattr(item, "collective_state_dict", False)
        if callable(getattr(item, "sharded_state_dict", None)):  # FSDP2 under DCP
            self.sharded_state_dict = item.sharded_state_dict
            self.load_sharded_state_dict = self._load_sharded
            self.sharded_mismatch = self._fresh_moments

    def state_dict(self) -> Any:
        return self._item.state_dict()

    def load_state_dict(self, state_dict: Any) -> None:
        saved, groups = _param_groups(state_dict), self._optimizer.param_groups
        if saved is not None and _shape(saved) != _shape(groups):
            self._fresh_moments(f"hyperparameters {sorted(_shape(saved)[0][0]) if saved else []}"
                                f" vs {sorted(_shape(groups)[0][0])}")
            return
        self._configured(self._item.load_state_dict, state_dict)

    def _configured(self, load: Any, state_dict: Any) -> None:
        """``load(state_dict)``, then the configured hyperparameters put back."""
        configured = [{k: v for k, v in group.items() if k != "params"}
                      for group in self._optimizer.param_groups]
        load(state_dict)
        for group, values in zip(self._optimizer.param_groups, configured):
            group.update(values)

    def _fresh_moments(self, problem: str) -> None:
        """A checkpoint of another optimizer: its moments start fresh."""
        _logger.warning("the checkpoint's optimizer state does not fit the configured "
                        "optimizer (%s): its moments start fresh; the model and the rest "
                        "resume.", problem)

    def _load_sharded(self, state_dict: Any) -> None:
        """The sharded (DCP) load: the moments resume, the hyperparameters are configured."""
        self._configured(self._item.load_sharded_state_dict, state_dict)


def check_best_metric(params: ExperimentConfig, task: Task, trainer: Any) -> None:
    """Checks ``trainer.best_checkpoint_eval_metric`` against the eval logs' keys.

    ``trainer`` is what evaluates: a ``Trainer`` (whose named validation sets prefix
    the keys, ``clean/accuracy``) or a ``MultiTaskEvaluator`` (the task names prefix
    them, ``digits/accuracy``). A task's keys are known when it computes its eval logs
    the default way and every eval metric is one of torchgarden's scalar metrics;
    otherwise only the task (or set) name is checked, and a typo in the rest is
    reported at the first evaluation.

    Raises:
        ConfigError: Naming the metric, the keys the evaluation logs, and the closest.
    """
    metric = params.trainer.best_checkpoint_eval_metric
    if not (metric and params.trainer.best_checkpoint_export_subdir):
        return
    evaluators = getattr(trainer, "evaluators", None)
    prefixes = _eval_keys(evaluators) if evaluators is not None else _evaluator_keys(
        task, trainer)
    wanted = metric.replace("|", "/")
    for prefix, keys in prefixes.items():
        if keys is None and wanted.startswith(prefix):
            return  # The keys of that task (or set) are not known until it evaluates.
    known = sorted(key for keys in prefixes.values() for key in keys or ())
    if wanted in known or not (known or prefixes):
        return
    key = "trainer.best_checkpoint_eval_metric"
    names = sorted(prefix.rstrip("/") for prefix in prefixes if prefix)
    where = f" (tasks or sets: {', '.join(names)})" if names else ""
    raise ConfigError(
        f"{key}: {metric!r} is not in the eval logs{where}, which hold "
        f"{', '.join(known) or 'keys known only after the first evaluation'}"
        f"{did_you_mean(wanted, known + [n + '/' for n in names], style='clause')}",
        key=key,
    )


def _eval_keys(evaluators: dict[str, Any]) -> dict[str, list[str] | None]:
    """``{"<task>/": keys or None}`` of every task's evaluator."""
    found: dict[str, list[str] | None] = {}
    for name, evaluator in evaluators.items():
        for prefix, keys in _evaluator_keys(evaluator.task, evaluator).items():
            found[f"{name}/{prefix}"] = None if keys is None else [f"{name}/{k}" for k in keys]
    return found


def _evaluator_keys(task: Task, evaluator: Any) -> dict[str, list[str] | None]:
    """``{"<set>/" or "": the eval-log keys, or None when not known before evaluating}``."""
    hooks = ("validation_step", "aggregate_logs", "reduce_aggregated_logs")
    custom = any(getattr(type(task), hook) is not getattr(Task, hook) for hook in hooks)
    metrics = list(getattr(evaluator, "validation_metrics", ())) or [
        as_metric(m) for m in task.build_metrics(training=False)
    ]
    scalar = ("torchgarden.metrics.builtins", "torchgarden.metrics.confusion")
    keys = None if custom or not all(type(m).__module__ in scalar for m in metrics) else (
        ["validation_loss", *(m.name for m in metrics)])
    sets = getattr(evaluator, "validation_set_names", ())
    if not sets:
        return {"": keys}
    return {f"{s}/": None if keys is None else [f"{s}/{k}" for k in keys] for s in sets}
