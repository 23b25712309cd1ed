"""Small TFRecord shards in Model Garden's schemas, generated (tests, docs, benchmarks).

Written with `data.tfrecord.write_tfrecord` (CRCs included) and `data.tf_example.build_example`;
images are random-colour JPEGs (or PNGs) drawn with Pillow, so nothing is downloaded::

    python -c "from torchgarden.data.tfrecord_samples import write_classification_shards as w; w('runs/data/tfr', num_shards=4, per_shard=16)"
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from torchgarden.data.tf_example import build_example
from torchgarden.data.tfrecord import write_tfrecord

__all__ = ["encode_image", "write_classification_shards", "write_detection_shards",
           "write_segmentation_shards"]


def encode_image(pixels: np.ndarray, fmt: str = "JPEG") -> bytes:
    """``pixels`` (uint8 ``[H, W, 3]`` or ``[H, W]``) encoded as JPEG or PNG bytes."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format=fmt, quality=90)
    return buffer.getvalue()


def _image(rng: np.random.Generator, height: int, width: int, label: int) -> np.ndarray:
    """A smooth image whose mean colour depends on ``label`` (learnable, compressible)."""
    base = np.array([(label * 67) % 256, (label * 131) % 256, (label * 29) % 256], np.float32)
    ramp = np.linspace(0, 60, width, dtype=np.float32)[None, :, None]
    noise = rng.normal(0, 8, (height, width, 3)).astype(np.float32)
    return np.clip(base + ramp + noise, 0, 255).astype(np.uint8)


def _write_shards(folder: str | os.PathLike[str], prefix: str, num_shards: int, per_shard: int,
                  example: Callable[[int, int], dict[str, Any]]) -> list[str]:
    """``<folder>/<prefix>-0000i-of-0000n`` (Model Garden's shard names), each of
    ``per_shard`` examples ``example(shard, i)``, built in that order; returns the paths."""
    os.makedirs(folder, exist_ok=True)
    paths = []
    for shard in range(num_shards):
        path = os.path.join(os.fspath(folder), f"{prefix}-{shard:05d}-of-{num_shards:05d}")
        write_tfrecord(path, [build_example(example(shard, i)) for i in range(per_shard)])
        paths.append(path)
    return paths


def write_classification_shards(
    folder: str | os.PathLike[str], *, num_shards: int = 2, per_shard: int = 8,
    image_size: tuple[int, int] = (40, 48), num_classes: int = 4, seed: int = 0,
    prefix: str = "train", fmt: str = "JPEG",
) -> list[str]:
    """Writes ``<folder>/<prefix>-0000i-of-0000n`` shards of ``image/encoded`` +
    ``image/class/label`` examples; labels cycle through ``0..num_classes-1``.

    Returns:
        The shard paths.
    """
    rng = np.random.default_rng(seed)

    def example(shard: int, i: int) -> dict[str, Any]:
        label = (shard * per_shard + i) % num_classes
        return {"image/encoded": encode_image(_image(rng, *image_size, label), fmt),
                "image/format": fmt.lower().encode(), "image/class/label": label,
                "image/height": image_size[0], "image/width": image_size[1]}

    return _write_shards(folder, prefix, num_shards, per_shard, example)


def write_detection_shards(
    folder: str | os.PathLike[str], *, num_shards: int = 2, per_shard: int = 4,
    image_size: tuple[int, int] = (64, 64), num_classes: int = 3, seed: int = 0,
    prefix: str = "train",
) -> list[str]:
    """Writes Model Garden detection examples: one to three boxes (normalized
    ``image/object/bbox/*``), ``image/object/class/label`` in ``1..num_classes``,
    ``is_crowd``, ``area`` and ``image/source_id``."""
    rng = np.random.default_rng(seed)
    height, width = image_size

    def example(shard: int, i: int) -> dict[str, Any]:
        pixels = np.full((height, width, 3), 40, np.uint8)
        count = 1 + (shard + i) % 3
        y0 = rng.uniform(0, 0.5, count)
        x0 = rng.uniform(0, 0.5, count)
        y1, x1 = y0 + rng.uniform(0.2, 0.5, count), x0 + rng.uniform(0.2, 0.5, count)
        classes = 1 + (np.arange(count) + i) % num_classes
        for k in range(count):
            pixels[int(y0[k] * height):int(y1[k] * height),
                   int(x0[k] * width):int(x1[k] * width)] = 80 * classes[k]
        return {
            "image/encoded": encode_image(pixels), "image/format": b"jpeg",
            "image/source_id": str(shard * per_shard + i + 1).encode(),
            "image/height": height, "image/width": width,
            "image/object/bbox/ymin": y0.tolist(), "image/object/bbox/xmin": x0.tolist(),
            "image/object/bbox/ymax": y1.tolist(), "image/object/bbox/xmax": x1.tolist(),
            "image/object/class/label": classes.tolist(), "image/object/is_crowd": [0] * count,
            "image/object/area": ((y1 - y0) * (x1 - x0) * height * width).tolist()}

    return _write_shards(folder, prefix, num_shards, per_shard, example)


def write_segmentation_shards(
    folder: str | os.PathLike[str], *, num_shards: int = 2, per_shard: int = 4,
    image_size: tuple[int, int] = (32, 32), num_classes: int = 3, seed: int = 0,
    prefix: str = "train",
) -> list[str]:
    """Writes Model Garden segmentation examples: a JPEG and its PNG class-id mask
    (``image/segmentation/class/encoded``) with a rectangle of class ``1..num_classes-1``."""
    rng = np.random.default_rng(seed)
    height, width = image_size

    def example(shard: int, i: int) -> dict[str, Any]:
        mask = np.zeros((height, width), np.uint8)
        top, left = rng.integers(0, height // 2), rng.integers(0, width // 2)
        mask[top:top + height // 2, left:left + width // 2] = 1 + i % (num_classes - 1)
        pixels = np.repeat((mask * 70 + 30)[..., None], 3, axis=2).astype(np.uint8)
        return {"image/encoded": encode_image(pixels), "image/format": b"jpeg",
                "image/height": height, "image/width": width,
                "image/segmentation/class/encoded": encode_image(mask, "PNG"),
                "image/segmentation/class/format": b"png"}

    return _write_shards(folder, prefix, num_shards, per_shard, example)
