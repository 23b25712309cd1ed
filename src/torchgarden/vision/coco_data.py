"""A detection dataset over a COCO-format JSON file and an images folder, and its collate.

This is how users bring their own detection data: any file with COCO's ``images``,
``annotations`` (``bbox`` as ``[x, y, width, height]`` pixels) and ``categories`` lists
plus a folder holding the images. Category ids may be any integers; they are mapped to
contiguous labels ``1..num_categories`` in increasing id order (0 is background), and
`COCODetectionDataset.category_ids` maps back. Bad data fails on construction (or on
reading the image) with one line naming the file: malformed JSON, a missing image file,
an unknown category or image id, a box with non-positive size or outside its image (a
1-pixel tolerance absorbs rounding; boxes within it are clipped).

Example:
    >>> dataset = COCODetectionDataset("data/train/annotations.json",  # doctest: +SKIP
    ...                                output_size=(64, 64))
    >>> image, target = dataset[0]  # doctest: +SKIP
    >>> loader = torch.utils.data.DataLoader(dataset, batch_size=8,  # doctest: +SKIP
    ...                                      collate_fn=collate_detections)
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from torchgarden.vision.augment import Augmentation, scale_crop
from torchgarden.vision.boxes import convert_boxes

__all__ = ["COCODetectionDataset", "DEFAULT_MEAN", "DEFAULT_STD", "DetectionCollate",
           "collate_detections", "detection_example"]

DEFAULT_MEAN = (0.485, 0.456, 0.406)
"""ImageNet channel means of [0, 1] RGB images (Model Garden's ``MEAN_RGB / 255``)."""
DEFAULT_STD = (0.229, 0.224, 0.225)
"""ImageNet channel standard deviations of [0, 1] RGB images."""

_BOX_TOLERANCE = 1.0
"""Pixels a box may extend past the image border before it is an error."""


def _load_json(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: COCO annotation file not found.") from None
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not valid JSON ({err.msg} at line {err.lineno}, column "
                         f"{err.colno}).") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a COCO object with 'images', 'annotations' and "
                         f"'categories', got a JSON {type(data).__name__}.")
    for key in ("images", "annotations", "categories"):
        if not isinstance(data.get(key), list):
            raise ValueError(f"{path}: missing the '{key}' list of a COCO detection file "
                             f"(found keys {sorted(data)}).")
    return data


def _require_keys(path: str, where: str, entry: Any, keys: Sequence[str]) -> None:
    if not isinstance(entry, dict):
        raise ValueError(f"{path}: {where} must be an object, got {entry!r}.")
    missing = [key for key in keys if key not in entry]
    if missing:
        raise ValueError(f"{path}: {where} lacks {', '.join(repr(k) for k in missing)}.")


class COCODetectionDataset(Dataset):
    """COCO-format detection data: ``(image, target)`` examples for RetinaNet.

    Images are read with Pillow as RGB, scaled to [0, 1], resized (aspect ratio kept)
    to fit ``output_size`` and padded at the bottom/right, then normalized. With an
    ``augmentation`` (training) its flip, scale-crop and colour jitter are applied
    instead of the plain resize; boxes a crop removes are dropped with their labels.

    ``target`` holds, for the ``K`` annotations kept:

    * ``boxes [K, 4]`` float32 ``yxyx`` pixels of the returned (resized) image;
    * ``classes [K]`` int64 labels ``1..num_classes``;
    * ``is_crowds [K]`` int64 COCO ``iscrowd`` flags;
    * ``areas [K]`` float32 COCO ``area`` (original pixels; box area when absent);
    * ``original_boxes [K, 4]`` float32 ``yxyx`` boxes of the original image, as in
      the file (not augmented);
    * ``source_id``, ``height``, ``width``: int64 scalars, the COCO image id and size;
    * ``image_info [4, 2]`` float32, Model Garden's layout: original ``(h, w)``,
      resized ``(h, w)``, scale ``(y, x)`` and crop offset ``(y, x)``; original pixels
      are ``(resized pixels + offset) / scale``.

    Args:
        annotation_file: The COCO JSON file.
        image_dir: Folder the ``file_name`` entries are relative to. Defaults to the
            ``images`` folder beside ``annotation_file``.
        output_size: ``(height, width)`` of the returned images. Defaults to
            ``(64, 64)``.
        augmentation: A `torchgarden.vision.augment.Augmentation` without mean/std (this
            dataset normalizes), or None for the deterministic resize. Defaults to None.
        mean: Per-channel mean of [0, 1] images. Defaults to `DEFAULT_MEAN`.
        std: Per-channel standard deviation. Defaults to `DEFAULT_STD`.
        skip_crowd: Leave ``iscrowd`` annotations out (training). Defaults to False.
        cache_images: Keep each decoded image in memory after its first read (uint8,
            ``3 * H * W`` bytes per image). Defaults to False.

    Raises:
        FileNotFoundError: If the JSON file or an image file it lists does not exist.
        ValueError: For malformed JSON or annotations; the message names the file.
    """

    def __init__(
        self,
        annotation_file: str | os.PathLike[str],
        image_dir: str | os.PathLike[str] | None = None,
        *,
        output_size: Sequence[int] = (64, 64),
        augmentation: Augmentation | None = None,
        mean: Sequence[float] = DEFAULT_MEAN,
        std: Sequence[float] = DEFAULT_STD,
        skip_crowd: bool = False,
        cache_images: bool = False,
    ) -> None:
        path = os.fspath(annotation_file)
        self.annotation_file = path
        self.image_dir = os.fspath(image_dir) if image_dir else os.path.join(
            os.path.dirname(path), "images")
        if len(output_size) != 2 or min(output_size) < 1:
            raise ValueError(f"output_size must be (height, width) >= 1, got {output_size!r}.")
        if augmentation is not None and augmentation.mean is not None:
            raise ValueError("COCODetectionDataset normalizes images itself; build the "
                             "augmentation without mean/std.")
        self.output_size = (int(output_size[0]), int(output_size[1]))
        self.augmentation = augmentation
        self.mean, self.std = tuple(mean), tuple(std)
        self._cache: dict[int, torch.Tensor] | None = {} if cache_images else None
        data = _load_json(path)

        for index, category in enumerate(data["categories"]):
            _require_keys(path, f"categories[{index}]", category, ("id",))
        self.category_ids: list[int] = sorted(int(c["id"]) for c in data["categories"])
        """COCO category id of each label: label ``k`` is ``category_ids[k - 1]``."""
        names = {int(c["id"]): str(c.get("name", c["id"])) for c in data["categories"]}
        self.category_names: list[str] = [names[i] for i in self.category_ids]
        label_of = {cid: k + 1 for k, cid in enumerate(self.category_ids)}

        self._images: list[dict[str, Any]] = []
        index_of: dict[int, int] = {}
        for index, image in enumerate(data["images"]):
            _require_keys(path, f"images[{index}]", image, ("id", "file_name", "height", "width"))
            file = os.path.join(self.image_dir, str(image["file_name"]))
            if not os.path.isfile(file):
                raise FileNotFoundError(f"{file}: image file not found (image id {image['id']} "
                                        f"of {path}).")
            index_of[int(image["id"])] = index
            self._images.append({"id": int(image["id"]), "file": file,
                                 "height": int(image["height"]), "width": int(image["width"]),
                                 "boxes": [], "classes": [], "crowds": [], "areas": []})

        for index, annotation in enumerate(data["annotations"]):
            _require_keys(path, f"annotations[{index}]", annotation,
                          ("image_id", "category_id", "bbox"))
            name = f"annotation {annotation.get('id', index)}"
            category = annotation["category_id"]
            if category not in label_of:
                raise ValueError(f"{path}: {name} has category_id {category!r}, which is not "
                                 f"in categories {self.category_ids}.")
            if annotation["image_id"] not in index_of:
                raise ValueError(f"{path}: {name} refers to image_id "
                                 f"{annotation['image_id']!r}, which is not in images.")
            image = self._images[index_of[annotation["image_id"]]]
            if annotation.get("iscrowd", 0) and skip_crowd:
                continue
            x, y, w, h = self._check_box(path, name, image, annotation["bbox"])
            image["boxes"].append([y, x, y + h, x + w])
            image["classes"].append(label_of[category])
            image["crowds"].append(int(annotation.get("iscrowd", 0)))
            image["areas"].append(float(annotation.get("area", w * h)))

    @staticmethod
    def _check_box(path: str, name: str, image: dict[str, Any],
                   bbox: Any) -> tuple[float, float, float, float]:
        where = f"{path}: {name} (image {os.path.basename(image['file'])})"
        if (not isinstance(bbox, list | tuple) or len(bbox) != 4
                or not all(isinstance(v, int | float) for v in bbox)):
            raise ValueError(f"{where} has bbox {bbox!r}; expected [x, y, width, height].")
        x, y, w, h = (float(v) for v in bbox)
        if w <= 0 or h <= 0:
            raise ValueError(f"{where} has bbox {bbox} with non-positive width or height.")
        height, width = image["height"], image["width"]
        tol = _BOX_TOLERANCE
        if x < -tol or y < -tol or x + w > width + tol or y + h > height + tol:
            raise ValueError(f"{where} has bbox {bbox} (x, y, width, height) outside the "
                             f"{width}x{height} (width x height) image.")
        x0, y0 = max(x, 0.0), max(y, 0.0)
        x1, y1 = min(x + w, float(width)), min(y + h, float(height))
        return x0, y0, x1 - x0, y1 - y0

    @property
    def num_classes(self) -> int:
        """Number of categories in the file."""
        return len(self.category_ids)

    def __len__(self) -> int:
        return len(self._images)

    def read_image(self, index: int) -> torch.Tensor:
        """Image ``index`` as a float ``[3, H, W]`` tensor in [0, 1] (not resized).

        Raises:
            ValueError: If the file is not a readable image or its size differs from
                the JSON's ``height``/``width``.
        """
        from PIL import Image, UnidentifiedImageError

        if self._cache is not None and index in self._cache:
            return self._cache[index].float().div_(255.0)
        info = self._images[index]
        try:
            with Image.open(info["file"]) as handle:
                pixels = np.asarray(handle.convert("RGB"))
        except (UnidentifiedImageError, OSError) as err:
            raise ValueError(f"{info['file']}: cannot read the image ({err}).") from None
        if pixels.shape[:2] != (info["height"], info["width"]):
            raise ValueError(f"{info['file']}: image is {pixels.shape[1]}x{pixels.shape[0]} "
                             f"(width x height) but {self.annotation_file} says "
                             f"{info['width']}x{info['height']}.")
        pixels = torch.from_numpy(pixels.copy()).permute(2, 0, 1)
        if self._cache is not None:
            self._cache[index] = pixels
        return pixels.float().div_(255.0)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        info = self._images[index]
        return detection_example(
            self.read_image(index), info["boxes"], info["classes"], info["crowds"],
            info["areas"], source_id=info["id"], output_size=self.output_size,
            augmentation=self.augmentation, mean=self.mean, std=self.std)


def detection_example(
    image: torch.Tensor, boxes: Any, classes: Any, crowds: Any, areas: Any, *,
    source_id: int, output_size: tuple[int, int], augmentation: Augmentation | None,
    mean: Sequence[float], std: Sequence[float],
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """One ``(image, target)`` example as `COCODetectionDataset` returns it.

    Args:
        image: Float ``[3, H, W]`` in [0, 1], the original image.
        boxes: ``[K, 4]`` ``yxyx`` boxes in pixels of ``image``.
        classes: ``[K]`` labels ``1..num_classes``.
        crowds: ``[K]`` crowd flags.
        areas: ``[K]`` areas in original pixels.
        source_id: The image id.
        output_size: ``(height, width)`` of the returned image.
        augmentation: Applied instead of the plain resize when given.
        mean: Per-channel mean of [0, 1] images.
        std: Per-channel standard deviation.
        generator: RNG of the augmentation; None: torch's global RNG.
    """
    height, width = int(image.shape[-2]), int(image.shape[-1])
    original = torch.as_tensor(np.asarray(boxes, np.float32)).reshape(-1, 4)
    classes = torch.as_tensor(np.asarray(classes, np.int64))
    crowds = torch.as_tensor(np.asarray(crowds, np.int64))
    areas = torch.as_tensor(np.asarray(areas, np.float32))
    xyxy = convert_boxes(original, source="yxyx", target="xyxy")
    if augmentation is not None:
        out = augmentation(image, xyxy, labels=torch.arange(len(classes)), generator=generator)
        image, xyxy, kept = out.image, out.boxes, out.labels
        original, classes, crowds, areas = (original[kept], classes[kept], crowds[kept],
                                            areas[kept])
        # Augmentation does not report its scale or offset: image_info holds the
        # plain resize, which evaluation (never augmented) relies on.
    else:
        image, xyxy, _, _ = scale_crop(image, xyxy, output_size=output_size)
    if tuple(image.shape[-2:]) != tuple(output_size):
        raise ValueError(f"augmentation returned a {tuple(image.shape[-2:])} image; "
                         f"build it with output_size={output_size}.")
    # The resize `scale_crop` applies at scale 1: fit into output_size, round.
    factor = min(output_size[0] / height, output_size[1] / width)
    new_h, new_w = max(1, round(height * factor)), max(1, round(width * factor))
    image_info = torch.tensor([[height, width], [new_h, new_w],
                               [new_h / height, new_w / width], [0.0, 0.0]],
                              dtype=torch.float32)
    target = {
        "boxes": convert_boxes(xyxy, source="xyxy", target="yxyx"),
        "classes": classes,
        "is_crowds": crowds,
        "areas": areas,
        "original_boxes": original,
        "source_id": torch.tensor(source_id, dtype=torch.long),
        "height": torch.tensor(height, dtype=torch.long),
        "width": torch.tensor(width, dtype=torch.long),
        "image_info": image_info,
    }
    mean_t = image.new_tensor(mean).view(-1, 1, 1)
    std_t = image.new_tensor(std).view(-1, 1, 1)
    return (image - mean_t) / std_t, target


_PER_BOX_KEYS = {"boxes": 0.0, "classes": 0, "is_crowds": 0, "areas": 0.0,
                 "original_boxes": 0.0}


def collate_detections(
    samples: Sequence[tuple[torch.Tensor, dict[str, torch.Tensor]]],
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Batches `COCODetectionDataset` examples, padding the per-box entries.

    Per-box entries (``boxes``, ``classes``, ``is_crowds``, ``areas``,
    ``original_boxes``) are padded with zeros to the batch's largest count (at least 1
    row); class 0 marks padding. ``num_detections [B]`` holds the real counts; the
    other entries are stacked.

    Returns:
        ``(images [B, 3, H, W], labels)``.

    Raises:
        ValueError: For an empty batch or images of different sizes.
    """
    if not samples:
        raise ValueError("collate_detections: got an empty batch.")
    shapes = {tuple(image.shape) for image, _ in samples}
    if len(shapes) != 1:
        raise ValueError(f"collate_detections: images in a batch must share one shape, got "
                         f"{sorted(shapes)}; give the dataset a fixed output_size.")
    images = torch.stack([image for image, _ in samples])
    counts = [len(target["classes"]) for _, target in samples]
    rows = max(1, *counts)
    labels: dict[str, torch.Tensor] = {"num_detections": torch.tensor(counts, dtype=torch.long)}
    for key in samples[0][1]:
        values = [target[key] for _, target in samples]
        if key in _PER_BOX_KEYS:
            padded = values[0].new_full((len(values), rows, *values[0].shape[1:]),
                                        _PER_BOX_KEYS[key])
            for i, value in enumerate(values):
                padded[i, : len(value)] = value
            labels[key] = padded
        else:
            labels[key] = torch.stack(values)
    return images, labels


class DetectionCollate:
    """`collate_detections` of each image's first ``max_num_instances`` boxes (Model
    Garden's fixed-size parser labels), images cast to ``dtype``. Picklable.

    Args:
        max_num_instances: Boxes kept per image. Defaults to 100.
        dtype: ``float32``, ``bfloat16`` or ``float16``. Defaults to "float32".
    """

    def __init__(self, *, max_num_instances: int = 100, dtype: str = "float32") -> None:
        dtypes = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
        self.max_num_instances, self.dtype = int(max_num_instances), dtypes[dtype]

    def __call__(self, samples: Sequence[tuple[torch.Tensor, dict[str, torch.Tensor]]]
                 ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        n = self.max_num_instances
        kept = [(image, {key: value[:n] if key in _PER_BOX_KEYS else value
                         for key, value in target.items()}) for image, target in samples]
        images, labels = collate_detections(kept)
        return images.to(self.dtype), labels
