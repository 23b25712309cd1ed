"""Classification augmentation wired into the task: per-image steps, batch mixing, soft
labels, dtype; and the RetinaNet/segmentation parser keys where the tasks read them."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torchgarden as tg
from torchgarden.vision.augment import Augmentation
from torchgarden.vision.autoaugment import blend, contrast, grayscale
from torchgarden.vision.classification_augment import (
    BatchAugment,
    build_augmenter,
    build_mixup,
    color_jitter,
)
from torchgarden.vision.coco_data import DetectionCollate
from torchgarden.vision.segmentation_data import ResizeThenCrop


def _data(**overrides):
    params = tg.get_experiment("image_classification")
    params.override({"task": {"train_data": overrides}})
    return params.validate().task.train_data


def test_nothing_on_builds_nothing_and_validation_is_not_augmented():
    assert build_augmenter(_data()) is None and build_mixup(_data(), 10) is None
    val = tg.get_experiment("image_classification").task.validation_data
    val.override({"aug_type": {"type": "randaug"}, "color_jitter": 0.4, "random_erasing": {}})
    assert build_augmenter(val) is None  # Model Garden augments the training parse only
    val.override({"dtype": "bfloat16"})
    assert build_augmenter(val).dtype == torch.bfloat16


def test_color_jitter_is_brightness_contrast_saturation_with_replayed_factors():
    image = torch.randint(0, 256, (3, 8, 8), dtype=torch.uint8,
                          generator=torch.Generator().manual_seed(0))
    out = color_jitter(image, 0.4, torch.Generator().manual_seed(1))
    f = 0.6 + 0.8 * torch.rand(3, generator=torch.Generator().manual_seed(1))
    expected = blend(torch.zeros_like(image), image, float(f[0]))
    expected = contrast(expected, float(f[1]))
    expected = blend(grayscale(expected).expand_as(expected), expected, float(f[2]))
    assert out.equal(expected)


def test_batch_augment_mixes_digits_into_soft_labels_in_dtype():
    data = _data(aug_type={"type": "randaug", "randaug": {"magnitude": 9}},
                 mixup_and_cutmix={"label_smoothing": 0.1}, dtype="bfloat16")
    collate = BatchAugment(torch.utils.data.default_collate, augmenter=build_augmenter(data),
                           mixup=build_mixup(data, 10))
    x, y = tg.data.load_digits_arrays("train")
    torch.manual_seed(0)
    images, labels = collate([(x[i], y[i]) for i in range(8)])
    assert images.dtype == torch.bfloat16 and images.shape == (8, 1, 8, 8)
    assert float(images.min()) >= 0 and float(images.max()) <= 1
    assert labels.shape == (8, 10) and torch.allclose(labels.sum(1), torch.ones(8))
    assert float(labels.min()) >= 0.01 - 1e-6  # every class keeps the smoothing's 0.1 / 10
    with pytest.raises(ValueError, match=r"work on \[0, 1\] images"):
        collate([(x[0] * 16, y[0])])


def test_soft_labels_train_with_softmax_cross_entropy_and_argmax_accuracy():
    params = tg.get_experiment("image_classification")
    params.override({"task": {"label_smoothing": 0.3}})
    task = tg.get_task(params.task)
    task.build_model()
    logits = torch.randn(4, 10, generator=torch.Generator().manual_seed(0))
    soft = torch.softmax(torch.randn(4, 10, generator=torch.Generator().manual_seed(1)), 1)
    expected = -(soft * F.log_softmax(logits, 1)).sum(1).mean()
    assert torch.allclose(task.build_losses(soft, logits), expected)  # no second smoothing
    accuracy = task.build_metrics(training=True)[0]
    task.process_metrics([accuracy], soft, logits)
    hits = (soft.argmax(1) == logits.argmax(1)).float().mean()
    assert float(accuracy.result()) == pytest.approx(float(hits))
    half = torch.zeros(2, 1, 8, 8, dtype=torch.bfloat16)
    assert task.split_inputs((half, torch.zeros(2)))[0].dtype == torch.float32


def test_detection_collate_keeps_the_first_boxes_and_casts():
    target = {"boxes": torch.arange(12.0).view(3, 4), "classes": torch.tensor([1, 2, 3]),
              "is_crowds": torch.zeros(3), "areas": torch.ones(3),
              "original_boxes": torch.zeros(3, 4), "image_info": torch.zeros(4, 2)}
    images, labels = DetectionCollate(max_num_instances=2, dtype="bfloat16")(
        [(torch.rand(3, 4, 4), target)])
    assert images.dtype == torch.bfloat16
    assert labels["classes"].tolist() == [[1, 2]] and labels["num_detections"].tolist() == [2]


def test_segmentation_validation_is_never_flipped_or_scaled():
    params = tg.get_experiment("semantic_segmentation")
    params.override({"task": {"validation_data": {"aug_rand_hflip": True, "output_size": [64, 64],
                                                  "aug_scale_min": 0.5, "aug_scale_max": 2.0}}})
    task = tg.get_task(params.validate().task)
    val = task.build_augmentation(params.task.validation_data)
    assert not val.horizontal_flip and val.scale_range == (1.0, 1.0)
    train = task.build_augmentation(params.task.train_data)
    assert train.horizontal_flip and train.scale_range == (0.75, 1.25)


def test_resize_then_crop_cuts_the_window_the_draws_name():
    image = torch.arange(2 * 8 * 10, dtype=torch.float32).view(2, 8, 10)
    mask = torch.arange(80).view(8, 10)
    step = ResizeThenCrop(crop_size=(4, 6), output_size=None, augment=Augmentation())
    torch.manual_seed(4)
    out = step(image, masks=mask)
    torch.manual_seed(4)
    top, left = int(torch.randint(0, 5, ())), int(torch.randint(0, 5, ()))
    assert out.image.equal(image[:, top:top + 4, left:left + 6])
    assert out.masks.equal(mask[top:top + 4, left:left + 6])
    resized = ResizeThenCrop(crop_size=(8, 8), output_size=(8, 8), augment=Augmentation())
    assert resized(torch.rand(3, 16, 4), masks=torch.zeros(16, 4, dtype=torch.long)).image.shape \
        == (3, 8, 8)  # aspect ratio not kept, as Model Garden's resize to output_size
    with pytest.raises(ValueError, match=r"crop_size \[4, 6\] is larger than the 3x3 image"):
        step(torch.rand(2, 3, 3), masks=torch.zeros(3, 3, dtype=torch.long))


def test_segmentation_crop_size_trains_on_crops_and_evaluates_on_output_size(tmp_path):
    params = tg.get_experiment("semantic_segmentation")
    params.override({"task": {
        "model": {"widths": [4, 8]},
        "generated_data": {"data_dir": str(tmp_path), "num_train": 4, "num_validation": 2,
                           "image_size": 16, "max_objects": 1},
        "train_data": {"global_batch_size": 2, "output_size": [16, 16], "crop_size": [8, 12]},
        "validation_data": {"global_batch_size": 2, "output_size": [16, 16],
                            "crop_size": [8, 8]}}})
    task = tg.get_task(params.validate().task)
    images, masks = next(iter(task.build_inputs(params.task.train_data)))
    assert images.shape == (2, 3, 8, 12) and masks.shape == (2, 8, 12)
    images, masks = next(iter(task.build_inputs(params.task.validation_data)))
    assert images.shape == (2, 3, 16, 16)
