"""The semantic_segmentation experiment and task: config, data, loss, IoU, image summaries."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import torchgarden as tg
from torchgarden.config import ConfigError
from torchgarden.tasks.semantic_segmentation import (
    SegmentationMeanIoU,
    SemanticSegmentationTask,
    colorize_overlay,
)


def tiny_params(data_dir, **task_overrides):
    """The registered experiment shrunk to 16x16 images and a few steps."""
    params = tg.get_experiment("semantic_segmentation")
    params.override({
        "task": {
            "model": {"widths": [4, 8]},
            "generated_data": {
                "data_dir": str(data_dir), "num_train": 8, "num_validation": 4,
                "image_size": 16, "max_objects": 2,
            },
            "train_data": {"global_batch_size": 4, "output_size": [16, 16]},
            "validation_data": {"global_batch_size": 3},
            "num_image_summaries": 3,
            **task_overrides,
        },
        "trainer": {
            "train_steps": 4, "steps_per_loop": 2, "summary_interval": 2,
            "checkpoint_interval": 4, "validation_interval": 4,
            "optimizer_config": {"learning_rate": {"cosine": {"decay_steps": 4}},
                                 "warmup": {"linear": {"warmup_steps": 1}}},
        },
    })
    return params.validate()


def test_registered_experiment_defaults():
    params = tg.get_experiment("semantic_segmentation").validate()
    task = params.task
    assert type(task).__name__ == "SemanticSegmentationConfig"
    assert task.model.num_classes == 4 and task.losses.ignore_label == 255
    assert task.allow_image_summary is True
    assert task.train_data.input_path == "" and task.train_data.aug_rand_hflip
    assert params.trainer.best_checkpoint_eval_metric == "mean_iou"
    assert params.trainer.best_checkpoint_metric_comp == "higher"
    assert isinstance(tg.get_task(task), SemanticSegmentationTask)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"task": {"train_data": {"output_size": [], "aug_scale_max": 1.5}}},
         r"task\.train_data\.output_size is required"),
        ({"task": {"train_data": {"aug_scale_min": 2.0}}}, r"aug_scale_min \(2\.0\) must be"),
        ({"task": {"losses": {"ignore_label": 3}}},
         r"task\.losses\.ignore_label \(3\) must be >= model\.num_classes"),
        ({"task": {"ignore_label": 3}},  # the older key, read at Model Garden's place
         r"task\.losses\.ignore_label \(3\) must be >= model\.num_classes"),
        ({"task": {"model": {"stem_stride": 3}}}, r"task\.model\.stem_stride must be 1 or 2"),
        ({"task": {"model": {"num_classes": 1}}}, r"task\.model\.num_classes must be >= 2"),
        ({"task": {"validation_data": {"split": "test"}}}, r"validation_data\.split must be"),
        ({"task": {"image_std": [0.2, 0.2]}}, r"image_std must be 3 values"),
        ({"task": {"train_data": {"cache": True}}}, r"task\.train_data\.cache=true would store"),
    ],
)
def test_config_errors_name_the_key(override, message):
    params = tg.get_experiment("semantic_segmentation")
    params.override(override)
    with pytest.raises(ConfigError, match=message):
        params.validate()


def test_loss_skips_ignored_pixels():
    task = tg.get_task(tg.get_experiment("semantic_segmentation").task)
    logits = torch.randn(2, 4, 3, 5)
    labels = torch.randint(0, 4, (2, 3, 5))
    labels[0, 0] = 255
    expected = F.cross_entropy(logits, labels, ignore_index=255)
    torch.testing.assert_close(task.build_losses(labels, logits), expected)
    kept = labels != 255
    manual = F.cross_entropy(logits.permute(0, 2, 3, 1)[kept], labels[kept])
    torch.testing.assert_close(task.build_losses(labels, logits), manual)


def test_mean_iou_result_holds_per_class_iou_and_pixel_accuracy():
    metric = SegmentationMeanIoU(num_classes=3, ignore_index=255, name="mean_iou")
    labels = torch.tensor([[0, 0, 1, 1, 255, 2]])
    predictions = torch.tensor([[0, 1, 1, 1, 0, 0]])
    metric.update_state(labels, predictions)
    result = metric.result()
    # class 0: tp 1, fp 1 (pixel 5), fn 1 -> 1/3; class 1: tp 2, fp 1 -> 2/3; class 2: 0/1.
    assert result["iou"]["class_0"].item() == pytest.approx(1 / 3)
    assert result["iou"]["class_1"].item() == pytest.approx(2 / 3)
    assert result["iou"]["class_2"].item() == 0.0
    assert result["mean_iou"].item() == pytest.approx((1 / 3 + 2 / 3 + 0) / 3)
    assert result["pixel_accuracy"].item() == pytest.approx(3 / 5)


def test_overlay_colours_labelled_pixels_only():
    images = np.full((1, 1, 4, 3), 100, dtype=np.uint8)
    labels = np.array([[[0, 1, 2, 255]]])
    out = colorize_overlay(images, labels, num_classes=3, ignore_label=255, alpha=0.5)
    assert out.dtype == np.uint8 and out.shape == (1, 1, 4, 3)
    assert out[0, 0, 0].tolist() == [100, 100, 100]
    assert out[0, 0, 1].tolist() == [165, 62, 88]  # (100 + [230, 25, 75]) / 2, rounded
    assert out[0, 0, 3].tolist() == [178, 178, 178]  # (100 + 255) / 2 = 177.5 -> 178
    assert out[0, 0, 2].tolist() != out[0, 0, 1].tolist()


def test_image_summaries_keep_the_first_examples_and_undo_normalization(tmp_path):
    params = tiny_params(tmp_path)
    task = tg.get_task(params.task)
    mean = torch.tensor(params.task.image_mean).view(1, 3, 1, 1)
    std = torch.tensor(params.task.image_std).view(1, 3, 1, 1)
    pixels = torch.tensor([0.0, 0.5, 1.0]).view(1, 3, 1, 1).expand(2, 3, 2, 2)
    features = (pixels - mean) / std
    labels = torch.tensor([[[0, 1], [2, 255]]]).expand(2, 2, 2)
    step = {"loss": torch.tensor(1.0), "_images": features, "_labels": labels,
            "_predictions": torch.zeros(2, 2, 2, dtype=torch.long)}
    state = None
    for _ in range(3):  # 6 examples offered, 3 kept
        state = task.aggregate_logs(state, step)
    logs = task.reduce_aggregated_logs(state, global_step=7)
    assert set(logs) == {"image/input", "image/ground_truth", "image/prediction"}
    for value in logs.values():
        assert value.dtype == np.uint8 and value.shape == (3, 2, 2, 3)
    assert logs["image/input"][0, 0, 0].tolist() == [0, 128, 255]
    assert np.array_equal(logs["image/prediction"], logs["image/input"])  # all background
    assert not np.array_equal(logs["image/ground_truth"][:, 0, 1], logs["image/input"][:, 0, 1])
    assert "images [3, 2, 2, 3]" in repr(logs["image/input"])
    assert task.aggregate_logs(None, {"loss": torch.tensor(1.0)}) is None


def test_build_inputs_generates_data_once_and_batches_it(tmp_path):
    params = tiny_params(tmp_path)
    task = tg.get_task(params.task)
    images, masks = next(iter(task.build_inputs(params.task.train_data)))
    assert images.shape == (4, 3, 16, 16) and images.dtype == torch.float32
    assert masks.shape == (4, 16, 16) and masks.dtype == torch.int64
    assert set(masks.unique().tolist()) <= {0, 1, 2, 3, 255}
    roots = [p for p in tmp_path.iterdir() if p.name.startswith("shapes-v1-")]
    assert len(roots) == 1 and (roots[0] / "DONE").is_file()
    assert len(task.build_inputs(params.task.validation_data).dataset) == 4


def test_build_inputs_reads_a_user_folder_and_reports_bad_masks(tmp_path):
    for sub in ("images", "masks"):
        (tmp_path / "user" / sub).mkdir(parents=True)
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(tmp_path / "user/images/x.png")
    Image.fromarray(np.full((8, 8), 9, np.uint8)).save(tmp_path / "user/masks/x.png")
    params = tiny_params(tmp_path, validation_data={"input_path": str(tmp_path / "user")})
    task = tg.get_task(params.task)
    with pytest.raises(ValueError, match=r"mask '.*user/masks/x\.png' has class ids \[9\]"):
        task.build_inputs(params.task.validation_data)
    with pytest.raises(ValueError, match=r"input_path \('/a,/b'\) is not one folder"):
        tiny_params(tmp_path, validation_data={"input_path": "/a,/b"})  # refused by the config
    params = tiny_params(tmp_path, model={"num_classes": 8, "widths": [4]})
    with pytest.raises(ValueError, match="num_classes must be <= 7 without an input_path"):
        tg.get_task(params.task).build_inputs(params.task.train_data)


def test_run_experiment_writes_iou_scalars_and_images(tmp_path):
    params = tiny_params(tmp_path / "data")
    task = tg.get_task(params.task)
    model_dir = tmp_path / "run"
    _, logs = tg.run_experiment(
        task=task, mode="train_and_eval", params=params, model_dir=model_dir
    )
    assert 0.0 <= logs["mean_iou"] <= 1.0 and set(logs["iou"]) == {f"class_{k}" for k in range(4)}
    assert logs["image/prediction"].shape == (3, 16, 16, 3)
    events = EventAccumulator(str(model_dir / "validation"), size_guidance={"images": 0})
    events.Reload()
    assert set(events.Tags()["images"]) == {
        "image/input", "image/ground_truth", "image/prediction"
    }
    image = events.Images("image/ground_truth")[-1]
    assert image.step == 4 and image.height == 16 and image.width == 3 * 16
    assert "mean_iou" in events.Tags()["scalars"]
    per_class = EventAccumulator(str(model_dir / "validation" / "iou"))
    per_class.Reload()
    assert set(per_class.Tags()["scalars"]) == {f"class_{k}" for k in range(4)}
    assert (model_dir / "best_ckpt" / "info.json").is_file()
