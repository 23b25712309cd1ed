"""What an export is made from: a model_dir's checkpoint, its config, weights and metrics.

``resolve_source(model_dir, checkpoint="auto", ema=None)`` picks the checkpoint (the
best one if the run kept one, else the latest), verifies it, reads its config (the one
it was trained with, from its ``meta.json``; else ``model_dir/params.yaml``) and selects
the weights: the exponential moving average when the run kept one (``ema=None`` or
True), the raw weights with ``ema=False``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
from collections.abc import Mapping
from typing import Any

import torch
from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator

from torchgarden import registry
from torchgarden.checkpoint import (
    CheckpointError,
    CheckpointManager,
    checkpoint_number,
    layout,
    read_full_state,
    read_meta,
    selection,
)
from torchgarden.config import ExperimentConfig, diff
from torchgarden.export.errors import ExportError

__all__ = ["ExportSource", "find_checkpoint", "resolve_source", "select_weights"]

_BEST_INFO = "info.json"
#: Checkpoint choices made by scanning (not a path): rescanned when a live run deletes one.
_CHOSEN = ("auto", "best", "latest")
#: How often a choice is made again when a live run deleted the chosen checkpoint.
_RESCANS = 20
_logger = logging.getLogger("torchgarden")


@dataclasses.dataclass
class ExportSource:
    """A resolved checkpoint and what it holds.

    Args:
        model_dir: The run's directory.
        checkpoint_path: The checkpoint directory (``ckpt-<N>`` or ``best_ckpt-<N>``).
        step: Its global step.
        params: The experiment config it was trained with.
        weights: The model's state dict (CPU tensors) to export.
        ema: Whether ``weights`` are the exponential moving average.
        metrics: Scalar eval metrics at ``step`` (``{}`` when none were recorded).
        experiment: The registered experiment name of the task (else its config class).
        config_sha256: sha256 of the config as key-sorted JSON.
    """

    model_dir: str
    checkpoint_path: str
    step: int
    params: ExperimentConfig
    weights: dict[str, torch.Tensor]
    ema: bool
    metrics: dict[str, Any]
    experiment: str
    config_sha256: str


def _best_dir(model_dir: str, params: ExperimentConfig | None) -> str | None:
    subdir = params.trainer.best_checkpoint_export_subdir if params is not None else ""
    return os.path.join(model_dir, subdir) if subdir else None


def _params_yaml(model_dir: str) -> ExperimentConfig | None:
    path = os.path.join(model_dir, "params.yaml")
    return ExperimentConfig.from_yaml(path) if os.path.isfile(path) else None


def find_checkpoint(model_dir: str, checkpoint: str = "auto") -> str:
    """The checkpoint directory ``checkpoint`` names in ``model_dir``.

    Args:
        model_dir: The run's directory.
        checkpoint: ``"auto"`` (best if any, else latest), ``"best"``, ``"latest"`` or a
            checkpoint directory path.

    Raises:
        ExportError: There is no such checkpoint.
    """
    if checkpoint not in ("auto", "best", "latest"):
        if not os.path.isdir(checkpoint):
            raise ExportError(f"--checkpoint {checkpoint}: no such checkpoint directory; pass "
                              "best, latest or a ckpt-<N> directory.")
        return checkpoint
    if not os.path.isdir(model_dir):
        raise ExportError(f"--model_dir {model_dir} does not exist.")
    latest = _newest_verified(model_dir, "ckpt")
    params = _params_yaml(model_dir)
    if params is None and latest is not None:
        params = _config_of(latest)
    best_dir = _best_dir(model_dir, params)
    best = _newest_verified(best_dir, "best_ckpt") if best_dir else None
    if checkpoint == "best" and best is None:
        where = f"{best_dir}/best_ckpt-<N>" if best_dir else "a best_ckpt (the run kept none: " \
            "set trainer.best_checkpoint_export_subdir and best_checkpoint_eval_metric)"
        raise ExportError(f"--model_dir {model_dir} has no best checkpoint ({where}); "
                          "use --checkpoint latest.")
    found = latest if checkpoint == "latest" else best or latest
    if found is None:
        raise ExportError(f"--model_dir {model_dir} holds no checkpoint (no ckpt-<N>/ with "
                          "meta.json); train first: torchgarden train --model_dir ...")
    return found


def _newest_verified(directory: str, name: str) -> str | None:
    """The newest ``<name>-<N>`` whose manifest and hashes verify; others are named in a
    warning and skipped (as a resumed run skips them). One that a live run's retention
    deleted while it was read is no fault: the directory is scanned again."""
    for _ in range(_RESCANS):
        for _, candidate in reversed(layout.entries(directory, name)):
            try:
                if (link := layout.link_problem(candidate)) is not None:
                    raise CheckpointError(link)
                layout.verify(candidate)
            except (CheckpointError, OSError) as e:
                if not os.path.lexists(candidate):
                    break  # Deleted meanwhile: newer ones may exist now.
                if isinstance(e, OSError):
                    raise
                _logger.warning("skipping checkpoint %s: %s", candidate, e)
                continue
            return candidate
        else:
            return None
    return None


def _config_of(path: str) -> ExperimentConfig | None:
    config = read_meta(path).get("config")
    return ExperimentConfig.from_dict(config) if config else None


def select_weights(state: Mapping[str, Any], ema: bool | None) -> tuple[dict[str, Any], bool]:
    """The model weights of a checkpoint state, averaged (EMA) or raw.

    A checkpoint holds ``model`` and, when the run kept one, ``ema`` (``shadow`` weights
    and whether they were ``swapped`` into the model when it was saved: a best
    checkpoint is saved during evaluation, with the averages in the model).

    Args:
        state: The loaded checkpoint (``{"model": ..., "ema": ...}``).
        ema: True for the averages, False for the raw weights, None for the averages
            when there are any.

    Returns:
        ``(weights, is_average)``.

    Raises:
        ExportError: ``ema=True`` on a checkpoint without averages.
    """
    model = dict(state["model"])
    averages = state.get("ema")
    if averages is None:
        if ema:
            raise ExportError("--ema: the checkpoint holds no exponential moving average "
                              "(trainer.optimizer_config.ema was off); drop --ema.")
        return model, False
    want_average = ema is None or ema
    if bool(averages.get("swapped")) != want_average:
        model.update(averages["shadow"])  # the shadow holds the other set of weights
    return model, want_average


def _metrics_at(model_dir: str, checkpoint_path: str, step: int,
                params: ExperimentConfig) -> dict[str, Any]:
    """Eval scalars of ``step``: the best export's info.json, else TensorBoard's files."""
    info = os.path.join(os.path.dirname(checkpoint_path), _BEST_INFO)
    if os.path.basename(checkpoint_path).startswith("best_ckpt-") and os.path.isfile(info):
        with open(info, encoding="utf-8") as f:
            logs = json.load(f)
        if logs.get("best_ckpt_global_step") == step:
            return {k: v for k, v in logs.items() if k != "best_ckpt_global_step"}
    found: dict[str, Any] = {}
    root = os.path.join(model_dir, params.trainer.validation_summary_subdir)
    for directory, _, files in os.walk(root):
        if not any(".tfevents." in name for name in files):
            continue
        events = EventAccumulator(directory, size_guidance={SCALARS: 0})
        events.Reload()
        prefix = os.path.relpath(directory, root)
        for tag in events.Tags()["scalars"]:
            values = [e.value for e in events.Scalars(tag) if e.step == step]
            if values:
                found[tag if prefix == "." else f"{prefix}/{tag}"] = values[-1]
    return found


def _experiment_name(params: ExperimentConfig) -> str:
    """The registered experiment whose task config class is this run's and whose defaults
    differ from it in the fewest keys (``resnet_imagenet`` and ``image_classification``
    share a class); else the class."""
    task_type = type(params.task)
    candidates = {name: registry.get_experiment(name) for name in registry.list_experiments()}
    matching = [name for name, config in candidates.items() if type(config.task) is task_type]
    if not matching:
        return f"{task_type.__module__}.{task_type.__qualname__}"
    return min(matching, key=lambda name: len(diff(candidates[name], params)))


def resolve_source(model_dir: str, checkpoint: str = "auto",
                   ema: bool | None = None) -> ExportSource:
    """Picks, verifies and reads the checkpoint to export (see the module docstring).

    Raises:
        ExportError: No checkpoint, no config, or ``ema=True`` without averages.
        CheckpointError: The checkpoint is corrupt or unsafe to load.
    """
    for _ in range(_RESCANS - 1):
        path = find_checkpoint(model_dir, checkpoint)
        try:
            return _read_source(model_dir, path, ema, verified=checkpoint in _CHOSEN)
        except (CheckpointError, OSError):
            # A live run's retention deleted it between the choice and the read: choose
            # again. (An open file stays readable, so a read that began completes.)
            if checkpoint not in _CHOSEN or os.path.lexists(path):
                raise
            _logger.info("%s was deleted by its run while it was read; choosing again.", path)
    return _read_source(model_dir, find_checkpoint(model_dir, checkpoint), ema,
                        verified=checkpoint in _CHOSEN)


def _read_source(model_dir: str, path: str, ema: bool | None, *,
                 verified: bool) -> ExportSource:
    if not verified:  # A chosen checkpoint was verified as it was chosen: read it once more.
        CheckpointManager.verify(path)
    params = _config_of(path) or _params_yaml(model_dir)
    if params is None:
        raise ExportError(f"{path}: its meta.json records no config and {model_dir} has no "
                          "params.yaml; cannot tell which task built this model.")
    step = checkpoint_number(path)
    state = read_full_state(path)  # Either format: a sharded one is read in full here.
    recorded = selection.recorded_step(state)
    if recorded is not None and recorded != step:
        raise ExportError(f"{path}: its state records global step {recorded} but it is named "
                          f"for step {step}; pass another --checkpoint.")
    weights, used_ema = select_weights(state, ema)
    config_json = json.dumps(params.as_dict(), sort_keys=True, default=str)
    return ExportSource(
        model_dir=model_dir, checkpoint_path=path, step=step, params=params,
        weights=weights, ema=used_ema, metrics=_metrics_at(model_dir, path, step, params),
        experiment=_experiment_name(params),
        config_sha256=hashlib.sha256(config_json.encode("utf-8")).hexdigest(),
    )
