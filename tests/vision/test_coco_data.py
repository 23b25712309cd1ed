"""The COCO-JSON detection dataset: targets, resizing, collate, flips and bad-data errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from torchgarden.vision.augment import Augmentation
from torchgarden.vision.coco_data import COCODetectionDataset, collate_detections

MEAN, STD = (0.5, 0.5, 0.5), (0.25, 0.25, 0.25)


def _write_coco(root: Path, *, annotations=None, images=None, categories=None,
                sizes=((16, 32), (16, 16))) -> Path:
    """Two images (height x width per `sizes`) with category ids 3 and 7."""
    (root / "images").mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for index, (height, width) in enumerate(sizes):
        pixels = rng.integers(0, 256, size=(height, width, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(root / "images" / f"{index}.png")
    data = {
        "images": images if images is not None else [
            {"id": 10 + i, "file_name": f"{i}.png", "height": h, "width": w}
            for i, (h, w) in enumerate(sizes)],
        "annotations": annotations if annotations is not None else [
            {"id": 1, "image_id": 10, "category_id": 7, "bbox": [2, 4, 10, 6], "area": 50,
             "iscrowd": 0},
            {"id": 2, "image_id": 10, "category_id": 3, "bbox": [20, 0, 12, 16], "area": 150,
             "iscrowd": 1},
        ],
        "categories": categories if categories is not None else [
            {"id": 7, "name": "seven"}, {"id": 3, "name": "three"}],
    }
    path = root / "annotations.json"
    path.write_text(json.dumps(data))
    return path


def test_targets_resize_and_category_mapping(tmp_path):
    dataset = COCODetectionDataset(_write_coco(tmp_path), output_size=(32, 64),
                                   mean=MEAN, std=STD)
    assert len(dataset) == 2 and dataset.num_classes == 2
    assert dataset.category_ids == [3, 7] and dataset.category_names == ["three", "seven"]
    image, target = dataset[0]  # 16 x 32 image fitted into 32 x 64: scale 2
    assert image.shape == (3, 32, 64)
    raw = dataset.read_image(0)
    resized = torch.nn.functional.interpolate(raw[None], size=(32, 64), mode="bilinear")[0]
    assert torch.allclose(image * 0.25 + 0.5, resized, atol=1e-5)
    assert target["classes"].tolist() == [2, 1]  # id 7 -> label 2, id 3 -> label 1
    assert target["original_boxes"].tolist() == [[4.0, 2.0, 10.0, 12.0], [0.0, 20.0, 16.0, 32.0]]
    assert target["boxes"].tolist() == [[8.0, 4.0, 20.0, 24.0], [0.0, 40.0, 32.0, 64.0]]
    assert target["is_crowds"].tolist() == [0, 1]
    assert target["areas"].tolist() == [50.0, 150.0]
    assert target["source_id"].item() == 10
    assert (target["height"].item(), target["width"].item()) == (16, 32)
    assert target["image_info"].tolist() == [[16, 32], [32, 64], [2.0, 2.0], [0.0, 0.0]]


def test_smaller_aspect_is_padded_with_the_normalized_zero(tmp_path):
    dataset = COCODetectionDataset(_write_coco(tmp_path), output_size=(32, 64),
                                   mean=MEAN, std=STD)
    image, target = dataset[1]  # 16 x 16 fitted into 32 x 64: scale 2, 32 x 32 + padding
    assert torch.all(image[:, :, 32:] == -2.0)  # (0 - 0.5) / 0.25
    assert target["image_info"][1].tolist() == [32.0, 32.0]
    assert target["classes"].numel() == 0 and target["boxes"].shape == (0, 4)


def test_skip_crowd_and_image_cache(tmp_path):
    dataset = COCODetectionDataset(_write_coco(tmp_path), output_size=(16, 32),
                                   skip_crowd=True, cache_images=True)
    first_image, target = dataset[0]
    assert target["classes"].tolist() == [2]
    (tmp_path / "images" / "0.png").unlink()  # served from the cache now
    second_image, _ = dataset[0]
    assert torch.equal(first_image, second_image)


def test_collate_pads_boxes_per_batch(tmp_path):
    dataset = COCODetectionDataset(_write_coco(tmp_path), output_size=(16, 32))
    images, labels = collate_detections([dataset[1], dataset[0]])
    assert images.shape == (2, 3, 16, 32)
    assert labels["num_detections"].tolist() == [0, 2]
    assert labels["boxes"].shape == (2, 2, 4) and labels["classes"].tolist() == [[0, 0], [2, 1]]
    assert labels["boxes"][0].abs().sum().item() == 0.0
    assert labels["source_id"].tolist() == [11, 10]
    assert labels["image_info"].shape == (2, 4, 2)
    _, empty = collate_detections([dataset[1]])
    assert empty["boxes"].shape == (1, 1, 4)  # at least one (padding) row
    with pytest.raises(ValueError, match="must share one shape"):
        collate_detections([(torch.zeros(3, 4, 4), {}), (torch.zeros(3, 4, 5), {})])


def test_flip_augmentation_moves_boxes_with_the_pixels(tmp_path):
    path = _write_coco(tmp_path)
    plain = COCODetectionDataset(path, output_size=(16, 32))
    flipping = COCODetectionDataset(
        path, output_size=(16, 32), augmentation=Augmentation(horizontal_flip=True))
    base_image, base = plain[0]
    outcomes = set()
    for seed in range(8):
        torch.manual_seed(seed)
        image, target = flipping[0]
        flipped = torch.equal(image, base_image.flip(-1))
        assert flipped or torch.equal(image, base_image)
        expected = base["boxes"].clone()
        if flipped:
            expected[:, [1, 3]] = 32 - base["boxes"][:, [3, 1]]
        assert target["boxes"].tolist() == expected.tolist()
        assert target["original_boxes"].tolist() == base["original_boxes"].tolist()
        outcomes.add(flipped)
    assert outcomes == {True, False}


def test_augmentation_with_its_own_normalization_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="without mean/std"):
        COCODetectionDataset(_write_coco(tmp_path),
                             augmentation=Augmentation(mean=[0.5] * 3, std=[0.2] * 3))


def test_malformed_json_names_the_file(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('{"images": [}')
    with pytest.raises(ValueError, match=rf"^{path}: not valid JSON .* line 1, column 13"):
        COCODetectionDataset(path)
    path.write_text('{"images": []}')
    with pytest.raises(ValueError, match=rf"^{path}: missing the 'annotations' list"):
        COCODetectionDataset(path)
    with pytest.raises(FileNotFoundError, match="nothing.json: COCO annotation file not found"):
        COCODetectionDataset(tmp_path / "nothing.json")


def test_missing_image_file_names_the_image(tmp_path):
    path = _write_coco(tmp_path)
    (tmp_path / "images" / "1.png").unlink()
    with pytest.raises(FileNotFoundError,
                       match=rf"^{tmp_path}/images/1.png: image file not found \(image id 11 of"):
        COCODetectionDataset(path)


def test_unknown_category_and_image_ids(tmp_path):
    bad_category = [{"id": 5, "image_id": 10, "category_id": 9, "bbox": [0, 0, 2, 2]}]
    path = _write_coco(tmp_path, annotations=bad_category)
    with pytest.raises(ValueError, match=rf"^{path}: annotation 5 has category_id 9, which is "
                                         r"not in categories \[3, 7\]"):
        COCODetectionDataset(path)
    bad_image = [{"id": 6, "image_id": 99, "category_id": 3, "bbox": [0, 0, 2, 2]}]
    path = _write_coco(tmp_path, annotations=bad_image)
    with pytest.raises(ValueError, match="annotation 6 refers to image_id 99, which is not in"):
        COCODetectionDataset(path)


@pytest.mark.parametrize("bbox, message", [
    ([0, 0, 0, 5], "non-positive width or height"),
    ([3, 3, -2, 5], "non-positive width or height"),
    ([30, 0, 5, 5], r"outside the 32x16 \(width x height\) image"),
    ([0, -3, 5, 5], r"outside the 32x16 \(width x height\) image"),
    ([0, 0, 5], r"expected \[x, y, width, height\]"),
])
def test_bad_boxes_name_the_file_and_image(tmp_path, bbox, message):
    path = _write_coco(tmp_path, annotations=[
        {"id": 8, "image_id": 10, "category_id": 3, "bbox": bbox}])
    with pytest.raises(ValueError, match=rf"^{path}: annotation 8 \(image 0.png\) .*{message}"):
        COCODetectionDataset(path)


def test_boxes_within_a_pixel_of_the_border_are_clipped(tmp_path):
    path = _write_coco(tmp_path, annotations=[
        {"id": 8, "image_id": 10, "category_id": 3, "bbox": [-0.5, 1, 32.7, 5]}])
    _, target = COCODetectionDataset(path, output_size=(16, 32))[0]
    assert target["original_boxes"].tolist() == [[1.0, 0.0, 6.0, 32.0]]


def test_image_size_mismatch_names_the_image(tmp_path):
    images = [{"id": 10, "file_name": "0.png", "height": 20, "width": 32}]
    dataset = COCODetectionDataset(_write_coco(tmp_path, images=images, annotations=[]))
    with pytest.raises(ValueError, match=r"0.png: image is 32x16 \(width x height\) but .* "
                                         "says 32x20"):
        dataset[0]
