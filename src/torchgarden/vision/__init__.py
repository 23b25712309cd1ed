"""Vision building blocks for the reference segmentation and detection tasks.

Names are loaded lazily on first access, so `import torchgarden.vision` (and
the torch-free data generator in `torchgarden.vision.shapes`) does not import
torch.

Example:
    >>> from torchgarden.vision import generate_shapes_dataset, shapes_dataset_root
    >>> dirs = generate_shapes_dataset(shapes_dataset_root(num_train=8, num_validation=4),
    ...                                num_train=8, num_validation=4)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS: dict[str, str] = {
    # shapes data generator (NumPy, Pillow, pycocotools; no torch)
    "SHAPE_NAMES": "torchgarden.vision.shapes",
    "default_data_root": "torchgarden.vision.shapes",
    "draw_shapes_image": "torchgarden.vision.shapes",
    "generate_shapes_dataset": "torchgarden.vision.shapes",
    "shapes_dataset_root": "torchgarden.vision.shapes",
    # augmentation (torch)
    "Augmentation": "torchgarden.vision.augment",
    "Augmented": "torchgarden.vision.augment",
    "color_jitter": "torchgarden.vision.augment",
    "horizontal_flip": "torchgarden.vision.augment",
    "normalize": "torchgarden.vision.augment",
    "random_horizontal_flip": "torchgarden.vision.augment",
    "random_scale_crop": "torchgarden.vision.augment",
    "scale_crop": "torchgarden.vision.augment",
    # semantic segmentation (torch)
    "SegmentationFolderDataset": "torchgarden.vision.segmentation_data",
    "SegmentationModel": "torchgarden.vision.segmentation_model",
    "BackboneSegmentationModel": "torchgarden.vision.backbone_segmentation",
    # object detection (torch); the greedy `nms` function is
    # `torchgarden.vision.nms.nms`, since `torchgarden.vision.nms` names its module
    "BOX_FORMATS": "torchgarden.vision.boxes",
    "box_area": "torchgarden.vision.boxes",
    "box_iou": "torchgarden.vision.boxes",
    "clip_boxes": "torchgarden.vision.boxes",
    "convert_boxes": "torchgarden.vision.boxes",
    "decode_boxes": "torchgarden.vision.boxes",
    "encode_boxes": "torchgarden.vision.boxes",
    "AnchorTargets": "torchgarden.vision.anchors",
    "assign_targets": "torchgarden.vision.anchors",
    "feature_shapes": "torchgarden.vision.anchors",
    "generate_anchors": "torchgarden.vision.anchors",
    "batched_nms": "torchgarden.vision.nms",
    "RetinaNet": "torchgarden.vision.retinanet_model",
    "flatten_levels": "torchgarden.vision.retinanet_model",
    "COCODetectionDataset": "torchgarden.vision.coco_data",
    "collate_detections": "torchgarden.vision.coco_data",
}

__all__ = [
    "SHAPE_NAMES",
    "default_data_root",
    "draw_shapes_image",
    "generate_shapes_dataset",
    "shapes_dataset_root",
    "Augmentation",
    "Augmented",
    "color_jitter",
    "horizontal_flip",
    "normalize",
    "random_horizontal_flip",
    "random_scale_crop",
    "scale_crop",
    "SegmentationFolderDataset",
    "SegmentationModel",
    "BackboneSegmentationModel",
    "BOX_FORMATS",
    "box_area",
    "box_iou",
    "clip_boxes",
    "convert_boxes",
    "decode_boxes",
    "encode_boxes",
    "AnchorTargets",
    "assign_targets",
    "feature_shapes",
    "generate_anchors",
    "batched_nms",
    "RetinaNet",
    "flatten_levels",
    "COCODetectionDataset",
    "collate_detections",
]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'torchgarden.vision' has no attribute '{name}'")


def __dir__() -> list[str]:
    return __all__


if TYPE_CHECKING:
    from torchgarden.vision.anchors import (
        AnchorTargets,
        assign_targets,
        feature_shapes,
        generate_anchors,
    )
    from torchgarden.vision.augment import (
        Augmentation,
        Augmented,
        color_jitter,
        horizontal_flip,
        normalize,
        random_horizontal_flip,
        random_scale_crop,
        scale_crop,
    )
    from torchgarden.vision.backbone_segmentation import BackboneSegmentationModel
    from torchgarden.vision.boxes import (
        BOX_FORMATS,
        box_area,
        box_iou,
        clip_boxes,
        convert_boxes,
        decode_boxes,
        encode_boxes,
    )
    from torchgarden.vision.coco_data import (
        COCODetectionDataset,
        collate_detections,
    )
    from torchgarden.vision.nms import batched_nms
    from torchgarden.vision.retinanet_model import (
        RetinaNet,
        flatten_levels,
    )
    from torchgarden.vision.segmentation_data import SegmentationFolderDataset
    from torchgarden.vision.segmentation_model import SegmentationModel
    from torchgarden.vision.shapes import (
        SHAPE_NAMES,
        default_data_root,
        draw_shapes_image,
        generate_shapes_dataset,
        shapes_dataset_root,
    )
