"""A deterministic generator of shape images with masks and COCO boxes (no downloads).

Each image has a smooth random background, clutter that is *not* an object
(thin lines, soft blobs, pixel noise) and 1 to `max_objects` hard-edged shapes
of random class, size, aspect, colour and position that may overlap. Class
`k` is the k-th entry of `SHAPE_NAMES` (1 = rectangle, 2 = ellipse,
3 = triangle, ...). The same files serve segmentation (image + mask PNG pairs)
and detection (COCO-format JSON), so the loaders that read them also read a
user's data in the same formats.

Layout written under `root`, per split `s` in (`train`, `validation`)::

    root/s/images/000000.png    RGB image
    root/s/masks/000000.png     one channel, per-pixel class id (0 = background)
    root/s/annotations.json     COCO: images, annotations (bbox, area, RLE), categories
    root/DONE                   JSON of the arguments, written last

Example:
    >>> dirs = generate_shapes_dataset("/tmp/shapes", num_train=8, num_validation=4)
    >>> sorted(dirs)
    ['train', 'validation']
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "SHAPE_NAMES",
    "default_data_root",
    "draw_shapes_image",
    "generate_shapes_dataset",
    "shapes_dataset_root",
]

SHAPE_NAMES: tuple[str, ...] = ("rectangle", "ellipse", "triangle", "diamond", "cross", "ring")
"""Category names; category id `k` (1-based) draws `SHAPE_NAMES[k - 1]`."""

_VERSION = "shapes-v1"
_SPLITS = ("train", "validation")
# Side of an object relative to the image, drawn log-uniformly: at 64 px this
# spans ~8 px (COCO "small") to ~51 px (medium); large needs image_size >= 128.
_MIN_SIDE, _MAX_SIDE = 0.13, 0.8
# A new object may hide at most this fraction of an earlier object's pixels.
_MAX_OCCLUSION = 0.5
_PLACEMENT_TRIES = 12
_NOISE_STD = 6.0
_MIN_COLOUR_DISTANCE = 90.0


def default_data_root() -> str:
    """Where generated data lives: `$TORCHGARDEN_DATA_DIR`, else `~/.cache/torchgarden`."""
    env = os.environ.get("TORCHGARDEN_DATA_DIR")
    if env:
        return env
    return str(Path("~/.cache/torchgarden").expanduser())


def _arguments(
    num_train: int, num_validation: int, image_size: int, num_classes: int, seed: int,
    max_objects: int,
) -> dict[str, Any]:
    return {
        "version": _VERSION,
        "num_train": num_train,
        "num_validation": num_validation,
        "image_size": image_size,
        "num_classes": num_classes,
        "seed": seed,
        "max_objects": max_objects,
    }


def shapes_dataset_root(
    *,
    num_train: int = 512,
    num_validation: int = 128,
    image_size: int = 64,
    num_classes: int = 3,
    seed: int = 0,
    max_objects: int = 4,
    data_root: str | os.PathLike[str] | None = None,
) -> str:
    """The default directory of a generated dataset: `<data_root>/shapes-v1-<args hash>`.

    Args:
        num_train, num_validation, image_size, num_classes, seed, max_objects:
            As for `generate_shapes_dataset` (same defaults).
        data_root: Parent directory, or None for `default_data_root()`.

    Returns:
        The path (not created).
    """
    args = _arguments(num_train, num_validation, image_size, num_classes, seed, max_objects)
    digest = hashlib.sha256(json.dumps(args, sort_keys=True).encode()).hexdigest()[:12]
    parent = Path(data_root) if data_root is not None else Path(default_data_root())
    return str(parent / f"{_VERSION}-{digest}")


def generate_shapes_dataset(
    root: str | os.PathLike[str],
    *,
    num_train: int = 512,
    num_validation: int = 128,
    image_size: int = 64,
    num_classes: int = 3,
    seed: int = 0,
    max_objects: int = 4,
) -> dict[str, str]:
    """Writes (once) a train and a validation split of shape images, masks and COCO JSON.

    Output is a pure function of the arguments. Image `i` of a split is drawn
    from its own RNG seeded by `(seed, split, i)`, so the first images do not
    change when `num_train` grows. The data is generated into a temporary
    sibling directory that is renamed to `root` once `root/DONE` is written,
    so `root` is either absent or complete; a second call with the same
    arguments returns at once.

    Args:
        root: Output directory; must not exist yet, or hold a dataset written
            by this function with the same arguments.
        num_train: Training images. Defaults to 512.
        num_validation: Validation images. Defaults to 128.
        image_size: Height and width in pixels (>= 16). Defaults to 64.
        num_classes: Object classes, 1 to `len(SHAPE_NAMES)` (6). Defaults to 3.
        seed: Base seed. Defaults to 0.
        max_objects: Most objects per image (>= 1); each image has 1 to
            `max_objects`. Defaults to 4.

    Returns:
        `{"train": "<root>/train", "validation": "<root>/validation"}`.

    Raises:
        ValueError: If an argument is out of range, or `root` exists and is not
            a shapes dataset generated with the same arguments.
    """
    _check_arguments(num_train, num_validation, image_size, num_classes, max_objects)
    root = Path(root)
    args = _arguments(num_train, num_validation, image_size, num_classes, seed, max_objects)
    splits = {split: str(root / split) for split in _SPLITS}
    if _is_complete(root, args):
        return splits
    root.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    print(f"torchgarden: generating the shapes dataset ({num_train} + {num_validation} images "
          f"of {image_size}x{image_size}) in {root}; once, later runs reuse it...", flush=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{root.name}.tmp-", dir=root.parent))
    try:
        counts = {"train": num_train, "validation": num_validation}
        for split_index, split in enumerate(_SPLITS):
            _write_split(
                staging / split, counts[split], seed=seed, split_index=split_index,
                image_size=image_size, num_classes=num_classes, max_objects=max_objects,
            )
        (staging / "DONE").write_text(json.dumps(args, indent=2, sort_keys=True) + "\n")
        print(f"torchgarden: shapes dataset written in {time.perf_counter() - start:.1f} s.",
              flush=True)
        try:
            os.rename(staging, root)
        except OSError:
            # Another process may have finished the same dataset first.
            if not _is_complete(root, args):
                raise
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return splits


def _check_arguments(
    num_train: int, num_validation: int, image_size: int, num_classes: int, max_objects: int
) -> None:
    if num_train < 1 or num_validation < 1:
        raise ValueError(
            f"num_train ({num_train}) and num_validation ({num_validation}) must be >= 1."
        )
    if image_size < 16:
        raise ValueError(f"image_size must be >= 16 pixels, got {image_size}.")
    if not 1 <= num_classes <= len(SHAPE_NAMES):
        raise ValueError(
            f"num_classes must be in 1..{len(SHAPE_NAMES)} ({', '.join(SHAPE_NAMES)}), "
            f"got {num_classes}."
        )
    if max_objects < 1:
        raise ValueError(f"max_objects must be >= 1, got {max_objects}.")


def _is_complete(root: Path, args: dict[str, Any]) -> bool:
    """True if `root` holds a finished dataset of `args`; raises if it holds anything else."""
    done = root / "DONE"
    if done.is_file():
        recorded = json.loads(done.read_text())
        if recorded != args:
            raise ValueError(
                f"{str(done)!r} records a shapes dataset made with {recorded}, not {args}; "
                "pass a different root (e.g. shapes_dataset_root(...)) or delete it."
            )
        return True
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise ValueError(
            f"{str(root)!r} exists but is not a generated shapes dataset (no DONE file); "
            "pass an empty or new directory."
        )
    if root.is_dir():
        root.rmdir()  # An empty directory is replaced by the finished dataset.
    return False


def _write_split(
    split_dir: Path, num_images: int, *, seed: int, split_index: int, image_size: int,
    num_classes: int, max_objects: int,
) -> None:
    from PIL import Image
    from pycocotools import mask as mask_utils
    from tqdm.auto import tqdm

    images_dir, masks_dir = split_dir / "images", split_dir / "masks"
    images_dir.mkdir(parents=True)
    masks_dir.mkdir()
    coco_images: list[dict[str, Any]] = []
    annotations: list[dict[str, Any]] = []
    bar = tqdm(range(num_images), desc=f"generating {split_dir.name}", unit="image",
               disable=not sys.stderr.isatty(), leave=False)  # A bar on a terminal only.
    for index in bar:
        rng = np.random.default_rng([seed, split_index, index])
        image, class_mask, instances = draw_shapes_image(
            rng, image_size=image_size, num_classes=num_classes, max_objects=max_objects
        )
        name = f"{index:06d}.png"
        Image.fromarray(image).save(images_dir / name)
        Image.fromarray(class_mask).save(masks_dir / name)
        coco_images.append(
            {"id": index + 1, "file_name": name, "height": image_size, "width": image_size}
        )
        for category_id, visible in instances:
            rows = np.flatnonzero(visible.any(axis=1))
            cols = np.flatnonzero(visible.any(axis=0))
            x, y = int(cols[0]), int(rows[0])
            rle = mask_utils.encode(np.asfortranarray(visible.astype(np.uint8)))
            annotations.append({
                "id": len(annotations) + 1,
                "image_id": index + 1,
                "category_id": category_id,
                "bbox": [x, y, int(cols[-1]) - x + 1, int(rows[-1]) - y + 1],
                "area": int(visible.sum()),
                "iscrowd": 0,
                "segmentation": {"size": list(rle["size"]), "counts": rle["counts"].decode()},
            })
    categories = [{"id": k, "name": SHAPE_NAMES[k - 1]} for k in range(1, num_classes + 1)]
    coco = {"images": coco_images, "annotations": annotations, "categories": categories}
    (split_dir / "annotations.json").write_text(json.dumps(coco))


def draw_shapes_image(
    rng: np.random.Generator, *, image_size: int, num_classes: int, max_objects: int
) -> tuple[np.ndarray, np.ndarray, list[tuple[int, np.ndarray]]]:
    """Draws one image.

    Args:
        rng: The image's random generator (consumed).
        image_size: Height and width in pixels.
        num_classes: Classes to draw from (1..num_classes).
        max_objects: Most objects in the image.

    Returns:
        `(image, class_mask, instances)`: uint8 `[H, W, 3]`, uint8 `[H, W]` class
        ids (0 = background, the topmost object wins), and per visible object
        `(category_id, bool [H, W] visible mask)`, bottom to top.
    """
    size = image_size
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float64) + 0.5
    image = _background(rng, yy, xx, size)
    _add_clutter(rng, image, yy, xx, size)
    instance_map = np.full((size, size), -1, dtype=np.int64)
    placed: list[tuple[int, np.ndarray]] = []  # (category_id, full mask)
    for _ in range(int(rng.integers(1, max_objects + 1))):
        category_id = int(rng.integers(1, num_classes + 1))
        for _try in range(_PLACEMENT_TRIES):
            shape = _shape_mask(rng, SHAPE_NAMES[category_id - 1], yy, xx, size)
            if shape.any() and _occlusion_ok(shape, instance_map, placed):
                break
        else:
            continue
        colour = _object_colour(rng, image[shape].mean(axis=0))
        image[shape] = colour
        instance_map[shape] = len(placed)
        placed.append((category_id, shape))
    image += rng.normal(0.0, _NOISE_STD, size=image.shape)
    image = np.clip(np.rint(image), 0, 255).astype(np.uint8)
    class_mask = np.zeros((size, size), dtype=np.uint8)
    instances: list[tuple[int, np.ndarray]] = []
    for index, (category_id, _shape) in enumerate(placed):
        visible = instance_map == index
        if visible.any():
            class_mask[visible] = category_id
            instances.append((category_id, visible))
    return image, class_mask, instances


def _background(rng: np.random.Generator, yy: np.ndarray, xx: np.ndarray, size: int) -> np.ndarray:
    """A linear gradient between two random colours, float `[H, W, 3]` in 0..255."""
    start, end = rng.uniform(0, 255, size=(2, 3))
    angle = rng.uniform(0, 2 * np.pi)
    t = ((xx - size / 2) * np.cos(angle) + (yy - size / 2) * np.sin(angle)) / size + 0.5
    t = np.clip(t, 0.0, 1.0)[..., None]
    return start * (1 - t) + end * t


def _add_clutter(
    rng: np.random.Generator, image: np.ndarray, yy: np.ndarray, xx: np.ndarray, size: int
) -> None:
    """Draws 0-3 thin lines and 0-2 soft blobs, which are background, into `image`."""
    for _ in range(int(rng.integers(0, 4))):
        (y0, x0), (y1, x1) = rng.uniform(0, size, size=(2, 2))
        width = rng.uniform(0.5, 1.2)
        dy, dx = y1 - y0, x1 - x0
        t = np.clip(((yy - y0) * dy + (xx - x0) * dx) / max(dy * dy + dx * dx, 1e-9), 0, 1)
        distance = np.hypot(yy - (y0 + t * dy), xx - (x0 + t * dx))
        image[distance <= width] = rng.uniform(0, 255, size=3)
    for _ in range(int(rng.integers(0, 3))):
        cy, cx = rng.uniform(0, size, size=2)
        sigma = rng.uniform(0.04, 0.12) * size
        alpha = 0.6 * np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * sigma**2))[..., None]
        image *= 1 - alpha
        image += alpha * rng.uniform(0, 255, size=3)


def _shape_mask(
    rng: np.random.Generator, name: str, yy: np.ndarray, xx: np.ndarray, size: int
) -> np.ndarray:
    """A bool `[H, W]` mask of one shape of random size, aspect and position."""
    side = size * np.exp(rng.uniform(np.log(_MIN_SIDE), np.log(_MAX_SIDE)))
    aspect = np.exp(rng.uniform(-0.4, 0.4))
    hy, hx = side * aspect / 2, side / aspect / 2
    hy, hx = min(hy, size / 2), min(hx, size / 2)
    cy = rng.uniform(hy, size - hy)
    cx = rng.uniform(hx, size - hx)
    u, v = (xx - cx) / hx, (yy - cy) / hy  # both in [-1, 1] over the shape's box
    if name == "rectangle":
        return (np.abs(u) <= 1) & (np.abs(v) <= 1)
    if name == "ellipse":
        return u * u + v * v <= 1
    if name == "triangle":
        # Isosceles, apex pointing one of four ways: rotate the frame by k * 90 degrees.
        for _ in range(int(rng.integers(0, 4))):
            u, v = -v, u
        return (np.abs(v) <= 1) & (np.abs(u) <= (v + 1) / 2)
    if name == "diamond":
        return np.abs(u) + np.abs(v) <= 1
    if name == "cross":
        bar = 1 / 3
        return ((np.abs(u) <= 1) & (np.abs(v) <= bar)) | ((np.abs(u) <= bar) & (np.abs(v) <= 1))
    if name == "ring":
        r2 = u * u + v * v
        return (r2 <= 1) & (r2 >= 0.3)
    raise ValueError(f"unknown shape {name!r}; expected one of {SHAPE_NAMES}.")


def _occlusion_ok(
    shape: np.ndarray, instance_map: np.ndarray, placed: list[tuple[int, np.ndarray]]
) -> bool:
    """True if `shape` on top hides at most `_MAX_OCCLUSION` of every earlier object."""
    covered = instance_map[shape]
    covered = covered[covered >= 0]
    if covered.size == 0:
        return True
    for index, hidden in zip(*np.unique(covered, return_counts=True)):
        visible_now = int((instance_map == index).sum())
        full = int(placed[index][1].sum())
        if visible_now - hidden < (1 - _MAX_OCCLUSION) * full:
            return False
    return True


def _object_colour(rng: np.random.Generator, under: np.ndarray) -> np.ndarray:
    """A random colour at least `_MIN_COLOUR_DISTANCE` from the mean colour it covers."""
    colour = rng.uniform(0, 255, size=3)
    for _ in range(20):
        if np.linalg.norm(colour - under) >= _MIN_COLOUR_DISTANCE:
            break
        colour = rng.uniform(0, 255, size=3)
    return colour
