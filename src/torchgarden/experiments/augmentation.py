"""Model Garden's classification augmentation keys (``official/vision/configs/common.py``).

The blocks read as in Model Garden: ``aug_type`` (one of ``randaug`` / ``autoaug``),
``mixup_and_cutmix``, ``random_erasing``, ``color_jitter``, ``three_augment``, ``dtype``,
``decode_jpeg_only``, ``is_multilabel``. They are built into ops by
`torchgarden.vision.classification_augment`. This module is torch-free.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import ClassVar

from torchgarden.config import Config, DataConfig
from torchgarden.config.errors import ConfigError, choose, not_one_of, require
from torchgarden.config.notices import ModelGardenKey, ignored
from torchgarden.config.oneof import OneOfConfig

__all__ = [
    "AUTOAUGMENT_POLICIES",
    "AugmentationConfig",
    "AutoAugmentConfig",
    "ClassificationAugmentDataConfig",
    "MixupAndCutmixConfig",
    "RandAugmentConfig",
    "RandomErasingConfig",
]

AUTOAUGMENT_POLICIES = ("v0", "test", "simple", "reduced_cifar10", "svhn", "reduced_imagenet",
                        "panoptic_deeplab_policy", "vit")
"""``autoaug.augmentation_name`` values provided (`torchgarden.vision.autoaugment.POLICIES`)."""
_NOT_PROVIDED_POLICIES = {
    "detection_v0": "its ops move boxes, and classification has none",
    "deit3_three_augment": "its Gaussian_Noise op is a Gaussian blur with a sigma Model "
                           "Garden draws once when the graph is built",
}
_RANDAUG_OPS = ("AutoContrast", "Equalize", "Invert", "Rotate", "Posterize", "Solarize", "Color",
                "Contrast", "Brightness", "Sharpness", "ShearX", "ShearY", "TranslateX",
                "TranslateY", "Cutout", "SolarizeAdd")
_DTYPES = ("float32", "bfloat16", "float16")


@dataclasses.dataclass
class RandAugmentConfig(Config):
    """Model Garden's ``RandAugment`` (levels on its 0-10 scale)."""

    MODEL_GARDEN_KEYS: ClassVar[Mapping[str, ModelGardenKey]] = {
        "magnitude_std": ignored("Model Garden's classification parser does not pass it to "
                                 "RandAugment: every op runs at `magnitude`"),
    }
    num_layers: int = 2
    """Ops applied in sequence to each image. Defaults to 2."""
    magnitude: float = 10.0
    """Shared op level on Model Garden's 0-10 scale (not torchvision's 0-30; above 10 the
    level formulas extrapolate, as in Model Garden). Defaults to 10."""
    cutout_const: float = 40.0
    """Cutout half size in pixels at level 10. Defaults to 40."""
    translate_const: float = 10.0
    """Translation in pixels at level 10. Defaults to 10."""
    prob_to_apply: float | None = None
    """Chance each layer's result is kept; None keeps every one. Defaults to None."""
    exclude_ops: list[str] = dataclasses.field(default_factory=list)
    """Op names left out of RandAugment's 16. Defaults to []."""

    def check(self) -> None:
        require(self, "num_layers", self.num_layers >= 0, ">= 0")
        # Model Garden's 0-10 scale; above 10 its level formulas extrapolate (magnitude: 15
        # appears in its YAMLs), so only negative levels are refused.
        require(self, "magnitude", self.magnitude >= 0, ">= 0 (Model Garden's 0-10 scale)")
        p = self.prob_to_apply
        require(self, "prob_to_apply", p is None or 0 <= p <= 1, "None or in [0, 1]")
        for op in self.exclude_ops:
            if op not in _RANDAUG_OPS:
                raise not_one_of(self.field_path("exclude_ops"), op, _RANDAUG_OPS)


@dataclasses.dataclass
class AutoAugmentConfig(Config):
    """Model Garden's ``AutoAugment`` (a named policy of sub-policies)."""

    augmentation_name: str = "v0"
    """Policy name: v0, test, simple, reduced_cifar10, svhn, reduced_imagenet,
    panoptic_deeplab_policy or vit. Defaults to "v0"."""
    cutout_const: float = 100.0
    """Cutout half size in pixels at level 10. Defaults to 100."""
    translate_const: float = 250.0
    """Translation in pixels at level 10. Defaults to 250."""

    def check(self) -> None:
        name = self.augmentation_name
        if name in _NOT_PROVIDED_POLICIES:
            key = self.field_path("augmentation_name")
            raise ConfigError(f"{key}: {name!r} is not provided ({_NOT_PROVIDED_POLICIES[name]});"
                              f" choose one of {', '.join(AUTOAUGMENT_POLICIES)}", key=key)
        choose(self, "augmentation_name", AUTOAUGMENT_POLICIES)


@dataclasses.dataclass
class AugmentationConfig(OneOfConfig):
    """Model Garden's ``aug_type``: ``type: randaug | autoaug`` and its block."""

    type: str | None = None
    """``randaug``, ``autoaug`` or None (no policy). Defaults to None."""
    randaug: RandAugmentConfig = dataclasses.field(default_factory=RandAugmentConfig)
    """RandAugment's settings."""
    autoaug: AutoAugmentConfig = dataclasses.field(default_factory=AutoAugmentConfig)
    """AutoAugment's settings."""


@dataclasses.dataclass
class MixupAndCutmixConfig(Config):
    """Model Garden's ``MixupAndCutmix``, applied to each batch (labels become soft)."""

    MODEL_GARDEN_KEYS: ClassVar[Mapping[str, ModelGardenKey]] = {
        "switch_prob": ignored("Model Garden's image_classification task does not pass it to "
                               "MixupAndCutmix: CutMix is chosen with probability 0.5 (1 or 0 "
                               "when one alpha is 0)"),
    }
    mixup_alpha: float = 0.8
    """Mixup's alpha; 0 turns Mixup off. Model Garden draws lam from Gamma(1, rate=alpha)
    ratios, which is Uniform(0, 1) for every alpha (`torchgarden.vision.MixupAndCutmix`).
    Defaults to 0.8."""
    cutmix_alpha: float = 1.0
    """CutMix's alpha; 0 turns CutMix off. Defaults to 1.0."""
    prob: float = 1.0
    """Chance that a batch is mixed. Defaults to 1.0."""
    label_smoothing: float = 0.1
    """Smoothing of the one-hot labels mixup produces. Defaults to 0.1."""

    def check(self) -> None:
        require(self, "mixup_alpha", self.mixup_alpha >= 0, ">= 0")
        require(self, "cutmix_alpha", self.cutmix_alpha >= 0, ">= 0")
        require(self, "mixup_alpha", self.mixup_alpha + self.cutmix_alpha > 0,
                "> 0 where cutmix_alpha is 0 (one of the two must be on)")
        require(self, "prob", 0 <= self.prob <= 1, "in [0, 1]")
        require(self, "label_smoothing", 0 <= self.label_smoothing <= 1, "in [0, 1]")


@dataclasses.dataclass
class RandomErasingConfig(Config):
    """Model Garden's ``RandomErasing`` (after normalization, noise-filled rectangles)."""

    probability: float = 0.25
    """Chance an image is erased at all. Defaults to 0.25."""
    min_area: float = 0.02
    """Smallest rectangle area, as a fraction of the image. Defaults to 0.02."""
    max_area: float = 1 / 3
    """Largest rectangle area fraction. Defaults to 1/3."""
    min_aspect: float = 0.3
    """Smallest height/width aspect. Defaults to 0.3."""
    max_aspect: float | None = None
    """Largest aspect; None = ``1 / min_aspect``. Defaults to None."""
    min_count: int = 1
    """Fewest rectangles. Defaults to 1."""
    max_count: int = 1
    """Most rectangles. Defaults to 1."""
    trials: int = 10
    """Draws per rectangle before giving up. Defaults to 10."""

    def check(self) -> None:
        require(self, "probability", 0 <= self.probability <= 1, "in [0, 1]")
        require(self, "min_area", 0 < self.min_area <= self.max_area <= 1,
                "in (0, max_area] with max_area <= 1")
        require(self, "min_aspect", self.min_aspect > 0, "> 0")
        require(self, "max_count", 1 <= self.min_count <= self.max_count,
                ">= min_count >= 1")
        require(self, "trials", self.trials >= 1, ">= 1")


@dataclasses.dataclass
class ClassificationAugmentDataConfig(DataConfig):
    """A classification split with Model Garden's augmentation and parser keys.

    Order of the training parse, as in Model Garden: crop and flip, ``color_jitter``,
    resize, ``aug_type``, normalize, ``random_erasing``, cast to ``dtype``; then
    ``mixup_and_cutmix`` per batch (for whichever split sets it).
    """

    MODEL_GARDEN_KEYS: ClassVar[Mapping[str, ModelGardenKey]] = {
        **DataConfig.MODEL_GARDEN_KEYS,
        "aug_policy": ignored("kept by Model Garden for backward compatibility; its "
                              "image_classification parser does not read it (use aug_type)"),
        "randaug_magnitude": ignored("kept by Model Garden for backward compatibility; its "
                                     "image_classification parser does not read it (use "
                                     "aug_type.randaug.magnitude)"),
    }
    aug_type: AugmentationConfig | None = None
    """RandAugment or AutoAugment of each training image (after the resize); None for
    neither. Defaults to None."""
    color_jitter: float = 0.0
    """Brightness, contrast and saturation factors drawn from ``[max(0, 1 - s), 1 + s]``
    on each training image before the resize (Model Garden's ``color_jitter``);
    0 = off. Defaults to 0.0."""
    random_erasing: RandomErasingConfig | None = None
    """Random erasing of each normalized training image; None = off. Defaults to None."""
    mixup_and_cutmix: MixupAndCutmixConfig | None = None
    """Mixup/CutMix of each batch of this split (labels become soft ``[B, classes]``);
    None = off. Defaults to None."""
    three_augment: bool = False
    """DeiT III's three-augment; not provided (true is refused). Defaults to False."""
    dtype: str = "float32"
    """Dtype the images leave the parser in: ``float32``, ``bfloat16`` or ``float16``
    (values rounded to it, as Model Garden's cast does); the model receives them cast to
    float32 and computes in ``runtime.mixed_precision_dtype``. Defaults to "float32"."""
    decode_jpeg_only: bool = True
    """Model Garden's JPEG-only fast path; here every image is decoded by Pillow (JPEG,
    PNG, ...), with JPEGs decoded at reduced scale where the crop allows. Defaults to True."""
    is_multilabel: bool = False
    """Multi-hot labels with a binary cross-entropy; not provided (true is refused).
    Defaults to False."""

    def check(self) -> None:
        super().check()
        require(self, "color_jitter", self.color_jitter >= 0, ">= 0")
        choose(self, "dtype", _DTYPES, {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"})
        if self.three_augment:
            key = self.field_path("three_augment")
            raise ConfigError(
                f"{key}: true is not provided (DeiT III's three-augment blurs with a sigma Model "
                "Garden draws once per graph); set it to false", key=key)
        if self.is_multilabel:
            key = self.field_path("is_multilabel")
            raise ConfigError(f"{key}: true (multi-hot labels, binary cross-entropy) is not "
                              "provided; set it to false", key=key)

    def augments_images(self) -> bool:
        """Whether a per-image op is on (what makes ``cache: true`` freeze them)."""
        return bool(self.color_jitter or self.random_erasing is not None
                    or (self.aug_type is not None and self.aug_type.type is not None))
