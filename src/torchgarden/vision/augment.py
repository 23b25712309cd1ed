"""Standard per-example augmentations on images, boxes and masks (in plain torch).

Conventions:

* `image`: float tensor `[C, H, W]`, values in [0, 1] before `normalize`.
* `boxes`: float tensor `[K, 4]` of `[x1, y1, x2, y2]` in pixels, `x2`/`y2`
  exclusive (a box covering pixel columns 2..4 is `x1=2, x2=5`).
* `masks`: integer or bool tensor `[H, W]` (a class-id mask) or `[K, H, W]`
  (one mask per box). Masks are resampled with nearest interpolation, never
  blended.

Every random function draws from `generator` (a `torch.Generator`), or from
torch's global RNG when it is None. Inside a dataset's `__getitem__` the
global RNG is what `torchgarden.data` seeds per batch in DataLoader workers
and what checkpoints save in the main process, so augmentation is a
deterministic function of the run's seed and survives a mid-epoch resume.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch
import torch.nn.functional as F

__all__ = [
    "Augmentation",
    "Augmented",
    "color_jitter",
    "horizontal_flip",
    "normalize",
    "random_horizontal_flip",
    "random_scale_crop",
    "scale_crop",
]

_GRAY_WEIGHTS = (0.299, 0.587, 0.114)


class Augmented(NamedTuple):
    """One augmented example; fields are None where the input had none."""

    image: torch.Tensor
    boxes: torch.Tensor | None = None
    masks: torch.Tensor | None = None
    labels: torch.Tensor | None = None


def _uniform(low: float, high: float, generator: torch.Generator | None) -> float:
    if high <= low:
        return float(low)
    return low + (high - low) * float(torch.rand((), generator=generator))


def horizontal_flip(
    image: torch.Tensor, boxes: torch.Tensor | None = None, masks: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """Mirrors an image left-right, with its boxes and masks.

    Args:
        image: `[C, H, W]`.
        boxes: `[K, 4]` xyxy pixel boxes, or None. `x1' = W - x2`, `x2' = W - x1`.
        masks: `[H, W]` or `[K, H, W]`, or None.

    Returns:
        `(image, boxes, masks)`, flipped.
    """
    width = image.shape[-1]
    if boxes is not None:
        boxes = torch.stack(
            [width - boxes[:, 2], boxes[:, 1], width - boxes[:, 0], boxes[:, 3]], dim=1
        )
    return image.flip(-1), boxes, masks.flip(-1) if masks is not None else None


def random_horizontal_flip(
    image: torch.Tensor,
    boxes: torch.Tensor | None = None,
    masks: torch.Tensor | None = None,
    *,
    probability: float = 0.5,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """`horizontal_flip` with probability `probability` (default 0.5), else unchanged.

    One number is always drawn, so the RNG stream does not depend on the outcome.
    """
    if float(torch.rand((), generator=generator)) < probability:
        return horizontal_flip(image, boxes, masks)
    return image, boxes, masks


def _resize_masks(masks: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """Nearest-neighbour (pixel-centre aligned) resize of `[H, W]` or `[K, H, W]` masks."""
    if tuple(masks.shape[-2:]) == size:
        return masks
    flat = masks.reshape(-1, 1, *masks.shape[-2:]).float()
    resized = F.interpolate(flat, size=size, mode="nearest-exact")
    return resized.reshape(*masks.shape[:-2], *size).to(masks.dtype)


def scale_crop(
    image: torch.Tensor,
    boxes: torch.Tensor | None = None,
    masks: torch.Tensor | None = None,
    *,
    output_size: tuple[int, int],
    scale: float = 1.0,
    offset: tuple[int, int] = (0, 0),
    image_fill: float = 0.0,
    mask_fill: int = 0,
    min_box_size: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
    """Resizes by `scale` relative to `output_size`, then crops/pads to `output_size`.

    The image is resized (aspect ratio kept) by `factor = scale * min(out_h / H,
    out_w / W)` (bilinear; masks nearest), so `scale=1` fits the image into
    `output_size`. The `output_size` window at `offset` (`(y, x)` in the resized
    image) is cut out; where the resized image does not reach, the image is
    filled with `image_fill` and masks with `mask_fill`. Boxes are scaled,
    shifted and clipped to the valid region; those whose clipped width or height
    is not above `min_box_size` pixels are dropped.

    Args:
        image: `[C, H, W]` float.
        boxes: `[K, 4]` xyxy pixel boxes, or None.
        masks: `[H, W]` or `[K, H, W]`, or None.
        output_size: `(height, width)` of the result.
        scale: Size of the resized image relative to `output_size`. Defaults to 1.0.
        offset: `(y, x)` of the crop window in the resized image. Defaults to (0, 0).
        image_fill: Value of padded image pixels. Defaults to 0.0.
        mask_fill: Value of padded mask pixels (e.g. an ignore label). Defaults to 0.
        min_box_size: Boxes must stay wider and taller than this. Defaults to 0.0.

    Returns:
        `(image, boxes, masks, keep)`: `keep` is the bool `[K]` of input boxes that
        survived (`boxes` holds only those), or None without boxes.

    Raises:
        ValueError: If `scale` is not positive or `offset` lies outside the
            resized image.
    """
    if scale <= 0:
        raise ValueError(f"scale_crop: scale must be > 0, got {scale}.")
    height, width = image.shape[-2:]
    out_h, out_w = output_size
    factor = scale * min(out_h / height, out_w / width)
    new_h, new_w = max(1, round(height * factor)), max(1, round(width * factor))
    top, left = offset
    if not (0 <= top <= max(new_h - out_h, 0) and 0 <= left <= max(new_w - out_w, 0)):
        raise ValueError(
            f"scale_crop: offset {tuple(offset)} is outside the resized image {new_h}x{new_w} "
            f"for a {out_h}x{out_w} crop; expected y in [0, {max(new_h - out_h, 0)}] and "
            f"x in [0, {max(new_w - out_w, 0)}]."
        )
    if (new_h, new_w) != (height, width):
        image = F.interpolate(
            image[None], size=(new_h, new_w), mode="bilinear", align_corners=False,
            antialias=factor < 1,
        )[0]
    valid_h, valid_w = min(out_h, new_h - top), min(out_w, new_w - left)
    cropped = image.new_full((image.shape[0], out_h, out_w), image_fill)
    cropped[:, :valid_h, :valid_w] = image[:, top : top + valid_h, left : left + valid_w]
    if masks is not None:
        masks = _resize_masks(masks, (new_h, new_w))
        out = masks.new_full((*masks.shape[:-2], out_h, out_w), mask_fill)
        out[..., :valid_h, :valid_w] = masks[..., top : top + valid_h, left : left + valid_w]
        masks = out
    keep = None
    if boxes is not None:
        sx, sy = new_w / width, new_h / height
        scaled = boxes * boxes.new_tensor([sx, sy, sx, sy]) - boxes.new_tensor(
            [left, top, left, top]
        )
        x = scaled[:, 0::2].clamp(0, valid_w)
        y = scaled[:, 1::2].clamp(0, valid_h)
        clipped = torch.stack([x[:, 0], y[:, 0], x[:, 1], y[:, 1]], dim=1)
        keep = (clipped[:, 2] - clipped[:, 0] > min_box_size) & (
            clipped[:, 3] - clipped[:, 1] > min_box_size
        )
        boxes = clipped[keep]
    return cropped, boxes, masks, keep


def random_scale_crop(
    image: torch.Tensor,
    boxes: torch.Tensor | None = None,
    masks: torch.Tensor | None = None,
    *,
    output_size: tuple[int, int],
    scale_range: tuple[float, float] = (0.5, 2.0),
    image_fill: float = 0.0,
    mask_fill: int = 0,
    min_box_size: float = 0.0,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
    """`scale_crop` at a uniform random scale in `scale_range` and a random crop offset.

    Args:
        scale_range: `(min, max)` of the scale. Defaults to (0.5, 2.0).
        generator: RNG to draw from; None uses torch's global RNG. Defaults to None.
        Others: as for `scale_crop`.

    Returns:
        `(image, boxes, masks, keep)` as for `scale_crop`.
    """
    low, high = scale_range
    if not 0 < low <= high:
        raise ValueError(f"scale_range must satisfy 0 < min <= max, got {tuple(scale_range)}.")
    scale = _uniform(low, high, generator)
    height, width = image.shape[-2:]
    factor = scale * min(output_size[0] / height, output_size[1] / width)
    slack_y = max(round(height * factor), 1) - output_size[0]
    slack_x = max(round(width * factor), 1) - output_size[1]
    top = int(torch.randint(0, max(slack_y, 0) + 1, (), generator=generator))
    left = int(torch.randint(0, max(slack_x, 0) + 1, (), generator=generator))
    return scale_crop(
        image, boxes, masks, output_size=output_size, scale=scale, offset=(top, left),
        image_fill=image_fill, mask_fill=mask_fill, min_box_size=min_box_size,
    )


def _gray(image: torch.Tensor) -> torch.Tensor:
    if image.shape[0] != 3:
        return image.mean(0, keepdim=True)
    weights = image.new_tensor(_GRAY_WEIGHTS).view(3, 1, 1)
    return (image * weights).sum(0, keepdim=True)


def color_jitter(
    image: torch.Tensor,
    *,
    brightness: float = 0.0,
    contrast: float = 0.0,
    saturation: float = 0.0,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Random brightness, contrast and saturation changes (in that order), clipped to [0, 1].

    Each strength `s` draws a factor uniformly from `[max(0, 1 - s), 1 + s]`;
    0 leaves that property alone and draws nothing. Brightness multiplies the
    image; contrast blends it with its mean gray level; saturation blends each
    pixel with its gray value (RGB only).

    Args:
        image: `[C, H, W]` float in [0, 1].
        brightness: Strength of the brightness change. Defaults to 0.0.
        contrast: Strength of the contrast change. Defaults to 0.0.
        saturation: Strength of the saturation change. Defaults to 0.0.
        generator: RNG to draw from; None uses torch's global RNG. Defaults to None.

    Returns:
        The jittered image.
    """
    for name, value in (("brightness", brightness), ("contrast", contrast),
                        ("saturation", saturation)):
        if value < 0:
            raise ValueError(f"color_jitter: {name} must be >= 0, got {value}.")
    if brightness:
        image = image * _uniform(max(0.0, 1 - brightness), 1 + brightness, generator)
    if contrast:
        factor = _uniform(max(0.0, 1 - contrast), 1 + contrast, generator)
        mean = _gray(image).mean()
        image = (image - mean) * factor + mean
    if saturation:
        factor = _uniform(max(0.0, 1 - saturation), 1 + saturation, generator)
        if image.shape[0] == 3:
            gray = _gray(image)
            image = (image - gray) * factor + gray
    return image.clamp(0.0, 1.0)


def normalize(image: torch.Tensor, mean: Sequence[float], std: Sequence[float]) -> torch.Tensor:
    """Returns `(image - mean) / std` per channel.

    Raises:
        ValueError: If `mean`/`std` do not have one entry per channel or a std is not > 0.
    """
    channels = image.shape[0]
    if len(mean) != channels or len(std) != channels:
        raise ValueError(
            f"normalize: mean {list(mean)} and std {list(std)} need one entry per channel "
            f"of the {channels}-channel image."
        )
    if min(std) <= 0:
        raise ValueError(f"normalize: every std must be > 0, got {list(std)}.")
    shape = (channels, 1, 1)
    return (image - image.new_tensor(mean).view(shape)) / image.new_tensor(std).view(shape)


class Augmentation:
    """The standard pipeline: flip, scale-crop, colour jitter, normalization.

    Each step is skipped when switched off. Instance masks (`[K, H, W]`) and
    `labels` (`[K]`) are filtered together with the boxes that a crop drops.

    Args:
        output_size: `(height, width)` to scale-crop to, or None to keep the size
            (no scale-crop). Defaults to None.
        horizontal_flip: Flip with probability 0.5. Defaults to False.
        scale_range: `(min, max)` random scale for the crop; `(1, 1)` only fits the
            image into `output_size`. Defaults to (1.0, 1.0).
        brightness, contrast, saturation: `color_jitter` strengths. Default 0.0.
        mean, std: Per-channel normalization, or None for none. Default None.
        mask_fill: Mask value of padded pixels (e.g. the ignore label). Defaults to 0.
        min_box_size: Boxes must stay wider and taller than this after a crop.
            Defaults to 0.0.

    Example:
        >>> augment = Augmentation(output_size=(64, 64), horizontal_flip=True,
        ...                        scale_range=(0.75, 1.25), mean=[0.5] * 3, std=[0.25] * 3)
        >>> out = augment(torch.rand(3, 64, 64), masks=torch.zeros(64, 64, dtype=torch.long))
        >>> out.image.shape, out.masks.shape
        (torch.Size([3, 64, 64]), torch.Size([64, 64]))
    """

    def __init__(
        self,
        *,
        output_size: tuple[int, int] | None = None,
        horizontal_flip: bool = False,
        scale_range: tuple[float, float] = (1.0, 1.0),
        brightness: float = 0.0,
        contrast: float = 0.0,
        saturation: float = 0.0,
        mean: Sequence[float] | None = None,
        std: Sequence[float] | None = None,
        mask_fill: int = 0,
        min_box_size: float = 0.0,
    ) -> None:
        if (mean is None) != (std is None):
            raise ValueError("Augmentation: set both mean and std, or neither.")
        low, high = scale_range
        if not 0 < low <= high:
            raise ValueError(
                f"Augmentation: scale_range must satisfy 0 < min <= max, got {tuple(scale_range)}."
            )
        if output_size is not None and (len(output_size) != 2 or min(output_size) < 1):
            raise ValueError(
                f"Augmentation: output_size must be (height, width) >= 1, got {output_size!r}."
            )
        self.output_size = tuple(output_size) if output_size is not None else None
        self.horizontal_flip = horizontal_flip
        self.scale_range = (float(low), float(high))
        self.brightness, self.contrast, self.saturation = brightness, contrast, saturation
        self.mean = list(mean) if mean is not None else None
        self.std = list(std) if std is not None else None
        self.mask_fill = mask_fill
        self.min_box_size = min_box_size

    def __call__(
        self,
        image: torch.Tensor,
        boxes: torch.Tensor | None = None,
        masks: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        *,
        generator: torch.Generator | None = None,
    ) -> Augmented:
        """Augments one example; see the module doc for shapes.

        Args:
            generator: RNG to draw from; None uses torch's global RNG. Defaults to None.
        """
        if self.horizontal_flip:
            image, boxes, masks = random_horizontal_flip(image, boxes, masks, generator=generator)
        size = self.output_size
        if size is not None and (size != tuple(image.shape[-2:]) or self.scale_range != (1, 1)):
            instance_masks = masks is not None and boxes is not None and masks.ndim == 3
            image, boxes, masks, keep = random_scale_crop(
                image, boxes, masks, output_size=size, scale_range=self.scale_range,
                mask_fill=self.mask_fill, min_box_size=self.min_box_size, generator=generator,
            )
            if keep is not None:
                labels = labels[keep] if labels is not None else None
                masks = masks[keep] if instance_masks else masks
        if self.brightness or self.contrast or self.saturation:
            image = color_jitter(
                image, brightness=self.brightness, contrast=self.contrast,
                saturation=self.saturation, generator=generator,
            )
        if self.mean is not None and self.std is not None:
            image = normalize(image, self.mean, self.std)
        return Augmented(image, boxes, masks, labels)

    def __repr__(self) -> str:
        return (
            f"Augmentation(output_size={self.output_size}, horizontal_flip={self.horizontal_flip}, "
            f"scale_range={self.scale_range}, brightness={self.brightness}, "
            f"contrast={self.contrast}, saturation={self.saturation}, mean={self.mean}, "
            f"std={self.std})"
        )

