"""Conversion of batched detection outputs into COCO ground-truth datasets and results."""

from __future__ import annotations

from typing import Any

import numpy as np


def to_numpy(value: Any) -> Any:
    """Tensors and arrays become NumPy; per-replica lists/tuples of them are concatenated.

    Lists of anything else (e.g. per-image lists of RLE dicts) are returned as lists.
    """
    if hasattr(value, "detach"):
        return value.detach().cpu().numpy()  # host transfer: the evaluator runs on the host
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, list | tuple):
        if value and all(hasattr(v, "detach") or isinstance(v, np.ndarray) for v in value):
            return np.concatenate([np.atleast_1d(to_numpy(v)) for v in value], axis=0)
        if all(isinstance(v, int | float | np.number) for v in value):
            return np.asarray(value)
        return list(value)
    return np.asarray(value)


def _yxyx_to_xywh(box: np.ndarray) -> list[float]:
    ymin, xmin, ymax, xmax = (float(v) for v in box)
    return [xmin, ymin, xmax - xmin, ymax - ymin]


def _encode_masks(masks: Any) -> list[dict[str, Any]]:
    """Per-image masks (binary ``[N, H, W]`` array or list of RLE dicts) as RLE dicts."""
    from pycocotools import mask as mask_util

    if isinstance(masks, list):
        if all(isinstance(m, dict) for m in masks):
            return masks
        masks = np.stack([np.asarray(m) for m in masks]) if masks else np.zeros((0, 1, 1))
    masks = np.asarray(masks)
    if masks.shape[0] == 0:
        return []
    binary = np.asfortranarray(np.transpose(masks > 0.5, (1, 2, 0)).astype(np.uint8))
    return mask_util.encode(binary)


def _images(columns: dict[str, list[Any]]):
    """Yields ``(batch_index, image_index_in_batch)`` over every accumulated image."""
    for b, source_ids in enumerate(columns["source_id"]):
        for i in range(len(np.asarray(source_ids).reshape(-1))):
            yield b, i


def build_groundtruth_dataset(groundtruths: dict[str, list[Any]], *,
                              masks: bool = False) -> dict[str, Any]:
    """Builds a COCO ground-truth dataset dict from accumulated ground-truth batches.

    Boxes are (ymin, xmin, ymax, xmax) pixels; only the first ``num_detections`` rows of
    each image are used. Areas default to the mask area (with ``masks``) or box area.
    """
    from pycocotools import mask as mask_util

    images, annotations, category_ids = [], [], set()
    for b, i in _images(groundtruths):
        image_id = int(np.asarray(groundtruths["source_id"][b]).reshape(-1)[i])
        images.append({"id": image_id,
                       "height": int(np.asarray(groundtruths["height"][b]).reshape(-1)[i]),
                       "width": int(np.asarray(groundtruths["width"][b]).reshape(-1)[i])})
        count = int(np.asarray(groundtruths["num_detections"][b]).reshape(-1)[i])
        boxes = groundtruths["boxes"][b][i]
        classes = groundtruths["classes"][b][i]
        areas = groundtruths["areas"][b][i] if "areas" in groundtruths else None
        crowds = groundtruths["is_crowds"][b][i] if "is_crowds" in groundtruths else None
        rles = _encode_masks(groundtruths["masks"][b][i])[:count] if masks else None
        for j in range(count):
            bbox = _yxyx_to_xywh(boxes[j])
            annotation = {"id": len(annotations) + 1, "image_id": image_id,
                          "category_id": int(classes[j]), "bbox": bbox,
                          "iscrowd": int(crowds[j]) if crowds is not None else 0}
            if rles is not None:
                annotation["segmentation"] = rles[j]
            if areas is not None:
                annotation["area"] = float(areas[j])
            elif rles is not None:
                annotation["area"] = float(mask_util.area(rles[j]))
            else:
                annotation["area"] = bbox[2] * bbox[3]
            annotations.append(annotation)
            category_ids.add(annotation["category_id"])
    return {"images": images, "annotations": annotations,
            "categories": [{"id": c} for c in sorted(category_ids)]}


def build_detections(predictions: dict[str, list[Any]], *,
                     masks: bool = False) -> list[dict[str, Any]]:
    """Builds the COCO results list (``loadRes`` input) from accumulated prediction batches.

    With ``masks`` each result carries a ``segmentation`` RLE instead of a ``bbox``, so that
    pycocotools derives its area and box from the mask.
    """
    results = []
    for b, i in _images(predictions):
        image_id = int(np.asarray(predictions["source_id"][b]).reshape(-1)[i])
        count = int(np.asarray(predictions["num_detections"][b]).reshape(-1)[i])
        boxes = predictions["detection_boxes"][b][i]
        scores = predictions["detection_scores"][b][i]
        classes = predictions["detection_classes"][b][i]
        rles = _encode_masks(predictions["detection_masks"][b][i])[:count] if masks else None
        for j in range(count):
            result = {"image_id": image_id, "category_id": int(classes[j]),
                      "score": float(scores[j])}
            if rles is not None:
                result["segmentation"] = rles[j]
            else:
                result["bbox"] = _yxyx_to_xywh(boxes[j])
            results.append(result)
    return results
