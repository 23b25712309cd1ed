"""A class-per-subfolder image dataset decoded with Pillow."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from torchgarden.utils.suggest import did_you_mean

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif")


class ImageFolderDataset(Dataset):
    """Images stored as `root/<class_name>/<image>`, labelled by sorted class name.

    Class folders are sorted by name and numbered from 0; within a class, files
    are sorted by name. Images are decoded lazily with Pillow into float32
    `[C, H, W]` tensors in [0, 1] (C = 3, or 1 with `grayscale`).

    Args:
        root: Directory holding one subfolder per class.
        image_size: `(height, width)` every image is resized to (bilinear), or
            None to keep each image's size. Defaults to None.
        grayscale: Decode to one channel instead of RGB. Defaults to False.
        transform: Called on each decoded image tensor (e.g. augmentation), or
            None. Defaults to None.
        class_names: The classes to use, in label order; None means every
            subfolder, sorted. Defaults to None.

    Raises:
        FileNotFoundError: If `root` or a named class folder does not exist.
        ValueError: If there are no class folders or a class folder holds no images.
        ImportError: If Pillow is not installed.

    Example:
        >>> ds = ImageFolderDataset("flowers/train", image_size=(32, 32))
        >>> image, label = ds[0]  # image: float32 [3, 32, 32]
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        image_size: tuple[int, int] | None = None,
        grayscale: bool = False,
        transform: Callable[[torch.Tensor], torch.Tensor] | None = None,
        class_names: list[str] | None = None,
    ) -> None:
        self.root = Path(root)
        if not self.root.is_dir():
            raise FileNotFoundError(
                f"ImageFolderDataset root is not a directory: {str(self.root)!r}."
            )
        if image_size is not None and (len(image_size) != 2 or min(image_size) < 1):
            raise ValueError(
                f"image_size must be (height, width) of positive ints, got {image_size!r}."
            )
        found = sorted(p.name for p in self.root.iterdir() if p.is_dir())
        if class_names is None:
            if not found:
                raise ValueError(
                    f"ImageFolderDataset found no class folders in {str(self.root)!r}; "
                    "expected root/<class_name>/<image files>."
                )
            class_names = found
        else:
            for name in class_names:
                if name not in found:
                    hint = did_you_mean(name, found, style="clause") or f"; found {found}."
                    raise FileNotFoundError(
                        f"class_names entry {name!r} is not a folder of {str(self.root)!r}{hint}"
                    )
        self.classes: list[str] = list(class_names)
        self.image_size = tuple(image_size) if image_size is not None else None
        self.grayscale = grayscale
        self.transform = transform
        self.samples: list[tuple[Path, int]] = []
        for label, name in enumerate(self.classes):
            folder = self.root / name
            files = sorted(
                p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_EXTENSIONS
            )
            if not files:
                raise ValueError(
                    f"class folder {str(folder)!r} holds no images with extensions "
                    f"{list(IMAGE_EXTENSIONS)}."
                )
            self.samples.extend((path, label) for path in files)

    def __len__(self) -> int:
        return len(self.samples)

    def _decode(self, path: Path) -> torch.Tensor:
        try:
            from PIL import Image
        except ImportError as err:
            raise ImportError(
                "ImageFolderDataset needs Pillow; install it with pip install 'torchgarden[vision]'."
            ) from err
        try:
            with warnings.catch_warnings():  # _check_pixels says it in one line instead.
                warnings.simplefilter("ignore", Image.DecompressionBombWarning)
                image_file = Image.open(path)
            with image_file as image:
                _check_pixels(image, path, Image.MAX_IMAGE_PIXELS)
                image = image.convert("L" if self.grayscale else "RGB")
                if self.image_size is not None:
                    height, width = self.image_size
                    image = image.resize((width, height), Image.Resampling.BILINEAR)
                array = np.asarray(image, dtype=np.uint8)
        except _TooManyPixels:
            raise
        except Image.DecompressionBombError as err:  # Pillow's own limit, at twice its bound.
            raise _TooManyPixels(
                f"image {str(path)!r} declares more pixels than are decoded safely ({err}); "
                "resize it or drop it from the folder"
            ) from None
        except (OSError, ValueError) as err:
            raise ValueError(f"cannot decode image {str(path)!r}: {err}") from None
        if array.ndim == 2:
            array = array[:, :, None]
        return torch.from_numpy(array.transpose(2, 0, 1).copy()).float().div_(255.0)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        path, label = self.samples[index]
        image = self._decode(path)
        if self.transform is not None:
            image = self.transform(image)
        return image, torch.tensor(label, dtype=torch.int64)

    def to_arrays(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Decodes every image into one stacked pair, for small datasets.

        Returns:
            `(x, y)`: float32 `[N, C, H, W]` and int64 `[N]`, ready for `ArrayDataset`.

        Raises:
            ValueError: If images differ in size (pass `image_size` to resize them).
        """
        images: list[torch.Tensor] = []
        labels: list[int] = []
        for index in range(len(self.samples)):
            image, label = self[index]
            if images and image.shape != images[0].shape:
                raise ValueError(
                    f"to_arrays needs equally sized images, got {tuple(images[0].shape)} and "
                    f"{tuple(image.shape)} ({str(self.samples[index][0])!r}); pass image_size=(H, W)."
                )
            images.append(image)
            labels.append(int(label))
        return torch.stack(images), torch.tensor(labels, dtype=torch.int64)

    def extra_repr(self) -> str:
        """Short description used by `repr`."""
        return f"root={str(self.root)!r}, classes={len(self.classes)}, images={len(self)}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.extra_repr()})"


class _TooManyPixels(ValueError):
    """An image header declares more pixels than are decoded safely."""


def _check_pixels(image: Any, path: Path, limit: int | None) -> None:
    """Refuses an image whose header declares more pixels than Pillow decodes safely
    (a few bytes of PNG can declare gigabytes: a decompression bomb), before decoding."""
    width, height = image.size
    limit = limit or 89_478_485  # Pillow's default MAX_IMAGE_PIXELS.
    if width * height > limit:
        raise _TooManyPixels(
            f"image {str(path)!r} declares {width}x{height} pixels, more than the {limit} "
            "decoded safely (a decompression bomb?); resize it or drop it from the folder"
        )
