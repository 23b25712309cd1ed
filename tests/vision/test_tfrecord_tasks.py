"""RetinaNet and semantic segmentation on TFRecord shards in Model Garden's schemas."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("PIL")
pytest.importorskip("crc32c")
pytest.importorskip("tfrecord")

from torchgarden.cli.main import main  # noqa: E402
from torchgarden.data.tf_example import build_example  # noqa: E402
from torchgarden.data.tfrecord_samples import (  # noqa: E402
    encode_image,
    write_detection_shards,
    write_segmentation_shards,
)
from torchgarden.vision.tfrecord_records import DetectionRecord, SegmentationRecord  # noqa: E402


def test_detection_record_scales_boxes_and_drops_crowds_when_training():
    pixels = np.zeros((50, 100, 3), np.uint8)
    record = build_example({
        "image/encoded": encode_image(pixels, "PNG"), "image/source_id": b"7",
        "image/height": 50, "image/width": 100,
        "image/object/bbox/ymin": [0.1, 0.5], "image/object/bbox/xmin": [0.2, 0.0],
        "image/object/bbox/ymax": [0.3, 1.0], "image/object/bbox/xmax": [0.6, 0.5],
        "image/object/class/label": [2, 1], "image/object/is_crowd": [0, 1]})
    common = {"augmentation": None, "mean": (0, 0, 0), "std": (1, 1, 1), "num_classes": 2}
    image, target = DetectionRecord((50, 100), skip_crowd=False, **common)(record, 0)
    assert image.shape == (3, 50, 100)
    torch.testing.assert_close(target["original_boxes"],
                               torch.tensor([[5.0, 20.0, 15.0, 60.0], [25.0, 0.0, 50.0, 50.0]]))
    assert target["classes"].tolist() == [2, 1] and target["is_crowds"].tolist() == [0, 1]
    assert int(target["source_id"]) == 7
    _, target = DetectionRecord((50, 100), skip_crowd=True, **common)(record, 0)
    assert target["classes"].tolist() == [2]
    with pytest.raises(ValueError, match=r"class/label \[2, 1\] is outside 1..1"):
        DetectionRecord((50, 100), skip_crowd=False, **{**common, "num_classes": 1})(record, 0)


def test_segmentation_record_reads_the_png_mask():
    from torchgarden.vision.augment import Augmentation

    mask = np.array([[0, 1, 2], [2, 255, 0]], np.uint8)
    record = build_example({"image/encoded": encode_image(np.zeros((2, 3, 3), np.uint8), "PNG"),
                            "image/segmentation/class/encoded": encode_image(mask, "PNG")})
    parse = SegmentationRecord(Augmentation(), num_classes=3, ignore_label=255)
    image, labels = parse(record, 0)
    assert image.shape == (3, 2, 3) and labels.tolist() == mask.tolist()
    with pytest.raises(ValueError, match=r"mask class ids \[2\] are outside 0..1"):
        SegmentationRecord(Augmentation(), num_classes=2, ignore_label=255)(record, 0)


@pytest.mark.parametrize(("experiment", "write"), [
    ("retinanet", write_detection_shards), ("semantic_segmentation", write_segmentation_shards)])
def test_two_steps_on_tfrecords(tmp_path, experiment, write):
    data = tmp_path / "data"
    extra = {"num_classes": 4} if experiment == "semantic_segmentation" else {}
    write(data, num_shards=2, per_shard=4, **extra)
    write(data, num_shards=1, per_shard=4, prefix="val", seed=1, **extra)
    code = main([
        "train", "--experiment", experiment, "--mode", "train_and_eval",
        "--model_dir", str(tmp_path / "run"), "--params_override",
        f"task.train_data.source=tfrecord,task.train_data.input_path={data}/train-*,"
        f"task.validation_data.source=tfrecord,task.validation_data.input_path={data}/val-*,"
        "task.train_data.global_batch_size=2,task.validation_data.global_batch_size=2,"
        "trainer.train_steps=2,trainer.steps_per_loop=1,trainer.summary_interval=1,"
        "trainer.validation_interval=2"])
    assert code == 0
    assert (tmp_path / "run" / "ckpt-2").is_dir()


def test_classification_shards_get_model_gardens_augmentation_in_its_order(tmp_path):
    """color_jitter on the crop, RandAugment after the resize, erasing after normalizing,
    the dtype cast last; mixup per batch: the TFRecord path gets every key the array
    sources get."""
    import torchgarden as tg
    from torchgarden.data.tfrecord_samples import write_classification_shards
    from torchgarden.vision.classification_input import ClassificationRecord

    write_classification_shards(str(tmp_path / "tfr"), num_shards=1, per_shard=8)
    params = tg.get_experiment("image_classification")
    params.override({"task": {"model": {"input_size": [16, 16, 3], "num_classes": 4},
                              "train_data": {
        "source": "tfrecord", "input_path": str(tmp_path / "tfr" / "train-*"),
        "global_batch_size": 4, "color_jitter": 0.4, "aug_type": {"type": "randaug"},
        "random_erasing": {"probability": 1.0}, "dtype": "bfloat16",
        "mixup_and_cutmix": {"label_smoothing": 0.1}}}})
    data = params.task.train_data
    parser = ClassificationRecord.from_config(data, params.task.model).parser
    assert (len(parser.pre_resize), len(parser.post_resize), len(parser.post_normalize)) == (
        1, 1, 2)
    plain = ClassificationRecord.from_config(
        data.replace(color_jitter=0.0, aug_type=None, random_erasing=None, dtype="float32"),
        params.task.model).parser
    assert not (plain.pre_resize or plain.post_resize or plain.post_normalize)
    images, labels = next(iter(tg.get_task(params.task).build_inputs(data)))
    assert images.dtype == torch.bfloat16 and images.shape == (4, 3, 16, 16)
    assert labels.shape == (4, 4) and labels.is_floating_point()  # mixed, smoothed one-hot
    torch.testing.assert_close(labels.sum(dim=1), torch.ones(4))
    assert float(labels.min()) >= 0.1 / 4 - 1e-6
