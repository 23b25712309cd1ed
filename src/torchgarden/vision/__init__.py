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

from typing import TYPE_CHECKING

from torchgarden.utils.lazy import lazy_names

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
    from torchgarden.vision.autoaugment import AutoAugment, RandAugment
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
    from torchgarden.vision.classification_augment import (
        BatchAugment,
        ClassificationAugmenter,
        build_augmenter,
        build_mixup,
    )
    from torchgarden.vision.classification_input import (
        ClassificationParser,
        ClassificationRecord,
    )
    from torchgarden.vision.coco_data import (
        COCODetectionDataset,
        DetectionCollate,
        collate_detections,
    )
    from torchgarden.vision.deeplab import ASPP, DeepLabModel, SegmentationHead
    from torchgarden.vision.mixing import MixupAndCutmix, RandomErasing
    from torchgarden.vision.nms import batched_nms
    from torchgarden.vision.retinanet_model import (
        RetinaNet,
        flatten_levels,
    )
    from torchgarden.vision.segmentation_data import SegmentationFolderDataset
    from torchgarden.vision.segmentation_loss import segmentation_loss
    from torchgarden.vision.segmentation_model import SegmentationModel
    from torchgarden.vision.shapes import (
        SHAPE_NAMES,
        default_data_root,
        draw_shapes_image,
        generate_shapes_dataset,
        shapes_dataset_root,
    )
    from torchgarden.vision.tfrecord_records import DetectionRecord, SegmentationRecord

__getattr__, __all__ = lazy_names(__name__, __file__)
