"""Model Garden experiment families torchgarden does not have, told from a YAML file.

A Model Garden experiment YAML is written for one family of models. A key only that family
has (``task.model.mask_head``), the ``# --experiment_type=NAME`` comment Model Garden's
YAMLs carry, or the directory Model Garden keeps it in (``configs/experiments/maskrcnn/``)
tells which. When such a file is refused, `unprovided_family` gives the one-line reason,
naming the family and what shows it, instead of the first key some other experiment does
not know. A file of such a family that a torchgarden experiment takes whole (a Mask R-CNN
YAML whose keys are all RetinaNet's, under ``--experiment retinanet_resnetfpn_coco``) is
read as that experiment, as Model Garden reads it under the same experiment.

This module is torch-free.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterator, Mapping
from typing import Any

from torchgarden.config.errors import ConfigError

__all__ = ["FAMILIES", "Family", "UnprovidedFamilyError", "experiment_types", "unprovided_family"]


@dataclasses.dataclass(frozen=True)
class Family:
    """A Model Garden experiment family and what shows a YAML is written for it."""

    name: str
    """What the family is called in messages."""
    experiments: tuple[str, ...]
    """Prefixes of Model Garden's experiment names of the family."""
    directories: tuple[str, ...]
    """Directories under Model Garden's ``configs/experiments/`` (or a project's
    ``configs/``) holding its YAMLs."""
    keys: tuple[str, ...]
    """Dotted keys (or key prefixes) only this family's configs have."""


class UnprovidedFamilyError(ConfigError):
    """A YAML of a Model Garden family torchgarden does not have (its one line says which)."""


#: The Model Garden families a YAML is recognised as, that torchgarden does not train.
FAMILIES: tuple[Family, ...] = (
    Family("Mask R-CNN (instance segmentation)",
           experiments=("maskrcnn", "cascadercnn", "deep_mask_head_rcnn"),
           directories=("maskrcnn",),
           keys=("task.model.mask_head", "task.model.rpn_head", "task.model.detection_head",
                 "task.model.roi_sampler", "task.model.roi_aligner", "task.model.roi_generator",
                 "task.model.mask_sampler", "task.model.mask_roi_aligner",
                 "task.model.include_mask")),
    Family("video classification",
           experiments=("video_classification", "movinet"),
           directories=("video_classification", "movinet"),
           keys=("task.model.aggregate_endpoints", "task.model.backbone.resnet_3d",
                 "task.model.backbone.resnet_3d_rs", "task.model.backbone.movinet",
                 "task.train_data.feature_shape", "task.train_data.temporal_stride",
                 "task.train_data.num_test_clips")),
    Family("NLP (BERT-style encoders: pretraining, sentence prediction, question answering, "
           "tagging, translation)",
           experiments=("bert", "electra", "teams", "albert", "mobilebert", "roformer", "xlnet",
                        "bigbird", "longformer", "wmt_transformer", "sentence_prediction",
                        "question_answering", "tagging", "masked_lm"),
           directories=("nlp",),
           keys=("task.hub_module_url", "task.model.encoder", "task.model.cls_heads",
                 "task.train_data.seq_length", "task.max_answer_length", "task.n_best_size",
                 "task.metric_type", "task.train_data.max_predictions_per_seq")),
    Family("MaxViT", experiments=("maxvit",), directories=("maxvit",),
           keys=("task.model.backbone.maxvit",)),
    Family("YOLO (darknet detectors)", experiments=("yolo", "scaled_yolo"),
           directories=("yolo", "scaled-yolo"),
           keys=("task.model.backbone.darknet", "task.model.darknet_based_model",
                 "task.model.anchor_boxes")),
    Family("BASNet (salient object detection)", experiments=("basnet",),
           directories=("basnet",), keys=()),
    Family("MOSAIC (mobile semantic segmentation)", experiments=("mosaic",),
           directories=("mosaic",), keys=("task.model.neck.branch_filter_depths",
                                          "task.model.head.decoder_input_levels")),
)

_HAS = ("torchgarden's Model Garden experiments are image classification, RetinaNet and "
        "semantic segmentation")



def unprovided_family(path: str, data: Mapping[str, Any]) -> UnprovidedFamilyError | None:
    """The refusal of a YAML written for a family torchgarden does not have, or None.

    Args:
        path: The file (its ``--experiment_type`` comment and directory are read).
        data: The file's mapping.

    Returns:
        A one-line `UnprovidedFamilyError` naming the family and the key, experiment name or
        directory that shows it; None when the file shows no such family.
    """
    leaves = list(_leaves(data))
    named = experiment_types(path)
    # The folders Model Garden keeps the file in: .../configs/experiments/maskrcnn/,
    # official/projects/basnet/configs/..., official/nlp/configs/experiments/.
    parts = os.path.normpath(os.path.abspath(path)).split(os.sep)[:-1][-3:]
    for family in FAMILIES:
        key = next((f for k in leaves for f in family.keys
                    if k == f or k.startswith(f"{f}.")), None)
        name = next((n for n in named if n.startswith(family.experiments)), None)
        folder = next((d for d in family.directories if d in parts), None)
        if key:
            shows = f"its key {key}"
        elif name:
            shows = f"--experiment_type={name}"
        elif folder:
            shows = f"its directory {folder}/"
        else:
            continue
        return UnprovidedFamilyError(
            f"{path}: a Model Garden {family.name} experiment ({shows}), a family torchgarden "
            f"does not have; {_HAS} (see `torchgarden list`)", key=key)
    return None


def experiment_types(path: str) -> list[str]:
    """The experiment names the file's ``--experiment_type=NAME`` comments give (as Model
    Garden's YAMLs carry them); [] for an unreadable file."""
    try:
        with open(path, encoding="utf-8") as f:
            return re.findall(r"--experiment(?:_type)?[= ](\w+)", f.read())
    except (OSError, UnicodeDecodeError):
        return []


def _leaves(data: Any, prefix: str = "") -> Iterator[str]:
    if isinstance(data, Mapping) and data:
        for key, value in data.items():
            yield from _leaves(value, f"{prefix}.{key}" if prefix else str(key))
    elif prefix:
        yield prefix
