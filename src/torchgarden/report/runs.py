"""What a report shows of one model_dir: its scalars, config, best metric and images.

Scalars come from ``metrics.jsonl`` (the run's own, and those of evaluation jobs one
directory down); a model_dir without one is read from its TensorBoard event files
instead. Images always come from the event files, through TensorBoard's own reader
(``EventAccumulator``, which also hides what an interrupted run wrote past its resume).
"""

from __future__ import annotations

import dataclasses
import glob
import os
from collections.abc import Iterator, Mapping
from typing import Any

import yaml

from torchgarden.summary import METRICS_FILE, read_metrics
from torchgarden.utils.logs import flatten

__all__ = ["Image", "Run", "load_run"]

Series = list[tuple[int, float]]


@dataclasses.dataclass
class Image:
    """The last image summary of a tag: PNG bytes at a step."""

    split: str
    tag: str
    step: int
    png: bytes


@dataclasses.dataclass
class Run:
    """One model_dir as a report sees it.

    Attributes:
        name: A short label (the directory's name; made unique by ``load_runs``).
        path: The model_dir.
        scalars: ``{(split, tag): [(step, value), ...]}`` in step order, one value per step.
        config: The resolved config (``params.yaml``) as dotted keys; {} without one.
        best_metric: ``(tag, "higher" | "lower")`` of ``trainer.best_checkpoint_eval_metric``.
        images: The last image of each image tag.
    """

    name: str
    path: str
    scalars: dict[tuple[str, str], Series]
    config: dict[str, Any]
    best_metric: tuple[str, str] | None
    images: list[Image]


def _metrics_files(model_dir: str) -> list[str]:
    own = os.path.join(model_dir, METRICS_FILE)
    return [p for p in [own, *sorted(glob.glob(os.path.join(model_dir, "*", METRICS_FILE)))]
            if os.path.isfile(p)]


def _scalars_from_metrics(paths: list[str]) -> dict[tuple[str, str], Series]:
    latest: dict[tuple[str, str], dict[int, float]] = {}
    for path in paths:
        for row in read_metrics(path):
            split, step = str(row["split"]), int(row["step"])
            for key, value in row.items():
                if key not in ("step", "split", "wall_time") and isinstance(value, int | float):
                    latest.setdefault((split, key), {})[step] = float(value)  # Last write wins.
    return {key: sorted(points.items()) for key, points in latest.items()}


def _event_dirs(model_dir: str) -> Iterator[tuple[str, str]]:
    """``(directory, split/prefix)`` of each directory holding event files."""
    for directory, _, files in sorted(os.walk(model_dir)):
        if any(name.startswith("events.out.tfevents.") for name in files):
            relative = os.path.relpath(directory, model_dir).replace(os.sep, "/")
            if relative != ".":
                yield directory, relative


def _accumulator(directory: str) -> Any:
    from tensorboard.backend.event_processing import event_accumulator

    acc = event_accumulator.EventAccumulator(
        directory, size_guidance={event_accumulator.SCALARS: 0, event_accumulator.IMAGES: 1})
    acc.Reload()
    return acc


def _split_tag(relative: str, tag: str) -> tuple[str, str]:
    split, _, prefix = relative.partition("/")
    return split, f"{prefix}/{tag}" if prefix else tag


def _read_events(model_dir: str, with_scalars: bool) -> tuple[dict, list[Image]]:
    scalars: dict[tuple[str, str], Series] = {}
    images: list[Image] = []
    for directory, relative in _event_dirs(model_dir):
        acc = _accumulator(directory)
        tags = acc.Tags()
        for tag in tags.get("scalars", []) if with_scalars else []:
            points = {event.step: float(event.value) for event in acc.Scalars(tag)}
            scalars[_split_tag(relative, tag)] = sorted(points.items())
        for tag in tags.get("images", []):
            last = acc.Images(tag)[-1]
            split, name = _split_tag(relative, tag)
            images.append(Image(split, name, int(last.step), bytes(last.encoded_image_string)))
    return scalars, images


def _best_metric(config: Mapping[str, Any]) -> tuple[str, str] | None:
    metric = config.get("trainer.best_checkpoint_eval_metric")
    if not metric:
        return None
    return str(metric).replace("|", "/"), str(config.get("trainer.best_checkpoint_metric_comp",
                                                          "higher"))


def load_run(model_dir: str | os.PathLike[str], name: str | None = None) -> Run:
    """Reads ``model_dir`` for a report.

    Raises:
        FileNotFoundError: ``model_dir`` is not a directory, or holds no metrics file and
            no TensorBoard event files.
    """
    model_dir = os.fspath(model_dir)
    if not os.path.isdir(model_dir):
        raise FileNotFoundError(f"{model_dir} is not a directory (expected a model_dir).")
    metric_files = _metrics_files(model_dir)
    scalars, images = _read_events(model_dir, with_scalars=not metric_files)
    if metric_files:
        scalars = _scalars_from_metrics(metric_files)
    if not scalars and not images:
        raise FileNotFoundError(
            f"{model_dir} holds no {METRICS_FILE} and no TensorBoard event files; point "
            "`torchgarden report` at a directory a run wrote (--model_dir of torchgarden train)."
        )
    params = os.path.join(model_dir, "params.yaml")
    config: dict[str, Any] = {}
    if os.path.isfile(params):
        with open(params, encoding="utf-8") as f:
            config = flatten(yaml.safe_load(f) or {}, sep=".")
    return Run(name=name or os.path.basename(os.path.abspath(model_dir)), path=model_dir,
               scalars=scalars, config=config, best_metric=_best_metric(config), images=images)
