"""Detection and segmentation ``tf.train.Example`` records -> the tasks' examples.

`DetectionRecord` decodes Model Garden's detection schema (`data.tf_example.decode_detection`)
into the ``(image, target)`` of `COCODetectionDataset` (boxes scaled from normalized to
pixels; crowd boxes dropped when training, as Model Garden's RetinaNet parser does with
``skip_crowd_during_training``); `SegmentationRecord` decodes the segmentation schema into
the ``(image, mask)`` of `SegmentationFolderDataset`. Both are picklable (they run in loader
workers) and draw their augmentation from the record's seed.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from torchgarden.vision.augment import Augmentation

__all__ = ["DetectionRecord", "SegmentationRecord", "decode_rgb", "detection_loader"]


def decode_rgb(encoded: bytes) -> torch.Tensor:
    """An encoded image as float ``[3, H, W]`` in [0, 1], its pixels as
    ``tf.io.decode_image`` decodes them (`classification_input.decode_image`)."""
    from torchgarden.vision.classification_input import decode_image

    return torch.from_numpy(decode_image(encoded)).permute(2, 0, 1).float().div_(255.0)


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed & ((1 << 63) - 1))


class DetectionRecord:
    """A detection record -> ``(normalized image, target)`` (see the module docstring).

    Args:
        output_size: ``(height, width)`` of the returned images.
        augmentation: Training augmentation (without mean/std), or None.
        mean: Per-channel mean of [0, 1] images.
        std: Per-channel standard deviation.
        num_classes: Class labels must be in ``1..num_classes``.
        skip_crowd: Drop crowd boxes (training).
    """

    def __init__(self, output_size: Sequence[int], *, augmentation: Augmentation | None,
                 mean: Sequence[float], std: Sequence[float], num_classes: int,
                 skip_crowd: bool) -> None:
        self.output_size = (int(output_size[0]), int(output_size[1]))
        self.augmentation, self.mean, self.std = augmentation, tuple(mean), tuple(std)
        self.num_classes, self.skip_crowd = num_classes, skip_crowd

    def __call__(self, data: bytes, seed: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        from torchgarden.data.tf_example import decode_detection
        from torchgarden.vision.coco_data import detection_example

        decoded = decode_detection(data)
        image = decode_rgb(decoded["image"])
        height, width = image.shape[-2:]
        classes = decoded["classes"]
        if len(classes) and (classes.min() < 1 or classes.max() > self.num_classes):
            raise ValueError(f"image/object/class/label {classes.tolist()} is outside 1.."
                             f"{self.num_classes} (task.model.num_classes)")
        keep = ~decoded["is_crowd"] if self.skip_crowd else np.ones(len(classes), bool)
        boxes = decoded["boxes"][keep] * np.array([height, width, height, width], np.float32)
        source = decoded["source_id"]
        try:
            source_id = int(source) if source else -1
        except ValueError:
            raise ValueError(f"image/source_id {source!r} is not an integer (Model Garden "
                             "reads it as a number)") from None
        return detection_example(
            image, boxes, classes[keep], decoded["is_crowd"][keep].astype(np.int64),
            decoded["area"][keep], source_id=source_id, output_size=self.output_size,
            augmentation=self.augmentation, mean=self.mean, std=self.std,
            generator=_generator(seed))


class SegmentationRecord:
    """A segmentation record -> ``(image, int64 mask)`` as `SegmentationFolderDataset` gives.

    Args:
        augment: The task's augmentation (normalization included).
        num_classes: Mask values must be below this or equal ``ignore_label``.
        ignore_label: The mask value that is ignored.
    """

    def __init__(self, augment: Augmentation, *, num_classes: int, ignore_label: int) -> None:
        self.augment, self.num_classes, self.ignore_label = augment, num_classes, ignore_label

    def __call__(self, data: bytes, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        from PIL import Image

        from torchgarden.data.tf_example import decode_segmentation

        decoded = decode_segmentation(data)
        image = decode_rgb(decoded["image"])
        with Image.open(io.BytesIO(decoded["label"])) as mask_image:
            mask = np.asarray(mask_image).astype(np.int64)
        if mask.ndim != 2:
            raise ValueError(f"image/segmentation/class/encoded has shape {mask.shape}; "
                             "expected a single-channel PNG of class ids")
        if mask.shape != tuple(image.shape[-2:]):
            raise ValueError(f"the mask is {mask.shape[0]}x{mask.shape[1]} (HxW) but the image "
                             f"is {image.shape[-2]}x{image.shape[-1]}")
        bad = (mask >= self.num_classes) & (mask != self.ignore_label)
        if bad.any():
            raise ValueError(f"mask class ids {sorted(np.unique(mask[bad]).tolist())[:5]} are "
                             f"outside 0..{self.num_classes - 1} (task.model.num_classes)")
        out = self.augment(image, masks=torch.from_numpy(mask), generator=_generator(seed))
        return out.image, out.masks


def detection_loader(task_config: Any, params: Any, augmentation: Augmentation | None,
                     input_context: Any, collate_fn: Any) -> Any:
    """The loader of a RetinaNet split on TFRecord shards (labels are the stored class ids,
    ``1..num_classes``), batched by ``collate_fn`` as the COCO path is."""
    from torchgarden.data.tfrecord_input import build_tfrecord_loader

    record = DetectionRecord(task_config.model.input_size[:2], augmentation=augmentation,
                             mean=task_config.image_mean, std=task_config.image_std,
                             num_classes=task_config.model.num_classes,
                             skip_crowd=bool(params.is_training
                                             and params.parser.skip_crowd_during_training))
    return build_tfrecord_loader(params, record, input_context=input_context,
                                 collate_fn=collate_fn)
