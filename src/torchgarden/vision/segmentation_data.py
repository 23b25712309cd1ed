"""Image + class-mask pairs read from two folders (the generated shapes data or a user's)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import Dataset

from torchgarden.vision.augment import Augmentation

__all__ = ["IMAGE_EXTENSIONS", "ResizeThenCrop", "SegmentationFolderDataset"]

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff")
_MASK_MODES = ("L", "P", "I", "I;16", "1")


class SegmentationFolderDataset(Dataset):
    """Pairs `images_dir/<stem>.<ext>` with `masks_dir/<stem>.png` (any image extension).

    A mask is a single-channel image (mode L, P, I or 1) of per-pixel class ids,
    0 = background; `ignore_label` marks pixels that count in no loss or metric.
    Images are decoded to RGB. Items are `(image, mask)`: float32 `[3, H, W]`
    (in [0, 1] unless `augment` normalizes) and int64 `[H, W]`.

    When data is checked: the pairing (every image has a mask) at construction;
    readability, mask/image size and mask values when an item is decoded, i.e.
    lazily per item, or all at construction with `preload=True` (which also keeps
    the decoded pairs in memory; augmentation still runs on every access).

    Args:
        images_dir: Folder of images.
        masks_dir: Folder of masks, matched to images by file stem.
        num_classes: Classes including background; mask values must be below it or
            equal `ignore_label`. None skips the value check. Defaults to None.
        image_size: `(height, width)` to resize pairs to (image bilinear, mask
            nearest) before augmentation, or None to keep each pair's size.
            Defaults to None.
        augment: Called as `augment(image, masks=mask)` on every access, or None.
            Defaults to None.
        ignore_label: Mask value of ignored pixels. Defaults to 255.
        preload: Decode and check every pair at construction and keep them in
            memory. Defaults to False.

    Raises:
        FileNotFoundError: If a folder is missing or an image has no mask.
        ValueError: On an empty images folder, an unreadable file, a multi-channel
            mask, a mask/image size mismatch or a mask value out of range (each
            message names the file).

    Example:
        >>> ds = SegmentationFolderDataset("data/train/images", "data/train/masks",
        ...                                num_classes=4)
        >>> image, mask = ds[0]  # float32 [3, H, W], int64 [H, W]
    """

    def __init__(
        self,
        images_dir: str | os.PathLike[str],
        masks_dir: str | os.PathLike[str],
        *,
        num_classes: int | None = None,
        image_size: tuple[int, int] | None = None,
        augment: Augmentation | ResizeThenCrop | None = None,
        ignore_label: int = 255,
        preload: bool = False,
    ) -> None:
        self.images_dir, self.masks_dir = Path(images_dir), Path(masks_dir)
        for role, folder in (("images_dir", self.images_dir), ("masks_dir", self.masks_dir)):
            if not folder.is_dir():
                raise FileNotFoundError(
                    f"SegmentationFolderDataset {role} is not a directory: {str(folder)!r}."
                )
        if image_size is not None and (len(image_size) != 2 or min(image_size) < 1):
            raise ValueError(
                f"image_size must be (height, width) of positive ints, got {image_size!r}."
            )
        self.num_classes = num_classes
        self.image_size = tuple(image_size) if image_size is not None else None
        self.augment = augment
        self.ignore_label = ignore_label
        images = _list_images(self.images_dir)
        if not images:
            raise ValueError(
                f"images_dir {str(self.images_dir)!r} holds no images with extensions "
                f"{list(IMAGE_EXTENSIONS)}."
            )
        masks = _list_images(self.masks_dir)
        by_stem: dict[str, Path] = {}
        for path in masks:
            # Prefer the lossless .png when a stem has several files.
            if path.stem not in by_stem or path.suffix.lower() == ".png":
                by_stem[path.stem] = path
        self.pairs: list[tuple[Path, Path]] = []
        for image_path in images:
            mask_path = by_stem.get(image_path.stem)
            if mask_path is None:
                raise FileNotFoundError(
                    f"no mask for image {str(image_path)!r}: expected "
                    f"{str(self.masks_dir / (image_path.stem + '.png'))!r} (masks are matched "
                    "to images by file stem)."
                )
            self.pairs.append((image_path, mask_path))
        self._cache: list[tuple[torch.Tensor, torch.Tensor]] | None = None
        if preload:
            self._cache = [self._decode(i) for i in range(len(self.pairs))]

    def __len__(self) -> int:
        return len(self.pairs)

    def _decode(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Reads and checks pair `index`: float32 `[3, H, W]` in [0, 1], int64 `[H, W]`."""
        from PIL import Image

        image_path, mask_path = self.pairs[index]
        try:
            with Image.open(image_path) as img:
                image = img.convert("RGB")
        except (OSError, ValueError) as err:
            raise ValueError(f"cannot read image {str(image_path)!r}: {err}") from err
        try:
            with Image.open(mask_path) as img:
                img.load()
                mask = img
        except (OSError, ValueError) as err:
            raise ValueError(f"cannot read mask {str(mask_path)!r}: {err}") from err
        if mask.mode not in _MASK_MODES:
            raise ValueError(
                f"mask {str(mask_path)!r} has mode {mask.mode} with {len(mask.getbands())} "
                f"channels; expected a single-channel image of class ids (mode L or P)."
            )
        if mask.size != image.size:
            raise ValueError(
                f"mask {str(mask_path)!r} is {mask.size[1]}x{mask.size[0]} (HxW) but image "
                f"{str(image_path)!r} is {image.size[1]}x{image.size[0]}; they must match."
            )
        if self.image_size is not None:
            height, width = self.image_size
            image = image.resize((width, height), Image.Resampling.BILINEAR)
            mask = mask.resize((width, height), Image.Resampling.NEAREST)
        labels = np.asarray(mask).astype(np.int64)
        self._check_values(labels, mask_path)
        pixels = np.asarray(image, dtype=np.uint8).transpose(2, 0, 1).copy()
        return torch.from_numpy(pixels).float().div_(255.0), torch.from_numpy(labels)

    def _check_values(self, labels: np.ndarray, mask_path: Path) -> None:
        if self.num_classes is None:
            return
        bad = (labels >= self.num_classes) & (labels != self.ignore_label)
        if bad.any():
            values = sorted(int(v) for v in np.unique(labels[bad]))
            raise ValueError(
                f"mask {str(mask_path)!r} has class ids {values[:5]} outside 0..{self.num_classes - 1} "
                f"(num_classes={self.num_classes}) that are not the ignore label "
                f"{self.ignore_label}; set task.model.num_classes or fix the mask."
            )

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        image, mask = self._cache[index] if self._cache is not None else self._decode(index)
        if self.augment is not None:
            out = self.augment(image, masks=mask)
            image, mask = out.image, out.masks
        return image, mask

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(images_dir={str(self.images_dir)!r}, "
            f"masks_dir={str(self.masks_dir)!r}, pairs={len(self)})"
        )


class ResizeThenCrop:
    """Model Garden's ``crop_size`` step of a training pair, then ``augment``.

    The image is resized to ``output_size`` (bilinear, aspect ratio not kept; the mask
    nearest) when one is given, then a ``crop_size`` window at a uniform random offset is
    cut out (``tf.image.random_crop``), then ``augment`` (flip, scale jitter to
    ``crop_size``, normalization) runs. Draws from ``generator`` (a TFRecord example's
    seeded one), else torch's global RNG. Picklable.

    Args:
        crop_size: ``(height, width)`` of the crop.
        output_size: ``(height, width)`` to resize to first, or None.
        augment: Called as ``augment(image, masks=mask)`` on the crop.
    """

    def __init__(self, *, crop_size: tuple[int, int], output_size: tuple[int, int] | None,
                 augment: Augmentation) -> None:
        self.crop_size, self.output_size, self.augment = crop_size, output_size, augment

    def __call__(self, image: torch.Tensor, masks: torch.Tensor, *,
                 generator: torch.Generator | None = None) -> Any:
        if self.output_size is not None:
            size = tuple(self.output_size)
            image = F.interpolate(image[None], size=size, mode="bilinear",
                                  align_corners=False)[0]
            masks = F.interpolate(masks[None, None].float(), size=size,
                                  mode="nearest-exact")[0, 0].to(masks.dtype)
        (height, width), (ch, cw) = image.shape[-2:], self.crop_size
        if ch > height or cw > width:
            raise ValueError(f"crop_size {list(self.crop_size)} is larger than the "
                             f"{height}x{width} image it crops; lower crop_size or raise "
                             "output_size.")
        top = int(torch.randint(0, height - ch + 1, (), generator=generator))
        left = int(torch.randint(0, width - cw + 1, (), generator=generator))
        image = image[:, top:top + ch, left:left + cw]
        return self.augment(image, masks=masks[top:top + ch, left:left + cw],
                            generator=generator)


def _list_images(folder: Path) -> list[Path]:
    return sorted(
        p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_EXTENSIONS
    )
