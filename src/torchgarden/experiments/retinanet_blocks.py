"""Model Garden's RetinaNet model blocks: ``anchor``, ``decoder`` (FPN), ``head`` and
``detection_generator``, with Model Garden's field names.

Options torchgarden's RetinaNet (`torchgarden.vision.RetinaNet`) does not build are refused
in one line naming the key. Defaults are the small built-in experiment's; Model Garden's
(``anchor_size: 4``, 256-wide FPN and head of 4 convs, ``pre_nms_top_k: 5000``) are set by
its experiments (``retinanet_resnetfpn_coco``). This module is torch-free.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

from torchgarden.config import Config
from torchgarden.config.errors import ConfigError
from torchgarden.config.notices import ModelGardenKey, ignored, mapped
from torchgarden.config.oneof import OneOfConfig

__all__ = ["FPN", "Anchor", "Decoder", "DetectionGenerator", "RetinaNetHeadConfig"]


@dataclasses.dataclass
class Anchor(Config):
    """Model Garden's anchor block."""

    num_scales: int = 3
    """Anchor scales per octave. Defaults to 3."""
    aspect_ratios: list[float] = dataclasses.field(default_factory=lambda: [0.5, 1.0, 2.0])
    """Anchor width/height ratios. Defaults to [0.5, 1.0, 2.0]."""
    anchor_size: float = 2.0
    """Anchor size in units of the level's stride. Defaults to 2.0 (Model Garden: 4.0)."""


@dataclasses.dataclass
class FPN(Config):
    """Model Garden's FPN decoder block."""

    MODEL_GARDEN_KEYS: ClassVar[Mapping[str, ModelGardenKey]] = {
        "use_keras_layer": ignored("a Keras layer-graph option; the pyramid is torch modules"),
    }

    num_filters: int = 64
    """Width of every pyramid level. Defaults to 64 (Model Garden: 256)."""
    fusion_type: str = "sum"
    """How a coarser level joins a finer one; only ``sum`` is built. Defaults to sum."""
    use_separable_conv: bool = False
    """Keras' separable convolutions (depthwise, then 1x1) for every pyramid conv.
    Defaults to False."""
    batch_norm: bool = False
    """(torchgarden) Batch norm on every output level, as Model Garden's FPN always has
    (its RetinaNet experiments set it); False is torchgarden's small pyramid. Defaults to
    False."""

    def check(self) -> None:
        _only(self, "fusion_type", "sum")


@dataclasses.dataclass
class Decoder(OneOfConfig):
    """Model Garden's decoder one-of; RetinaNet builds ``fpn``."""

    type: str | None = "fpn"
    """``fpn`` (``identity`` and ``aspp`` are refused for RetinaNet). Defaults to fpn."""
    fpn: FPN = dataclasses.field(default_factory=FPN)
    """FPN options."""
    identity: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Backbone levels as they are (refused: the head needs equal widths)."""
    aspp: dict[str, Any] = dataclasses.field(default_factory=dict)
    """ASPP options (a segmentation decoder; refused here)."""

    def check(self) -> None:
        if self.type != "fpn":
            key = self.field_path("type")
            raise ConfigError(f"{key}: {self.type!r} is not built for RetinaNet; use fpn",
                              key=key)


@dataclasses.dataclass
class RetinaNetHeadConfig(Config):
    """Model Garden's RetinaNet head block: class and box towers shared by all levels."""

    num_convs: int = 2
    """3x3 convs per tower. Defaults to 2 (Model Garden: 4)."""
    num_filters: int = 64
    """Width of the towers. Defaults to 64 (Model Garden: 256)."""
    use_separable_conv: bool = False
    """Keras' separable convolutions (depthwise, then 1x1; Glorot-uniform, as Keras
    initialises them) for the tower convs, classifier and box regressor. Defaults to
    False."""
    attribute_heads: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    """Extra per-box attribute heads; only [] is built. Defaults to []."""
    share_classification_heads: bool = False
    """Only False is built. Defaults to False."""
    share_level_convs: bool = True
    """The tower convs are shared by all levels; only True is built. Defaults to True."""
    norm_per_level: bool = False
    """(torchgarden) One set of tower batch norms per level, as Model Garden's head always
    has (its RetinaNet experiments set it); False shares them. Defaults to False."""

    def check(self) -> None:
        _only(self, "attribute_heads", [])
        _only(self, "share_classification_heads", False)
        _only(self, "share_level_convs", True)


@dataclasses.dataclass
class DetectionGenerator(Config):
    """Model Garden's detection generator: decoding and per-class NMS."""

    MODEL_GARDEN_KEYS: ClassVar[Mapping[str, ModelGardenKey]] = {
        "use_cpu_nms": ignored("device placement of TF's NMS; torchgarden's runs on the "
                               "model's device"),
        "nms_version": mapped(values={"v1": "v2", "batched": "v2"},
                              note="every version is per-class NMS here"),
        "tflite_post_processing": ignored("TFLite export options"),
    }

    apply_nms: bool = True
    """Only True is built. Defaults to True."""
    decode_boxes: bool = True
    """Only True is built. Defaults to True."""
    pre_nms_top_k: int = 1000
    """Candidates per image entering NMS. Defaults to 1000 (Model Garden: 5000)."""
    pre_nms_score_threshold: float = 0.05
    """Detections must score above this. Defaults to 0.05."""
    nms_iou_threshold: float = 0.5
    """Per-class NMS IoU threshold. Defaults to 0.5."""
    max_num_detections: int = 100
    """Detections kept per image. Defaults to 100."""
    nms_version: str = "v2"
    """``v2`` (``v1`` and ``batched`` read as v2: all are per-class NMS); ``tflite`` is
    refused. Defaults to v2."""
    soft_nms_sigma: float | None = None
    """Soft-NMS; only None is built. Defaults to None."""
    return_decoded: bool | None = None
    """Also return the decoded boxes before NMS; only None/False is built."""
    use_class_agnostic_nms: bool | None = False
    """Only False is built. Defaults to False."""
    box_coder_weights: list[float] | None = None
    """Box coder weights (y, x, h, w); None = 1s. Defaults to None."""

    def check(self) -> None:
        _only(self, "apply_nms", True)
        _only(self, "decode_boxes", True)
        _only(self, "nms_version", "v2")
        _only(self, "soft_nms_sigma", None)
        if self.return_decoded:
            _only(self, "return_decoded", None)
        if self.use_class_agnostic_nms:
            _only(self, "use_class_agnostic_nms", False)
        if self.box_coder_weights is not None and len(self.box_coder_weights) != 4:
            key = self.field_path("box_coder_weights")
            raise ConfigError(f"{key} must be 4 weights, received {self.box_coder_weights}",
                              key=key)


def _only(config: Config, name: str, value: Any) -> None:
    """Refuses every value of ``name`` but ``value`` (what torchgarden builds)."""
    if getattr(config, name) != value:
        key = config.field_path(name)
        raise ConfigError(f"{key}: {getattr(config, name)!r} is not built by torchgarden's "
                          f"RetinaNet; only {value!r} is", key=key)
