"""The retinanet experiment and task: config, losses, COCO evaluation flow, image summaries."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from PIL import Image
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch import nn

import torchgarden as tg
from torchgarden.config import ConfigError
from torchgarden.tasks.retinanet import RetinaNetTask, draw_detections


def tiny_params(data_dir, **task_overrides):
    """The registered experiment shrunk to 32x32 images, a tiny model and a few steps."""
    params = tg.get_experiment("retinanet")
    params.override({
        "task": {
            "model": {"input_size": [32, 32], "max_level": 3, "backbone_channels": [4, 8, 8],
                      "decoder": {"fpn": {"num_filters": 8}}, "head": {"num_filters": 8, "num_convs": 1}},
            "generated_data": {"data_dir": str(data_dir), "num_train": 8, "num_validation": 4,
                               "image_size": 32, "max_objects": 2},
            "train_data": {"global_batch_size": 4},
            "validation_data": {"global_batch_size": 3},
            "num_image_summaries": 2,
            **task_overrides,
        },
        "trainer": {
            "train_steps": 2, "steps_per_loop": 1, "summary_interval": 1,
            "checkpoint_interval": 2, "validation_interval": 2, "progress_bar": False,
            "optimizer_config": {"learning_rate": {"cosine": {"decay_steps": 2}},
                                 "warmup": {"linear": {"warmup_steps": 1}}},
        },
    })
    return params.validate()


def test_registered_experiment_defaults():
    params = tg.get_experiment("retinanet")
    assert params.trainer.best_checkpoint_eval_metric == "AP"
    assert params.trainer.best_checkpoint_metric_comp == "higher"
    losses = params.task.losses
    assert (losses.focal_loss_alpha, losses.focal_loss_gamma) == (0.25, 1.5)
    assert (losses.huber_loss_delta, losses.box_loss_weight) == (0.1, 50.0)
    assert params.task.train_data.input_path == ""  # generated shapes data
    assert params.task.allow_image_summary


@pytest.mark.parametrize("override, message", [
    ("task.model.backbone_channels=[8,16]", r"task.model.backbone_channels needs one entry "
                                            r"per level 1..4"),
    ("task.train_data.parser.unmatched_threshold=0.6",
     r"task.train_data.parser.unmatched_threshold must be in \[0, match_threshold \(0.5\)\]"),
    ("task.train_data.parser.aug_scale_min=0",
     r"task.train_data.parser.aug_scale_min must be > 0 and <= aug_scale_max"),
    ("task.model.input_size=[64]",
     r"task.model.input_size must be \[height, width, 3\] or \[height, width\]"),
])
def test_config_errors_name_the_key(override, message):
    params = tg.get_experiment("retinanet")
    params.override(override)
    with pytest.raises(ConfigError, match=message):
        params.validate()


def _hand_outputs(cls_logits: torch.Tensor, box_deltas: torch.Tensor,
                  anchors: torch.Tensor) -> dict:
    """Model outputs with one level of ``N`` anchors laid out as ``[B, C, 1, N]``."""
    return {"cls_outputs": {"2": cls_logits.permute(0, 2, 1)[:, :, None, :]},
            "box_outputs": {"2": box_deltas.permute(0, 2, 1)[:, :, None, :]},
            "anchor_boxes": anchors}


def test_losses_are_normalized_by_the_positives():
    config = tg.get_experiment("retinanet").task
    config.override({"model": {"num_classes": 1}})
    task = RetinaNetTask(config)
    anchors = torch.tensor([[0.0, 0.0, 10.0, 10.0],     # positive (IoU 1)
                            [0.0, 0.0, 10.0, 22.0],     # ignored (IoU 0.45)
                            [60.0, 60.0, 70.0, 70.0]])  # negative
    deltas = torch.tensor([[[0.05, 0.0, 0.0, 0.3], [1.0, 1.0, 1.0, 1.0], [2.0, 2.0, 2.0, 2.0]]])
    outputs = _hand_outputs(torch.zeros(1, 3, 1), deltas, anchors)
    labels = {"boxes": torch.tensor([[[0.0, 0.0, 10.0, 10.0]]]),
              "classes": torch.tensor([[1]]), "is_crowds": torch.tensor([[0]])}
    values = task.compute_losses(labels, outputs)
    # Logit 0 -> p = 0.5: focal = alpha_t * 0.5**1.5 * ln 2 for the positive (0.25) and
    # the negative (0.75); the ignored anchor adds nothing. One positive -> divide by 2.
    focal = 0.5**1.5 * math.log(2)
    assert values["cls_loss"].item() == pytest.approx((0.25 + 0.75) * focal / 2, rel=1e-5)
    # Huber (delta 0.1) of the positive's deltas, mean over 4 coordinates, / 2.
    huber = (0.5 * 0.05**2 + 0.1 * (0.3 - 0.05)) / 4
    assert values["box_loss"].item() == pytest.approx(huber / 2, rel=1e-5)
    assert values["total_loss"].item() == pytest.approx((focal + 50 * huber) / 2, rel=1e-5)
    assert task.build_losses(labels, outputs).item() == values["total_loss"].item()

    crowd = dict(labels, is_crowds=torch.tensor([[1]]))  # a crowd box matches nothing
    crowd_values = task.compute_losses(crowd, outputs)
    assert crowd_values["box_loss"].item() == 0.0
    assert crowd_values["cls_loss"].item() == pytest.approx(3 * 0.75 * focal, rel=1e-5)


def _write_coco(root, category_ids=(5, 9)):
    """Two 32x32 images (ids 1, 2) with one box each, categories with gaps."""
    (root / "images").mkdir(parents=True)
    for index in range(2):
        Image.fromarray(np.full((32, 32, 3), 40 * index, np.uint8)).save(
            root / "images" / f"{index}.png")
    coco = {"images": [{"id": i + 1, "file_name": f"{i}.png", "height": 32, "width": 32}
                       for i in range(2)],
            "annotations": [{"id": 1, "image_id": 1, "category_id": category_ids[1],
                             "bbox": [4, 2, 10, 12], "area": 100, "iscrowd": 0},
                            {"id": 2, "image_id": 2, "category_id": category_ids[0],
                             "bbox": [0, 0, 8, 8], "area": 64, "iscrowd": 0}],
            "categories": [{"id": c, "name": str(c)} for c in category_ids]}
    path = root / "annotations.json"
    path.write_text(json.dumps(coco))
    return path


class _FixedDetector(nn.Module):
    """Returns zero logits/deltas and one fixed detection of label 2 per image (batch 2)."""

    def __init__(self, anchors: torch.Tensor) -> None:
        super().__init__()
        self.anchors = anchors

    def forward(self, images):
        batch, n = images.shape[0], self.anchors.shape[0]
        outputs = _hand_outputs(torch.zeros(batch, n, 2), torch.zeros(batch, n, 4), self.anchors)
        outputs.update({
            "detection_boxes": torch.tensor([[[4.0, 8.0, 28.0, 36.0]],
                                             [[4.0, 8.0, 28.0, 80.0]]]),
            "detection_scores": torch.tensor([[0.9], [0.5]]),
            "detection_classes": torch.full((batch, 1), 2),
            "num_detections": torch.ones(batch, dtype=torch.long)})
        return outputs


def test_validation_step_feeds_coco_in_original_pixels_and_category_ids(tmp_path):
    path = _write_coco(tmp_path)
    params = tiny_params(tmp_path / "data", model={"num_classes": 2, "input_size": [64, 64]},
                         validation_data={"input_path": str(path), "global_batch_size": 2})
    task = tg.get_task(params.task)
    loader = task.build_inputs(params.task.validation_data)
    images, labels = next(iter(loader))
    assert images.shape == (2, 3, 64, 64)  # 32x32 images scaled by 2
    task.build_metrics(training=False)
    model = _FixedDetector(torch.tensor([[0.0, 0.0, 16.0, 16.0]]))
    logs = task.validation_step((images, labels), model)
    groundtruths, predictions = logs["coco_metric"]
    assert all(v.device.type == "cpu" for v in [*groundtruths.values(), *predictions.values()])
    assert groundtruths["classes"].tolist() == [[9], [5]]  # labels mapped back to ids
    assert groundtruths["boxes"][0].tolist() == [[2.0, 4.0, 14.0, 14.0]]  # as in the JSON
    assert predictions["detection_classes"].tolist() == [[9], [9]]
    # Clipped to the 64x64 resized image, then divided by the scale 2.
    assert predictions["detection_boxes"].tolist() == [[[2.0, 4.0, 14.0, 18.0]],
                                                       [[2.0, 4.0, 14.0, 32.0]]]
    assert logs["loss"].ndim == 0

    state = task.aggregate_logs(None, logs)
    assert state and state["num_steps"] == 1
    assert len(state["images"]) == 2 and state["images"][0].shape == (256, 256, 3)
    results = task.reduce_aggregated_logs(state)
    assert {"AP", "AP50", "AP75", "APs", "APm", "APl", "ARmax1", "ARmax10", "ARmax100",
            "ARs", "ARm", "ARl"} <= set(results)
    # Category 9: a hit (IoU 120/168) then a miss -> AP50 1; category 5: no detection -> 0.
    assert results["AP50"] == pytest.approx(0.5)
    assert results["image/detections"].shape == (2, 256, 256, 3)
    assert results["image/detections"].dtype == np.uint8


def test_aggregate_logs_resets_the_evaluator_on_the_first_call(tmp_path):
    path = _write_coco(tmp_path)
    params = tiny_params(tmp_path / "data", model={"num_classes": 2},
                         validation_data={"input_path": str(path), "global_batch_size": 2},
                         allow_image_summary=False)
    task = tg.get_task(params.task)
    images, labels = next(iter(task.build_inputs(params.task.validation_data)))
    task.build_metrics(training=False)
    logs = task.validation_step((images, labels), _FixedDetector(torch.zeros(1, 4)))
    assert "visualization" not in logs
    stale = {key: value.clone() for key, value in logs["coco_metric"][1].items()}
    stale["source_id"] = torch.tensor([77, 78])
    task.coco_metric.update_state(logs["coco_metric"][0], stale)  # left from a previous run
    state = task.aggregate_logs(None, logs)
    state = task.aggregate_logs(state, logs)
    assert state["num_steps"] == 2 and state["images"] == []
    results = task.reduce_aggregated_logs(state)
    assert "image/detections" not in results
    assert results["AP50"] == pytest.approx(0.5)


def test_draw_detections_outlines_boxes_in_class_colours():
    image = np.zeros((8, 8, 3), np.uint8)
    drawn = draw_detections(image, np.array([[1.0, 2.0, 4.0, 6.0]]), np.array([2]),
                            np.array([[0.0, 0.0, 8.0, 8.0]]), zoom=2)
    assert drawn.shape == (16, 16, 3)
    assert drawn[0, 5].tolist() == [255, 255, 255]  # ground truth: white border
    assert drawn[2, 4:12].tolist() == [[64, 255, 64]] * 8  # label 2: second palette colour
    assert drawn[5, 7].tolist() == [0, 0, 0]  # inside stays untouched
    assert image.sum() == 0  # the input is not modified


def test_category_count_must_match_the_model(tmp_path):
    path = _write_coco(tmp_path)
    params = tiny_params(tmp_path / "data", model={"num_classes": 3},
                         validation_data={"input_path": str(path)})
    task = tg.get_task(params.task)
    with pytest.raises(ValueError, match=rf"^{path}: has 2 categories \[5, 9\] but "
                                         r"task.model.num_classes is 3; set "
                                         r"task.model.num_classes=2"):
        task.build_inputs(params.task.validation_data)
    params = tiny_params(tmp_path / "data", model={"num_classes": 7})
    with pytest.raises(ValueError, match=r"num_classes \(7\) must be <= 6 without an input_path"):
        tg.get_task(params.task).build_inputs(params.task.train_data)


def test_run_experiment_writes_coco_scalars_images_and_best_checkpoint(tmp_path):
    params = tiny_params(tmp_path / "data")
    task = tg.get_task(params.task)
    model_dir = tmp_path / "run"
    _, logs = tg.run_experiment(task=task, mode="train_and_eval", params=params,
                                model_dir=model_dir)
    for key in ("AP", "AP50", "AP75", "APs", "APm", "APl", "ARmax1", "ARmax10", "ARmax100"):
        assert -1.0 <= logs[key] <= 1.0
    assert logs["image/detections"].shape == (2, 256, 256, 3)
    events = EventAccumulator(str(model_dir / "validation"), size_guidance={"images": 0})
    events.Reload()
    assert events.Tags()["images"] == ["image/detections"]
    image = events.Images("image/detections")[-1]
    assert (image.step, image.height, image.width) == (2, 256, 2 * 256)
    assert {"AP", "AP50", "ARmax100", "cls_loss", "box_loss", "total_loss"} <= set(
        events.Tags()["scalars"])
    train = EventAccumulator(str(model_dir / "train"))
    train.Reload()
    assert {"cls_loss", "box_loss", "total_loss"} <= set(train.Tags()["scalars"])
    info = json.loads((model_dir / "best_ckpt" / "info.json").read_text())
    assert info["AP"] == pytest.approx(logs["AP"], abs=1e-6)
