"""Model Garden's backbone configs: ``task.model.backbone`` and ``task.model.norm_activation``.

The same one-of as Model Garden's ``official/vision/configs/backbones.py``, with its field
names and defaults: ``type`` names the block in use (``resnet``, ``vit``, ``mobilenet``,
``efficientnet``, ...) and each block holds that family's options::

    task:
      model:
        backbone: {type: resnet, resnet: {model_id: 50}}
        norm_activation: {activation: relu, norm_momentum: 0.9, norm_epsilon: 1.0e-5}

The backbone is built by a model library (``transformers``) with Model Garden's depth and
width for ``model_id`` (`torchgarden.models.garden`). An option the library cannot build
(a squeeze-and-excitation ResNet, a ResNet-D stem, SpineNet, MobileNetV3, ...) is refused
by `Backbone.check` in one line naming the key, before anything runs; nothing is dropped.

This module is torch-free.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from typing import Any

from torchgarden.config import Config
from torchgarden.config.errors import ConfigError, not_one_of
from torchgarden.config.oneof import OneOfConfig
from torchgarden.models.activations import ACTIVATIONS, NormActivation

__all__ = [
    "ACTIVATIONS",
    "Backbone",
    "DilatedResNet",
    "EfficientNet",
    "KERNEL_INITIALIZER_NAMES",
    "MobileNet",
    "NormActivation",
    "RESNET_SPECS",
    "ResNet",
    "Transformer",
    "VIT_SPECS",
    "VisionTransformer",
]

#: Model Garden's ResNet depths: model_id -> (block, blocks per stage); stage widths 64..512.
RESNET_SPECS: dict[int, tuple[str, tuple[int, int, int, int]]] = {
    10: ("basic", (1, 1, 1, 1)), 18: ("basic", (2, 2, 2, 2)), 26: ("basic", (3, 3, 3, 3)),
    34: ("basic", (3, 4, 6, 3)), 50: ("bottleneck", (3, 4, 6, 3)),
    101: ("bottleneck", (3, 4, 23, 3)), 152: ("bottleneck", (3, 8, 36, 3)),
    200: ("bottleneck", (3, 24, 36, 3)), 270: ("bottleneck", (4, 29, 53, 4)),
    350: ("bottleneck", (4, 36, 72, 4)), 420: ("bottleneck", (4, 44, 87, 4)),
}

#: Model Garden's ViT sizes: model_name -> (hidden_size, patch_size, mlp_dim, heads, layers).
VIT_SPECS: dict[str, tuple[int, int, int, int, int]] = {
    "vit-ti16": (192, 16, 768, 3, 12), "vit-s16": (384, 16, 1536, 6, 12),
    "vit-b16": (768, 16, 3072, 12, 12), "vit-b32": (768, 32, 3072, 12, 12),
    "vit-l16": (1024, 16, 4096, 16, 24), "vit-l32": (1024, 32, 4096, 16, 24),
    "vit-h14": (1280, 14, 5120, 16, 32), "vit-g14": (1664, 14, 8192, 16, 48),
}

#: Model Garden's EfficientNet scalings: model_id -> (width, depth, resolution).
EFFICIENTNET_SPECS: dict[str, tuple[float, float, int]] = {
    "b0": (1.0, 1.0, 224), "b1": (1.0, 1.1, 240), "b2": (1.1, 1.2, 260),
    "b3": (1.2, 1.4, 300), "b4": (1.4, 1.8, 380), "b5": (1.6, 2.2, 456),
    "b6": (1.8, 2.6, 528), "b7": (2.0, 3.1, 600),
}

#: Keras initializer names a classification head's ``kernel_initializer`` may take.
KERNEL_INITIALIZER_NAMES: tuple[str, ...] = (
    "random_uniform", "random_normal", "truncated_normal", "zeros", "ones", "glorot_uniform",
    "glorot_normal", "he_uniform", "he_normal", "lecun_uniform", "lecun_normal",
    "VarianceScaling")

_MOBILENETS = ("MobileNetV1", "MobileNetV2")
_TRANSFORMERS_MOBILENETS = "transformers builds MobileNetV1 and MobileNetV2 only"


def _refusal(key: str, value: object, needs: str, why: str) -> ConfigError:
    return ConfigError(f"{key}: {value!r} needs {needs}, which no installed library builds "
                       f"({why})", key=key)


@dataclasses.dataclass
class ResNet(Config):
    """Model Garden's ResNet options; built as transformers' ``ResNetModel``."""

    model_id: int = 50
    """Depth: 10, 18, 26, 34 (basic blocks), 50, 101, 152, 200, 270, 350, 420 (bottleneck).
    Defaults to 50."""
    depth_multiplier: float = 1.0
    """Scales every stage's width (and the stem's, with ``scale_stem``). Defaults to 1.0."""
    stem_type: str = "v0"
    """``v0``: one 7x7 convolution; ``v1`` (the ResNet-D stem): three 3x3 ones (32, 32, 64,
    scaled with the stem). Defaults to v0."""
    se_ratio: float = 0.0
    """Squeeze-and-excitation in every block, reducing to ``int(channels * se_ratio)``
    channels; 0: none. Defaults to 0.0."""
    stochastic_depth_drop_rate: float = 0.0
    """Stochastic depth of the last stage; stage ``i`` (0..3) drops each block's residual
    branch with probability ``rate * (i + 2) / 5``. Defaults to 0.0."""
    scale_stem: bool = True
    """Whether ``depth_multiplier`` scales the stem too. Defaults to True."""
    resnetd_shortcut: bool = False
    """ResNet-D shortcuts: a 2x2 average pool with the block's stride, then the 1x1
    convolution. Defaults to False."""
    replace_stem_max_pool: bool = False
    """A stride-2 3x3 convolution (``64 * depth_multiplier`` filters) instead of the stem's
    max pool. Defaults to False."""
    bn_trainable: bool = True
    """Whether batch norm layers train; only True is built. Defaults to True."""

    def refuse(self, key: str) -> None:
        """Raises for an option transformers' ResNet cannot build (``key``: this block)."""
        if self.model_id not in RESNET_SPECS:
            raise not_one_of(f"{key}.model_id", self.model_id,  # type: ignore[arg-type]
                             tuple(str(k) for k in RESNET_SPECS))
        if self.stem_type not in ("v0", "v1"):
            raise not_one_of(f"{key}.stem_type", self.stem_type, ("v0", "v1"))
        checks = [
            ("replace_stem_max_pool", self.replace_stem_max_pool and not self.scale_stem
             and self.depth_multiplier != 1, "a stem narrower than its stride-2 convolution",
             "with scale_stem: false and a depth_multiplier, set scale_stem: true"),
            ("bn_trainable", not self.bn_trainable, "frozen batch norm in the backbone",
             "transformers' ResNet trains its batch norm; freeze it with a fine-tuning config"),
        ]
        _raise_first(key, self, checks)
        _check_se_ratio(key, self.se_ratio)
        if self.depth_multiplier <= 0:
            raise ConfigError(f"{key}.depth_multiplier must be > 0, received "
                              f"{self.depth_multiplier}", key=f"{key}.depth_multiplier")


@dataclasses.dataclass
class DilatedResNet(Config):
    """Model Garden's DeepLab ResNet: transformers' ResNet, dilated past ``output_stride``."""

    model_id: int = 50
    """Depth: 50, 101, 152 or 200 (bottleneck blocks). Defaults to 50."""
    output_stride: int = 16
    """4, 8, 16 or 32: later stages dilate by 2, 4, ... instead of striding. Defaults to 16."""
    multigrid: list[int] | None = None
    """Factors of the last stage's dilation, one per block (e.g. [1, 2, 4]). Defaults to None."""
    stem_type: str = "v0"
    """``v0``: a 7x7 convolution; ``v1``: three 3x3 ones (64, 64, 128). Defaults to v0."""
    last_stage_repeats: int = 1
    """Copies of the last stage, each dilated twice as much as the one before. Defaults to 1."""
    se_ratio: float = 0.0
    """Squeeze-and-excitation in every block, reducing to ``int(channels * se_ratio)``
    channels; 0: none. Defaults to 0.0."""
    stochastic_depth_drop_rate: float = 0.0
    """Stochastic depth of the last stage; stage ``i`` drops each block's residual branch with
    probability ``rate * (i + 2) / (4 + last_stage_repeats)``. Defaults to 0.0."""
    resnetd_shortcut: bool = False
    """ResNet-D shortcuts (see `ResNet`). Defaults to False."""
    replace_stem_max_pool: bool = False
    """A strided 3x3 convolution (64 filters) instead of the stem's max pool. Defaults to False."""

    def refuse(self, key: str) -> None:
        """Raises for an option that cannot be built (``key``: this block)."""
        for name, valid in (("model_id", (50, 101, 152, 200)),
                            ("output_stride", (4, 8, 16, 32)), ("stem_type", ("v0", "v1"))):
            if getattr(self, name) not in valid:
                raise not_one_of(f"{key}.{name}", getattr(self, name), tuple(map(str, valid)))
        _check_se_ratio(key, self.se_ratio)
        grid = self.multigrid
        for name, bad, requirement in (  # every model_id's last stage has 3 blocks
                ("multigrid", grid is not None and (len(grid) != 3 or min(grid) < 1),
                 "None or 3 factors >= 1 (one per block of the last stage)"),
                ("last_stage_repeats", self.last_stage_repeats < 1, ">= 1")):
            if bad:
                raise ConfigError(f"{key}.{name} must be {requirement}, received "
                                  f"{getattr(self, name)!r}", key=f"{key}.{name}")


@dataclasses.dataclass
class EfficientNet(Config):
    """Model Garden's EfficientNet options; built as transformers' ``EfficientNetModel``."""

    model_id: str = "b0"
    """``b0`` .. ``b7``. Defaults to b0."""
    se_ratio: float = 0.0
    """Squeeze-and-excitation ratio; transformers' EfficientNet has it fixed at 0.25, so
    only 0.25 is built (Model Garden's experiments set 0.25). Defaults to 0.0."""
    stochastic_depth_drop_rate: float = 0.0
    """Stochastic depth, growing linearly over the blocks (transformers'
    ``drop_connect_rate``). Defaults to 0.0."""

    def refuse(self, key: str) -> None:
        """Raises for an option transformers' EfficientNet cannot build."""
        if self.model_id not in EFFICIENTNET_SPECS:
            raise not_one_of(f"{key}.model_id", self.model_id, tuple(EFFICIENTNET_SPECS))
        if self.se_ratio != 0.25:
            raise _refusal(f"{key}.se_ratio", self.se_ratio,
                           "an EfficientNet with this squeeze-and-excitation ratio",
                           "transformers' EfficientNet has se_ratio 0.25; set 0.25")


@dataclasses.dataclass
class MobileNet(Config):
    """Model Garden's MobileNet options; MobileNetV1/V2 are built by transformers."""

    model_id: str = "MobileNetV2"
    """``MobileNetV1`` or ``MobileNetV2`` (V3, V4, MultiMAX/AVG and EdgeTPU are refused).
    Defaults to MobileNetV2."""
    filter_size_scale: float = 1.0
    """Width multiplier (transformers' ``depth_multiplier``). Defaults to 1.0."""
    stochastic_depth_drop_rate: float = 0.0
    """Stochastic depth; only 0 is built. Defaults to 0.0."""
    flat_stochastic_depth_drop_rate: bool = True
    """Every block drops at ``stochastic_depth_drop_rate`` (False: growing with depth); no
    effect while that rate is 0, the only one built. Defaults to True."""
    output_stride: int | None = None
    """Output stride by dilation (MobileNetV2: 8, 16 or 32); None = 32. Defaults to None."""
    output_intermediate_endpoints: bool = False
    """Model Garden's extra endpoints for detection heads; only False is built.
    Defaults to False."""

    def refuse(self, key: str) -> None:
        """Raises for an option transformers' MobileNets cannot build."""
        if self.model_id not in _MOBILENETS:
            raise _refusal(f"{key}.model_id", self.model_id, f"a {self.model_id}",
                           _TRANSFORMERS_MOBILENETS)
        v2 = self.model_id == "MobileNetV2"
        checks = [
            ("stochastic_depth_drop_rate", self.stochastic_depth_drop_rate > 0,
             "stochastic depth in a MobileNet", "transformers' MobileNets have none"),
            ("output_stride", self.output_stride not in (None, 32, *((8, 16) if v2 else ())),
             "a dilated MobileNet with this stride", "transformers' MobileNetV2 takes 8, 16 "
             "or 32, MobileNetV1 32"),
            ("output_intermediate_endpoints", self.output_intermediate_endpoints,
             "Model Garden's intermediate MobileNet endpoints", "transformers' MobileNets "
             "return stage outputs only"),
        ]
        _raise_first(key, self, checks)


@dataclasses.dataclass
class Transformer(Config):
    """The encoder of a ViT (sizes are taken from ``model_name`` when it is a known one)."""

    mlp_dim: int = 1
    """Width of each block's MLP. Defaults to 1."""
    num_heads: int = 1
    """Attention heads. Defaults to 1."""
    num_layers: int = 1
    """Encoder blocks. Defaults to 1."""
    attention_dropout_rate: float = 0.0
    """Dropout on attention probabilities. Defaults to 0.0."""
    dropout_rate: float = 0.1
    """Dropout after the position embeddings and in each block. Defaults to 0.1."""


@dataclasses.dataclass
class VisionTransformer(Config):
    """Model Garden's ViT options; built as transformers' ``ViTModel``."""

    model_name: str = "vit-b16"
    """``vit-ti16``, ``vit-s16``, ``vit-b16``, ``vit-b32``, ``vit-l16``, ``vit-l32``,
    ``vit-h14``, ``vit-g14``: these set ``hidden_size``, ``patch_size`` and the
    transformer's sizes, as in Model Garden; any other name uses the fields as given.
    Defaults to vit-b16."""
    pooler: str = "token"
    """``token``: the class token's output; ``gap`` and ``none`` are refused (transformers'
    ViT always prepends a class token). Defaults to token."""
    representation_size: int = 0
    """Width of a dense + tanh layer on the pooled output (0: none). Defaults to 0."""
    hidden_size: int = 1
    """Token width (unknown ``model_name`` only). Defaults to 1."""
    patch_size: int = 16
    """Patch height and width (unknown ``model_name`` only). Defaults to 16."""
    transformer: Transformer = dataclasses.field(default_factory=Transformer)
    """The encoder's sizes and dropout rates."""
    init_stochastic_depth_rate: float = 0.0
    """Stochastic depth of the last encoder block; block ``i`` of ``n`` drops its residual
    branches with probability ``rate * (i + 1) / n``. Defaults to 0.0."""
    original_init: bool = True
    """True: LeCun-normal patch embedding and Glorot-uniform encoder kernels (the ViT
    paper's); False: He-uniform patch embedding and truncated-normal(0.02) kernels.
    Defaults to True."""
    pos_embed_shape: list[int] | None = None
    """Position-embedding grid of a checkpoint to interpolate from; only None is built.
    Defaults to None."""
    output_encoded_tokens: bool = True
    """For ``pooler: none`` (refused); no effect otherwise. Defaults to True."""
    output_2d_feature_maps: bool = False
    """A 2-D feature map endpoint for dense heads; only False is built. Defaults to False."""
    layer_scale_init_value: float = 0.0
    """LayerScale; only 0 (none) is built. Defaults to 0.0."""

    def sizes(self) -> tuple[int, int, int, int, int]:
        """``(hidden_size, patch_size, mlp_dim, num_heads, num_layers)`` as Model Garden
        builds them: from `VIT_SPECS` for a known ``model_name``, else the fields."""
        t = self.transformer
        return VIT_SPECS.get(self.model_name, (self.hidden_size, self.patch_size, t.mlp_dim,
                                               t.num_heads, t.num_layers))

    def refuse(self, key: str) -> None:
        """Raises for an option transformers' ViT cannot build."""
        why = "transformers' ViT has none"
        checks = [
            ("pooler", self.pooler != "token", f"a ViT with pooler {self.pooler!r}",
             "transformers' ViT always prepends a class token; use pooler: token"),
            ("layer_scale_init_value", self.layer_scale_init_value > 0, "LayerScale", why),
            ("pos_embed_shape", self.pos_embed_shape is not None,
             "position embeddings interpolated from another grid", why),
            ("output_2d_feature_maps", self.output_2d_feature_maps,
             "a 2-D ViT feature map endpoint", why),
        ]
        _raise_first(key, self, checks)
        hidden, _, _, heads, _ = self.sizes()
        if not 0.0 <= self.init_stochastic_depth_rate < 1.0:
            raise ConfigError(f"{key}.init_stochastic_depth_rate must be in [0, 1), received "
                              f"{self.init_stochastic_depth_rate}",
                              key=f"{key}.init_stochastic_depth_rate")
        if hidden % heads:
            raise ConfigError(f"{key}.hidden_size ({hidden}) must be a multiple of "
                              f"transformer.num_heads ({heads})", key=f"{key}.hidden_size")


def _raise_first(key: str, block: Config,
                 checks: list[tuple[str, bool, str, str]]) -> None:
    for name, bad, needs, why in checks:
        if bad:
            raise _refusal(f"{key}.{name}", getattr(block, name), needs, why)


def _check_se_ratio(key: str, se_ratio: float) -> None:
    if not 0 <= se_ratio <= 1:
        raise ConfigError(f"{key}.se_ratio must be in [0, 1] (0: no squeeze-and-excitation), "
                          f"received {se_ratio}", key=f"{key}.se_ratio")


#: Model Garden backbone families no installed library builds.
_UNBUILT: dict[str, str] = {
    "revnet": "a reversible ResNet (RevNet)", "spinenet": "SpineNet",
    "spinenet_mobile": "mobile SpineNet", "mobiledet": "MobileDet",
    "resnet_3d": "a 3-D ResNet (video classification)",
    "resnet_3d_rs": "a 3-D ResNet-RS (video classification)",
    "movinet": "MoViNet (video classification)"}
_BUILT_TYPES = "transformers builds resnet, dilated_resnet, vit, mobilenet and efficientnet"


@dataclasses.dataclass
class Backbone(OneOfConfig):
    """Model Garden's backbone one-of: ``type`` names the block in use.

    ``resnet``, ``dilated_resnet``, ``vit``, ``mobilenet`` (V1, V2) and ``efficientnet`` are
    built by transformers; the other families are refused in one line by `check`."""

    type: str | None = None
    """The backbone in use: one of the fields below. Defaults to None."""
    resnet: ResNet = dataclasses.field(default_factory=ResNet)
    """ResNet options."""
    dilated_resnet: DilatedResNet = dataclasses.field(default_factory=DilatedResNet)
    """DeepLab's dilated ResNet options."""
    revnet: dict[str, Any] = dataclasses.field(default_factory=dict)
    """RevNet options (the type is refused, so they are not read)."""
    efficientnet: EfficientNet = dataclasses.field(default_factory=EfficientNet)
    """EfficientNet options."""
    spinenet: dict[str, Any] = dataclasses.field(default_factory=dict)
    """SpineNet options (the type is refused, so they are not read)."""
    spinenet_mobile: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Mobile SpineNet options (the type is refused, so they are not read)."""
    mobilenet: MobileNet = dataclasses.field(default_factory=MobileNet)
    """MobileNet options."""
    mobiledet: dict[str, Any] = dataclasses.field(default_factory=dict)
    """MobileDet options (the type is refused, so they are not read)."""
    vit: VisionTransformer = dataclasses.field(default_factory=VisionTransformer)
    """Vision Transformer options."""

    def screen(self, data: Mapping[str, Any], prefix: str = "") -> None:
        """Refuses a backbone no library builds (a family, a MobileNet version, an option) that
        ``data`` (a file) chooses, before anything else of the file is read."""
        kind = data.get("type")
        if isinstance(kind, str) and kind in _UNBUILT:  # video's types are no alternative
            raise _refusal(f"{prefix}.type", kind, _UNBUILT[kind], _BUILT_TYPES)
        trial = copy.deepcopy(self)
        trial._apply(data, strict=True, prefix=prefix)
        trial._validate(prefix)

    def check(self) -> None:
        if self.type is None:
            return
        if self.type in _UNBUILT:
            raise _refusal(self.field_path("type"), self.type, _UNBUILT[self.type],
                           _BUILT_TYPES)
        refuse = getattr(self.get(), "refuse", None)
        if refuse is not None:
            refuse(self.field_path(self.type))
