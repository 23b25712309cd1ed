"""Model Garden's classification augmentation built from a data config, per image and per batch.

A parser that decodes images (the TFRecord reader) calls the per-image steps where Model
Garden's ``classification_input.Parser`` has them::

    augmenter = build_augmenter(data_config)          # None when nothing is on
    image = augmenter.jitter(image_uint8, generator)  # after crop/flip, before the resize
    image = augmenter.distort(image, generator)       # after the resize (RandAugment/AutoAugment)
    image = augmenter.erase(normalized, generator)    # after normalization
    image = augmenter.cast(image)                     # data_config.dtype

and `BatchAugment` wraps a collate function to mix batches (``mixup_and_cutmix``). Array
sources (digits, npz, folder, Hugging Face datasets) hold [0, 1] images with no separate
normalization: `BatchAugment` runs the per-image steps on them at 0-255 scale first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from torchgarden.vision.autoaugment import AutoAugment, RandAugment, blend, grayscale
from torchgarden.vision.autoaugment import contrast as _contrast
from torchgarden.vision.mixing import MixupAndCutmix, RandomErasing

__all__ = ["BatchAugment", "ClassificationAugmenter", "build_augmenter", "build_mixup",
           "color_jitter"]

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _factor(strength: float, generator: torch.Generator | None) -> float:
    low, high = max(0.0, 1.0 - strength), 1.0 + strength
    return low + (high - low) * float(torch.rand((), generator=generator))


def color_jitter(image: torch.Tensor, strength: float,
                 generator: torch.Generator | None = None) -> torch.Tensor:
    """Model Garden's ``color_jitter(image, s, s, s)`` on a uint8 ``[C, H, W]`` image:
    brightness, contrast, saturation in turn, each factor uniform in ``[max(0, 1 - s), 1 + s]``."""
    image = image if image.dtype == torch.uint8 else image.to(torch.uint8)
    image = blend(torch.zeros_like(image), image, _factor(strength, generator))
    image = _contrast(image, _factor(strength, generator))
    return blend(grayscale(image).expand_as(image), image, _factor(strength, generator))


class ClassificationAugmenter:
    """The per-image steps of Model Garden's classification training parse.

    Args:
        color_jitter: ``color_jitter`` strength (0 = off). Defaults to 0.
        policy: A `RandAugment` / `AutoAugment`, or None. Defaults to None.
        random_erasing: A `RandomErasing`, or None. Defaults to None.
        dtype: Dtype images leave the parser in. Defaults to float32.
    """

    def __init__(self, *, color_jitter: float = 0.0,
                 policy: RandAugment | AutoAugment | None = None,
                 random_erasing: RandomErasing | None = None,
                 dtype: torch.dtype = torch.float32) -> None:
        self.color_jitter, self.policy = float(color_jitter), policy
        self.random_erasing, self.dtype = random_erasing, dtype

    @property
    def pixel_ops(self) -> bool:
        """Whether an op works on 0-255 pixels (``color_jitter`` or a policy)."""
        return bool(self.color_jitter) or self.policy is not None

    def jitter(self, image: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """``color_jitter`` of a 0-255 image (returned as uint8), or the image unchanged."""
        return color_jitter(image, self.color_jitter, generator) if self.color_jitter else image

    def distort(self, image: torch.Tensor,
                generator: torch.Generator | None = None) -> torch.Tensor:
        """The RandAugment/AutoAugment policy (in the image's dtype), or the image unchanged."""
        return self.policy(image, generator) if self.policy is not None else image

    def erase(self, image: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """Random erasing of a normalized image, or the image unchanged."""
        return self.random_erasing(image, generator) if self.random_erasing else image

    def cast(self, image: torch.Tensor) -> torch.Tensor:
        """The image in the configured ``dtype``."""
        return image.to(self.dtype)

    def unit_image(self, image: torch.Tensor,
                   generator: torch.Generator | None = None) -> torch.Tensor:
        """All steps on a [0, 1] float image (array sources: no resize, no normalization)."""
        if self.pixel_ops:
            pixels = self.distort(self.jitter(image * 255.0, generator), generator)
            image = pixels.float() / 255.0
        return self.cast(self.erase(image, generator))


def build_augmenter(config: Any) -> ClassificationAugmenter | None:
    """The per-image steps a ``ClassificationAugmentDataConfig`` turns on, or None.

    Augmentation runs on training splits only (as in Model Garden); ``dtype`` on every split.
    """
    training = bool(config.is_training)
    policy: RandAugment | AutoAugment | None = None
    aug = config.aug_type
    if training and aug is not None and aug.type == "randaug":
        r = aug.randaug
        policy = RandAugment(num_layers=r.num_layers, magnitude=r.magnitude,
                             cutout_const=r.cutout_const, translate_const=r.translate_const,
                             prob_to_apply=r.prob_to_apply, exclude_ops=r.exclude_ops)
    elif training and aug is not None and aug.type == "autoaug":
        a = aug.autoaug
        policy = AutoAugment(augmentation_name=a.augmentation_name,
                             cutout_const=a.cutout_const, translate_const=a.translate_const)
    erasing = None
    if training and config.random_erasing is not None:
        e = config.random_erasing
        erasing = RandomErasing(probability=e.probability, min_area=e.min_area,
                                max_area=e.max_area, min_aspect=e.min_aspect,
                                max_aspect=e.max_aspect, min_count=e.min_count,
                                max_count=e.max_count, trials=e.trials)
    jitter = config.color_jitter if training else 0.0
    dtype = _DTYPES[config.dtype]
    if policy is None and erasing is None and not jitter and dtype == torch.float32:
        return None
    return ClassificationAugmenter(color_jitter=jitter, policy=policy, random_erasing=erasing,
                                   dtype=dtype)


def build_mixup(config: Any, num_classes: int) -> MixupAndCutmix | None:
    """Model Garden's batch ``MixupAndCutmix`` for a split that sets ``mixup_and_cutmix``."""
    m = config.mixup_and_cutmix
    if m is None:
        return None
    # Model Garden's task passes neither switch_prob nor anything else: 0.5 it is.
    return MixupAndCutmix(mixup_alpha=m.mixup_alpha, cutmix_alpha=m.cutmix_alpha, prob=m.prob,
                          label_smoothing=m.label_smoothing, num_classes=num_classes)


class BatchAugment:
    """A collate function: ``collate``, then per-image steps on [0, 1] images, then mixing.

    Picklable (loader workers run it); draws from torch's global RNG, which
    `torchgarden.data` seeds per batch, so batches are a function of the run's seed.

    Args:
        collate: Turns a list of examples into ``(images [B, C, H, W], labels [B])``.
        augmenter: Per-image steps, or None.
        mixup: A `MixupAndCutmix`, or None.
        where: Named in errors (the split's input). Defaults to "".
    """

    def __init__(self, collate: Callable[[list[Any]], Any], *,
                 augmenter: ClassificationAugmenter | None,
                 mixup: MixupAndCutmix | None, where: str = "") -> None:
        self.collate, self.augmenter, self.mixup, self.where = collate, augmenter, mixup, where

    def __call__(self, examples: list[Any]) -> tuple[torch.Tensor, torch.Tensor]:
        images, labels = self.collate(examples)
        if self.augmenter is not None:
            if self.augmenter.pixel_ops and images.numel() and (
                    float(images.min()) < -1e-6 or float(images.max()) > 1.0 + 1e-6):
                raise ValueError(
                    f"{self.where}: color_jitter and aug_type work on [0, 1] images (0-255 "
                    f"pixels), but this batch holds values in [{float(images.min()):.3g}, "
                    f"{float(images.max()):.3g}]; scale the images to [0, 1].")
            images = torch.stack([self.augmenter.unit_image(image) for image in images])
        if self.mixup is not None:
            images, labels = self.mixup(images, labels)
        return images, labels
