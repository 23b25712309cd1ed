"""Model Garden's semantic-segmentation model blocks: ``decoder`` (ASPP, FPN, identity),
``head`` and ``losses``, with Model Garden's field names and defaults.

They shape the DeepLab-style model (`torchgarden.vision.deeplab`) built on a Model Garden
backbone (``task.model.backbone.type``); options it does not build are refused in one line
naming the key. This module is torch-free.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

from torchgarden.config import Config
from torchgarden.config.errors import ConfigError, choose, require
from torchgarden.config.notices import ModelGardenKey, ignored
from torchgarden.config.oneof import OneOfConfig
from torchgarden.experiments.retinanet_blocks import FPN

__all__ = ["ASPP", "SegmentationDecoder", "SegmentationEvaluationConfig",
           "SegmentationHeadConfig", "SegmentationLossConfig"]

#: Head feature fusions that are built.
FUSIONS = (None, "deeplabv3plus", "deeplabv3plus_sum_to_merge", "pyramid_fusion")


@dataclasses.dataclass
class ASPP(Config):
    """Model Garden's atrous spatial pyramid pooling decoder (DeepLabV3)."""

    level: int = 4
    """Backbone level it runs on. Defaults to 4."""
    dilation_rates: list[int] = dataclasses.field(default_factory=list)
    """Dilations of its 3x3 branches (beside a 1x1 and an image-pooling branch).
    Defaults to []."""
    dropout_rate: float = 0.0
    """Dropout after the projection. Defaults to 0.0."""
    num_filters: int = 256
    """Width of every branch and of the output. Defaults to 256."""
    use_depthwise_convolution: bool = False
    """Depthwise-separable dilated branches. Defaults to False."""
    pool_kernel_size: list[int] | None = None
    """``[height, width]`` of the pooling branch's average pool in input pixels (divided by
    ``2**level``); None or [] = global average pooling. Defaults to None."""
    spp_layer_version: str = "v1"
    """The pyramid pooling layer; only ``v1`` is built. Defaults to v1."""
    output_tensor: bool = False
    """Return a tensor instead of ``{level: tensor}``; the head reads either. Defaults to
    False."""

    def check(self) -> None:
        require(self, "level", self.level >= 1, ">= 1")
        require(self, "num_filters", self.num_filters >= 1, ">= 1")
        require(self, "dilation_rates", all(r >= 1 for r in self.dilation_rates), "rates >= 1")
        require(self, "pool_kernel_size", not self.pool_kernel_size or (
            len(self.pool_kernel_size) == 2 and min(self.pool_kernel_size) >= 2**self.level),
            f"None or [height, width] >= 2**level ({2**self.level})")
        require(self, "dropout_rate", 0 <= self.dropout_rate < 1, "in [0, 1)")
        choose(self, "spp_layer_version", ("v1",))


@dataclasses.dataclass
class SegmentationDecoder(OneOfConfig):
    """Model Garden's decoder one-of for segmentation."""

    type: str | None = "identity"
    """``identity`` (backbone levels as they are), ``aspp`` or ``fpn``; ``nasfpn`` is refused.
    Defaults to identity (Model Garden's)."""
    identity: dict[str, Any] = dataclasses.field(default_factory=dict)
    """No options."""
    aspp: ASPP = dataclasses.field(default_factory=ASPP)
    """ASPP options."""
    fpn: FPN = dataclasses.field(default_factory=lambda: FPN(num_filters=256, batch_norm=True))
    """FPN options (Model Garden's: 256 filters, batch norm)."""
    nasfpn: dict[str, Any] = dataclasses.field(default_factory=dict)
    """NAS-FPN options (the type is refused, so they are not read)."""

    def check(self) -> None:
        choose(self, "type", ("identity", "aspp", "fpn"))


@dataclasses.dataclass
class SegmentationHeadConfig(Config):
    """Model Garden's segmentation head: fusion, convolutions, classifier."""

    level: int | str = 3
    """Decoder level the head reads (and predicts at). Defaults to 3."""
    num_convs: int = 2
    """3x3 convolution + batch norm + activation layers before the classifier. Defaults to 2."""
    num_filters: int = 256
    """Their width. Defaults to 256."""
    use_depthwise_convolution: bool = False
    """Depthwise 3x3 + batch norm, then a 1x1 convolution, for each layer. Defaults to False."""
    prediction_kernel_size: int = 1
    """Kernel of the classifier. Defaults to 1."""
    upsample_factor: int = 1
    """Nearest upsampling before the classifier. Defaults to 1."""
    logit_activation: str | None = None
    """Activation on the logits; only None is built (the loss takes logits). Defaults to None."""
    feature_fusion: str | None = None
    """None, ``deeplabv3plus`` (concatenate the reduced ``low_level`` backbone feature),
    ``deeplabv3plus_sum_to_merge`` (add it) or ``pyramid_fusion`` (sum every decoder level
    resized to ``level``); ``panoptic_fpn_fusion`` is refused. Defaults to None."""
    low_level: int | str = 2
    """Backbone level fused by ``deeplabv3plus``. Defaults to 2."""
    low_level_num_filters: int = 48
    """Width the low-level feature is reduced to. Defaults to 48."""
    decoder_min_level: int | str | None = None
    """For ``panoptic_fpn_fusion`` (refused). Defaults to None."""
    decoder_max_level: int | str | None = None
    """For ``panoptic_fpn_fusion`` (refused). Defaults to None."""

    def check(self) -> None:
        if self.feature_fusion not in FUSIONS:
            key = self.field_path("feature_fusion")
            raise ConfigError(f"{key}: {self.feature_fusion!r} is not built; use one of "
                              f"{', '.join(map(repr, FUSIONS))}", key=key)
        require(self, "num_convs", self.num_convs >= 0, ">= 0")
        require(self, "upsample_factor", self.upsample_factor >= 1, ">= 1")
        require(self, "prediction_kernel_size", self.prediction_kernel_size % 2 == 1, "odd")
        require(self, "logit_activation", self.logit_activation is None,
                "None (the loss takes logits)")
        for name in ("level", "low_level"):
            require(self, name, str(getattr(self, name)).isdigit(),
                    "a backbone level number (Model Garden's '2/depthwise' endpoints are "
                    "not built)")


@dataclasses.dataclass
class SegmentationLossConfig(Config):
    """Model Garden's segmentation loss: per-pixel softmax cross-entropy."""

    MODEL_GARDEN_KEYS: ClassVar[Mapping[str, ModelGardenKey]] = {
        "mask_scoring_weight": ignored("weights the mask-scoring head's loss; "
                                       "task.model.mask_scoring_head is not built"),
    }

    loss_weight: float = 1.0
    """Multiplies the whole loss. Defaults to 1.0."""
    label_smoothing: float = 0.0
    """One-hot targets become ``onehot * (1 - s) + s / num_classes``. Defaults to 0.0."""
    ignore_label: int = 255
    """Mask value of pixels left out of the loss and the metrics. Defaults to 255."""
    gt_is_matting_map: bool = False
    """Masks are matting maps; only False is built. Defaults to False."""
    class_weights: list[float] = dataclasses.field(default_factory=list)
    """Per-class weight of each pixel's loss (the normaliser stays the valid-pixel count);
    [] = all 1. Defaults to []."""
    l2_weight_decay: float = 0.0
    """L2 penalty ``l2_weight_decay / 2 * sum(w**2)`` over convolution kernels.
    Defaults to 0.0."""
    use_groundtruth_dimension: bool = True
    """True: logits are resized (bilinear) to the masks; False: masks are resized (nearest)
    to the logits. Defaults to True."""
    use_binary_cross_entropy: bool = False
    """Sigmoid instead of softmax cross-entropy; only False is built. Defaults to False."""
    top_k_percent_pixels: float = 1.0
    """Fraction of all pixels whose losses (the largest) are averaged; 1.0 = every valid
    pixel. Defaults to 1.0."""

    def check(self) -> None:
        require(self, "gt_is_matting_map", not self.gt_is_matting_map,
                "false (matting-map ground truth is not provided)")
        require(self, "use_binary_cross_entropy", not self.use_binary_cross_entropy,
                "false (the loss is softmax cross-entropy)")
        require(self, "label_smoothing", 0 <= self.label_smoothing < 1, "in [0, 1)")
        require(self, "top_k_percent_pixels", 0 < self.top_k_percent_pixels <= 1, "in (0, 1]")
        require(self, "l2_weight_decay", self.l2_weight_decay >= 0, ">= 0")


@dataclasses.dataclass
class SegmentationEvaluationConfig(Config):
    """Model Garden's segmentation ``evaluation`` block: what the IoU metric reports."""

    report_per_class_iou: bool = True
    """Report ``iou/class_<k>`` beside ``mean_iou``. Defaults to True."""
    report_train_mean_iou: bool = True
    """Also compute ``mean_iou`` (and the per-class IoUs) on training batches.
    Defaults to True."""
