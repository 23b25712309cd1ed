"""A small RetinaNet: conv backbone, feature pyramid, shared heads and post-processing.

Sized for small images on a CPU (the shipped 64x64 shapes data): a plain stride-2 conv
backbone gives one feature map per pyramid level ``1..max_level``; a top-down feature
pyramid (FPN) merges levels ``min_level..max_level``; one classification tower and one
box tower (conv, batch norm, activation: ReLU unless Model Garden's
``norm_activation.activation`` names another), shared by all levels, predict per-anchor
class logits and box deltas; ``use_separable_conv`` makes them Keras' separable convs. The classifier's bias starts at ``-log((1 - p) / p)`` with
``p = prior_probability`` (the focal-loss paper's init) so the first steps are not
swamped by easy negatives.

Outputs follow Model Garden's RetinaNet: ``cls_outputs`` / ``box_outputs`` are dicts
keyed by level (``"3"``), ``[B, A * num_classes, H_l, W_l]`` and ``[B, A * 4, H_l, W_l]``
(channel ``a * num_classes + c`` is anchor ``a``, class ``c``); ``anchor_boxes`` holds the
``[N, 4]`` anchors they refer to. In ``eval()`` mode the outputs also carry the
post-processed detections: ``detection_boxes [B, K, 4]`` (ymin, xmin, ymax, xmax input
pixels), ``detection_scores [B, K]``, ``detection_classes [B, K]`` (labels ``1..num_classes``,
0 for padding) and ``num_detections [B]``.

Example:
    >>> import torch
    >>> model = RetinaNet(num_classes=3).eval()
    >>> outputs = model(torch.zeros(2, 3, 64, 64))
    >>> outputs["detection_boxes"].shape
    torch.Size([2, 100, 4])
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from torchgarden.models.activations import activation_module
from torchgarden.vision.anchors import generate_anchors
from torchgarden.vision.boxes import clip_boxes, decode_boxes
from torchgarden.vision.nms import batched_nms
from torchgarden.vision.pyramid import FeaturePyramid, conv2d

__all__ = ["FeaturePyramid", "RetinaNet", "RetinaNetHead", "SmallBackbone", "flatten_levels"]


def flatten_levels(per_level: dict[str, torch.Tensor], last_dim: int) -> torch.Tensor:
    """Concatenates per-level head outputs into ``[B, N, last_dim]`` anchor rows.

    Args:
        per_level: ``{level: [B, A * last_dim, H, W]}``, in increasing level order.
        last_dim: Values per anchor (``num_classes`` or 4).

    Returns:
        ``[B, sum_l H_l * W_l * A, last_dim]``, ordered like `generate_anchors`.
    """
    rows = []
    for level in sorted(per_level, key=int):
        value = per_level[level]
        batch = value.shape[0]
        rows.append(value.permute(0, 2, 3, 1).reshape(batch, -1, last_dim))
    return torch.cat(rows, dim=1)


def _conv_bn_relu(c_in: int, c_out: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False),
        nn.BatchNorm2d(c_out),
        nn.ReLU(inplace=True),
    )


class SmallBackbone(nn.Module):
    """A plain conv network whose stage ``k`` (1-based) has stride ``2**k``.

    Stage 1 is one stride-2 conv; every later stage is a stride-2 conv and a stride-1
    conv, each followed by batch norm and ReLU.

    Args:
        channels: Output channels of stages ``1..len(channels)``. Defaults to
            ``(16, 32, 64, 128)`` (levels 1 to 4).
        in_channels: Input channels. Defaults to 3.
    """

    def __init__(self, channels: Sequence[int] = (16, 32, 64, 128), in_channels: int = 3) -> None:
        super().__init__()
        if not channels:
            raise ValueError("SmallBackbone: channels must name at least one stage.")
        stages = [_conv_bn_relu(in_channels, channels[0], stride=2)]
        for c_in, c_out in zip(channels[:-1], channels[1:]):
            stages.append(nn.Sequential(_conv_bn_relu(c_in, c_out, stride=2),
                                        _conv_bn_relu(c_out, c_out)))
        self.stages = nn.ModuleList(stages)
        self.channels = tuple(channels)

    def forward(self, images: torch.Tensor) -> dict[str, torch.Tensor]:
        """Returns ``{str(level): [B, channels[level - 1], ceil(H / 2**level), ...]}``."""
        features = {}
        x = images
        for level, stage in enumerate(self.stages, start=1):
            x = stage(x)
            features[str(level)] = x
        return features


class RetinaNetHead(nn.Module):
    """Class and box towers shared by all pyramid levels.

    Args:
        in_channels: Channels of the pyramid features.
        num_classes: Foreground classes (no background logit).
        num_anchors: Anchors per location.
        channels: Width of the towers. Defaults to 64.
        num_convs: 3x3 conv + activation layers per tower. Defaults to 2.
        prior_probability: Initial foreground probability of every anchor. Defaults to
            0.01.
        batch_norm: Batch norm after each tower conv. Defaults to True.
        norm_levels: Levels that get their own batch norms (the convs stay shared), as in
            Model Garden's head. Defaults to () (one batch norm shared by all levels).
        activation: Model Garden's name of the towers' activation (`activation_module`).
            Defaults to relu.
        separable: Every conv a `SeparableConv2d` (``use_separable_conv``), Glorot-uniform
            as Keras' default; else normal(0.01) kernels. Defaults to False.
    """

    def __init__(self, in_channels: int, *, num_classes: int, num_anchors: int,
                 channels: int = 64, num_convs: int = 2, prior_probability: float = 0.01,
                 batch_norm: bool = True, norm_levels: Sequence[str] = (),
                 activation: str = "relu", separable: bool = False) -> None:
        super().__init__()
        if not 0.0 < prior_probability < 1.0:
            raise ValueError(f"RetinaNetHead: prior_probability must be in (0, 1), got "
                             f"{prior_probability}.")

        per_level = bool(batch_norm and norm_levels and num_convs)

        def tower() -> nn.Sequential:
            layers: list[nn.Module] = []
            c_in = in_channels
            for _ in range(num_convs):
                layers.append(conv2d(c_in, channels, 3, separable=separable, bias=not batch_norm))
                if batch_norm and not per_level:
                    layers.append(nn.BatchNorm2d(channels))
                layers.append(activation_module(activation))
                c_in = channels
            return nn.Sequential(*layers)

        def norms() -> nn.ModuleDict | None:
            return nn.ModuleDict({level: nn.ModuleList(
                nn.BatchNorm2d(channels) for _ in range(num_convs))
                for level in norm_levels}) if per_level else None

        self.num_classes = num_classes
        self.cls_tower = tower()
        self.box_tower = tower()
        self.cls_norms, self.box_norms = norms(), norms()
        tower_out = channels if num_convs else in_channels
        self.cls_logits = conv2d(tower_out, num_anchors * num_classes, 3, separable=separable)
        self.box_deltas = conv2d(tower_out, num_anchors * 4, 3, separable=separable)
        if not separable:
            for module in self.modules():
                if isinstance(module, nn.Conv2d):
                    nn.init.normal_(module.weight, std=0.01)
                    if module.bias is not None:
                        nn.init.zeros_(module.bias)
        nn.init.constant_(self.cls_logits.bias, -math.log((1 - prior_probability)
                                                          / prior_probability))

    def forward(self, features: dict[str, torch.Tensor]
                ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """Returns per-level ``(class logits, box deltas)`` dicts."""
        cls_outputs = {k: self.cls_logits(_tower(self.cls_tower, self.cls_norms, v, k))
                       for k, v in features.items()}
        box_outputs = {k: self.box_deltas(_tower(self.box_tower, self.box_norms, v, k))
                       for k, v in features.items()}
        return cls_outputs, box_outputs


def _tower(tower: nn.Sequential, norms: nn.ModuleDict | None, x: torch.Tensor,
           level: str) -> torch.Tensor:
    """A tower on one level: its layers, or with ``norms`` each conv, that level's own
    batch norm and the activation."""
    if norms is None:
        return tower(x)
    convs, activations = tower[0::2], tower[1::2]
    for conv, norm, activation in zip(convs, norms[level], activations, strict=True):
        x = activation(norm(conv(x)))
    return x


def _resolve_backbone(backbone: nn.Module | None, backbone_channels: Sequence[int],
                      levels: list[str]) -> tuple[nn.Module, dict[str, int]]:
    """The backbone (built-in when None) and the channels of the pyramid's levels."""
    if backbone is None:
        if len(backbone_channels) != int(levels[-1]):
            raise ValueError(f"RetinaNet: backbone_channels needs one entry per level 1.."
                             f"{levels[-1]} ({levels[-1]} entries), got "
                             f"{list(backbone_channels)}.")
        return SmallBackbone(backbone_channels), {
            lv: backbone_channels[int(lv) - 1] for lv in levels}
    found = dict(getattr(backbone, "channels", {}))
    # Levels above the backbone's coarsest come from the pyramid's stride-2 convs.
    used = [lv for lv in levels if int(lv) <= max((int(k) for k in found), default=0)]
    if not used or any(lv not in found for lv in used):
        raise ValueError(f"RetinaNet: the backbone has levels {sorted(found, key=int)} but "
                         f"min_level..max_level needs {levels}; change the levels.")
    return backbone, {lv: found[lv] for lv in used}


class RetinaNet(nn.Module):
    """Backbone + FPN + shared heads; detections in ``eval()`` mode.

    Args:
        num_classes: Foreground classes; detections are labelled ``1..num_classes``.
        backbone: A module mapping images to ``{str(level): features}`` with a
            ``channels`` attribute ``{str(level): channels}`` covering
            ``min_level..max_level`` (a library backbone from
            `torchgarden.models.build_backbone`, e.g. a transformers ResNet-18 with
            levels 2-5). Defaults to None: a `SmallBackbone` of ``backbone_channels``.
        min_level: Finest pyramid level. Defaults to 2 (stride 4).
        max_level: Coarsest pyramid level. Defaults to 4 (stride 16).
        backbone_channels: Channels of the built-in backbone's stages ``1..max_level``.
            Defaults to ``(16, 32, 64, 128)``.
        fpn_channels: Pyramid width. Defaults to 64.
        head_channels: Tower width. Defaults to 64.
        num_head_convs: Convs per tower. Defaults to 2.
        num_scales: Anchor scales per octave. Defaults to 3.
        aspect_ratios: Anchor width/height ratios. Defaults to ``(0.5, 1.0, 2.0)``.
        anchor_size: Anchor size in strides. Defaults to 2.0 (8-pixel anchors at level 2).
        box_weights: Box coder weights. Defaults to ``(1, 1, 1, 1)``.
        prior_probability: Initial foreground probability. Defaults to 0.01.
        score_threshold: Post-processing score threshold. Defaults to 0.05.
        iou_threshold: Post-processing NMS IoU threshold. Defaults to 0.5.
        max_detections: Detections per image. Defaults to 100.
        pre_nms_top_k: Candidates per image entering NMS. Defaults to 1000.
        fpn_batch_norm: Batch norm on every pyramid level (Model Garden's FPN). Defaults
            to False.
        head_norm_per_level: One set of head batch norms per level (Model Garden's head).
            Defaults to False (shared by all levels).
        activation: Model Garden's activation name of the pyramid and head
            (``norm_activation.activation``). Defaults to relu.
        fpn_separable_conv: Separable convs in the pyramid. Defaults to False.
        head_separable_conv: Separable convs in the head. Defaults to False.

    Raises:
        ValueError: If ``backbone_channels`` does not have ``max_level`` entries, a given
            ``backbone`` lacks a level, or the levels are out of order.
    """

    def __init__(
        self,
        *,
        num_classes: int,
        backbone: nn.Module | None = None,
        min_level: int = 2,
        max_level: int = 4,
        backbone_channels: Sequence[int] = (16, 32, 64, 128),
        fpn_channels: int = 64,
        head_channels: int = 64,
        num_head_convs: int = 2,
        num_scales: int = 3,
        aspect_ratios: Sequence[float] = (0.5, 1.0, 2.0),
        anchor_size: float = 2.0,
        box_weights: Sequence[float] = (1.0, 1.0, 1.0, 1.0),
        prior_probability: float = 0.01,
        score_threshold: float = 0.05,
        iou_threshold: float = 0.5,
        max_detections: int = 100,
        pre_nms_top_k: int = 1000,
        fpn_batch_norm: bool = False,
        head_norm_per_level: bool = False,
        activation: str = "relu",
        fpn_separable_conv: bool = False,
        head_separable_conv: bool = False,
    ) -> None:
        super().__init__()
        if not 1 <= min_level <= max_level:
            raise ValueError(f"RetinaNet: levels must satisfy 1 <= min_level <= max_level, got "
                             f"min_level={min_level}, max_level={max_level}.")
        levels = [str(level) for level in range(min_level, max_level + 1)]
        backbone, channels = _resolve_backbone(backbone, backbone_channels, levels)
        if num_classes < 1:
            raise ValueError(f"RetinaNet: num_classes must be >= 1, got {num_classes}.")
        self.num_classes = num_classes
        self.min_level, self.max_level = min_level, max_level
        self.num_scales = num_scales
        self.aspect_ratios = tuple(float(r) for r in aspect_ratios)
        self.anchor_size = float(anchor_size)
        self.box_weights = tuple(float(w) for w in box_weights)
        self.score_threshold = score_threshold
        self.iou_threshold = iou_threshold
        self.max_detections = max_detections
        self.pre_nms_top_k = pre_nms_top_k
        self.num_anchors = num_scales * len(self.aspect_ratios)
        self.backbone = backbone
        self.fpn = FeaturePyramid(channels, channels=fpn_channels, max_level=max_level,
                                  batch_norm=fpn_batch_norm, activation=activation,
                                  separable=fpn_separable_conv)
        self.head = RetinaNetHead(fpn_channels, num_classes=num_classes,
                                  num_anchors=self.num_anchors, channels=head_channels,
                                  num_convs=num_head_convs, prior_probability=prior_probability,
                                  norm_levels=levels if head_norm_per_level else (),
                                  activation=activation, separable=head_separable_conv)
        self._anchor_cache: dict[tuple[int, int, torch.device], torch.Tensor] = {}

    def anchor_boxes(self, image_size: Sequence[int],
                     device: torch.device | None = None) -> torch.Tensor:
        """The ``[N, 4]`` ``yxyx`` anchors for ``(height, width)`` inputs (cached)."""
        height, width = (int(v) for v in image_size)
        device = torch.device(device) if device is not None else torch.device("cpu")
        key = (height, width, device)
        if key not in self._anchor_cache:
            self._anchor_cache[key] = generate_anchors(
                (height, width), min_level=self.min_level, max_level=self.max_level,
                num_scales=self.num_scales, aspect_ratios=self.aspect_ratios,
                anchor_size=self.anchor_size, device=device)
        return self._anchor_cache[key]

    def forward(self, images: torch.Tensor) -> dict[str, object]:
        """Runs the network on ``[B, 3, H, W]`` images.

        Returns:
            ``cls_outputs``, ``box_outputs`` (per-level dicts) and ``anchor_boxes``; in
            ``eval()`` mode also the detection keys of `postprocess`.
        """
        if images.ndim != 4:
            raise ValueError(f"RetinaNet expects images of shape [B, C, H, W], got "
                             f"{tuple(images.shape)}.")
        features = self.backbone(images)
        pyramid = self.fpn({k: features[k] for k in self.fpn.levels})
        cls_outputs, box_outputs = self.head(pyramid)
        outputs: dict[str, object] = {
            "cls_outputs": cls_outputs,
            "box_outputs": box_outputs,
            "anchor_boxes": self.anchor_boxes(images.shape[-2:], images.device),
        }
        if not self.training:
            outputs.update(self.postprocess(cls_outputs, box_outputs, images.shape[-2:]))
        return outputs

    def postprocess(self, cls_outputs: dict[str, torch.Tensor],
                    box_outputs: dict[str, torch.Tensor],
                    image_size: Sequence[int]) -> dict[str, torch.Tensor]:
        """Decodes deltas, clips to the image and runs `batched_nms`.

        Returns:
            ``detection_boxes [B, K, 4]`` (``yxyx`` input pixels), ``detection_scores``,
            ``detection_classes`` (``1..num_classes``; 0 pads) and ``num_detections``.
        """
        logits = flatten_levels(cls_outputs, self.num_classes).float()
        deltas = flatten_levels(box_outputs, 4).float()
        anchors = self.anchor_boxes(image_size, logits.device)
        boxes = clip_boxes(decode_boxes(deltas, anchors[None], self.box_weights),
                           [float(v) for v in image_size])
        detections = batched_nms(boxes, torch.sigmoid(logits),
                                 score_threshold=self.score_threshold,
                                 iou_threshold=self.iou_threshold,
                                 max_detections=self.max_detections,
                                 pre_nms_top_k=self.pre_nms_top_k)
        detections["detection_classes"] = detections["detection_classes"] + 1
        return detections
