"""``BestCheckpointExporter``: keep the checkpoint with the best eval metric.

Model Garden's ``train_utils.BestCheckpointExporter``, numbered by global step:

```
<export_dir>/info.json                scalar eval logs of the best evaluation + best_ckpt_global_step
<export_dir>/best_ckpt-<global_step>/ the checkpoint (only the latest best is kept)
```
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from torchgarden.checkpoint import layout
from torchgarden.checkpoint.checkpoint import Checkpoint
from torchgarden.checkpoint.errors import CorruptCheckpointError
from torchgarden.checkpoint.manager import CheckpointManager
from torchgarden.distribute.collectives import is_chief
from torchgarden.utils.files import atomic_write_json
from torchgarden.utils.metric_path import find_metric, has_metric

__all__ = ["BestCheckpointExporter"]

_INFO_FILE = "info.json"
_STEP_KEY = "best_ckpt_global_step"


def _scalar(value: Any) -> float | None:
    """A float for scalar-like values (numbers, 1-element arrays), else None."""
    if isinstance(value, bool | int | float | np.number | np.bool_):
        return float(value)
    if isinstance(value, np.ndarray) and value.size == 1:
        return float(value.reshape(()))
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return float(value.detach().reshape(()).item())  # sync point: once per evaluation
    return None


def _scalar_logs(logs: Mapping[str, Any]) -> dict[str, Any]:
    """Keeps the scalar leaves of nested logs as floats; drops images, strings, arrays."""
    kept: dict[str, Any] = {}
    for key, value in logs.items():
        leaf = _scalar_logs(value) if isinstance(value, Mapping) else _scalar(value)
        if leaf is not None and leaf != {}:
            kept[str(key)] = leaf
    return kept


def _lookup(logs: Mapping[str, Any], metric_name: str) -> Any:
    """``find_metric``; a missing one raises ``KeyError`` naming where its path breaks."""
    if has_metric(logs, metric_name):
        return find_metric(logs, metric_name)
    node: Any = logs
    walked = []
    for part in metric_name.split("|"):
        if not isinstance(node, Mapping) or part not in node:
            available = sorted(node) if isinstance(node, Mapping) else []
            where = "|".join(walked) or "<top level>"
            raise KeyError(
                f"metric {metric_name!r}: path not found while traversing the eval logs: "
                f"no key {part!r} under {where}; available keys: {available}.")
        walked.append(part)
        node = node[part]
    return node


class BestCheckpointExporter:
    """Exports the checkpoint with the best value of one eval metric.

    Call :meth:`maybe_export_checkpoint` after every evaluation. The first evaluation is
    the best; later ones replace it only when strictly better. ``info.json`` is reloaded at
    construction, so "best so far" survives restarts.

    Example:
        >>> exporter = BestCheckpointExporter(model_dir / "best_ckpt", "coco|AP", "higher")
        >>> if exporter.maybe_export_checkpoint(ckpt, eval_logs, global_step):
        ...     print("new best", exporter.best_metric_value)
        >>> eval_logs[exporter.best_key] = exporter.best_metric_value

    Args:
        export_dir: Directory of ``info.json`` and the best checkpoint.
        metric_name: The eval-log key to compare; ``|`` or ``/`` walks nested dicts
            (``"coco|AP"``, ``"digits/accuracy"``).
        metric_comp: ``"higher"`` or ``"lower"`` is better. Defaults to ``"higher"``.
        checkpoint_format: How the best checkpoint is written, ``"single"`` or ``"dcp"``
            (see ``CheckpointManager``). Defaults to ``"single"``.

    Raises:
        ValueError: ``metric_comp`` is neither ``"higher"`` nor ``"lower"``.
    """

    def __init__(
        self, export_dir: str | os.PathLike[str], metric_name: str, metric_comp: str = "higher",
        *, checkpoint_format: str = "single",
    ) -> None:
        if metric_comp not in ("higher", "lower"):
            raise ValueError(
                f"best checkpoint metric comp must be one of higher, lower. Got: {metric_comp}")
        if not metric_name:
            raise ValueError("metric_name must be a non-empty eval-log key, got ''.")
        self._export_dir = os.fspath(export_dir)
        self._metric_name = metric_name
        self._metric_comp = metric_comp
        self._format = checkpoint_format
        self._manager: CheckpointManager | None = None
        self._best_ckpt_logs = self._load_info()

    def _load_info(self) -> dict[str, Any] | None:
        path = self.best_ckpt_logs_path
        if not os.path.lexists(path):
            return None
        fix = "delete it to start the best-checkpoint record afresh"
        try:
            with open(path, encoding="utf-8") as f:
                info = json.load(f)
        except (OSError, ValueError) as e:
            raise CorruptCheckpointError(f"{path!r} is unreadable ({e}); {fix}.") from None
        if not isinstance(info, dict):
            raise CorruptCheckpointError(f"{path!r} holds no JSON object; {fix}.")
        name = self._metric_name
        if not has_metric(info, name) or _scalar(find_metric(info, name)) is None:
            raise CorruptCheckpointError(
                f"{path!r} records no best {self._metric_name!r} (was another metric "
                f"exported there?); {fix}, or export to another subdirectory.")
        return info

    @property
    def export_dir(self) -> str:
        """The export directory."""
        return self._export_dir

    @property
    def metric_name(self) -> str:
        """The compared eval-log key (``|`` separates nesting levels)."""
        return self._metric_name

    @property
    def metric_comp(self) -> str:
        """``"higher"`` or ``"lower"``."""
        return self._metric_comp

    @property
    def best_key(self) -> str:
        """The log key for the best value so far: ``"best_" + metric_name``."""
        return "best_" + self._metric_name

    @property
    def best_ckpt_logs(self) -> dict[str, Any] | None:
        """The scalar eval logs of the best evaluation (plus its global step), or None."""
        return self._best_ckpt_logs

    @property
    def best_ckpt_logs_path(self) -> str:
        """Path of ``info.json``."""
        return os.path.join(self._export_dir, _INFO_FILE)

    @property
    def best_ckpt_path(self) -> str | None:
        """Path of the exported best checkpoint, or None."""
        return layout.latest_checkpoint(self._export_dir, "best_ckpt")

    @property
    def best_metric_value(self) -> float | None:
        """The best metric value so far, or None before the first export."""
        if self._best_ckpt_logs is None:
            return None
        return float(_lookup(self._best_ckpt_logs, self._metric_name))

    def maybe_export_checkpoint(
        self, checkpoint: Checkpoint, eval_logs: Mapping[str, Any], global_step: int, *,
        config: dict[str, Any] | None = None,
    ) -> bool:
        """Exports ``checkpoint`` as ``best_ckpt-<global_step>`` if ``eval_logs`` is the best so far.

        The new checkpoint is durable (and the previous best deleted) before ``info.json``
        is replaced atomically.

        Args:
            checkpoint: The objects to export.
            eval_logs: The (possibly nested) eval logs holding ``metric_name``.
            global_step: The step of this evaluation; names the exported directory.
            config: The resolved experiment config, recorded in meta.json. Defaults to None.

        Returns:
            True when this evaluation became the best and was exported.

        Raises:
            KeyError: ``metric_name`` is not in ``eval_logs``; names the available keys.
            ValueError: The metric value is not a scalar.
        """
        raw = _lookup(eval_logs, self._metric_name)
        value = _scalar(raw)
        if value is None:
            raise ValueError(
                f"metric {self._metric_name!r} must be a scalar, got {type(raw).__name__}.")
        if math.isnan(value):  # Weights that evaluate to NaN are never the best.
            return False
        best = self.best_metric_value
        if best is not None and not math.isnan(best):
            better = value > best if self._metric_comp == "higher" else value < best
            if not better:
                return False
        step = int(global_step)
        if self._manager is None or self._manager.checkpoint is not checkpoint:
            self._manager = CheckpointManager(
                checkpoint, self._export_dir, max_to_keep=1, checkpoint_name="best_ckpt",
                checkpoint_format=self._format)
            # A failed write names what a rerun resumes from: the run's ckpt-<N>, never
            # this export (a rerun does not read it).
            self._manager._format._resume_from = self._training_resume_point
        self._manager.save(step, check_interval=False, config=config, extra={"best_value": value})
        logs = _scalar_logs(eval_logs)
        logs[_STEP_KEY] = step
        if is_chief():  # Every rank tracks the best; rank 0 writes.
            atomic_write_json(self.best_ckpt_logs_path, logs)
        self._best_ckpt_logs = logs
        return True

    def _training_resume_point(self) -> str | None:
        """The newest ``ckpt-<N>`` of the model_dir holding the export (the nearest
        directory above it that has one), or None."""
        directory = os.path.dirname(os.path.abspath(self._export_dir))
        for _ in range(4):  # The export lies inside model_dir, usually right below it.
            latest = layout.latest_checkpoint(directory)
            parent = os.path.dirname(directory)
            if latest is not None or parent == directory:
                return latest
            directory = parent
        return None

    def __repr__(self) -> str:
        return (f"BestCheckpointExporter(export_dir={self._export_dir!r}, "
                f"metric_name={self._metric_name!r}, metric_comp={self._metric_comp!r})")
