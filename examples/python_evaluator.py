"""Python-side evaluators (COCO and a custom one) fed through the aggregate/reduce flow.

Mirrors "Customize metrics / Python-based Metrics" in Model Garden's *Customize Training
Process* guide (a host-side evaluator class with ``reset_states``, ``update_state(
groundtruths, predictions)`` that appends per-key lists, and ``result()`` that computes
and resets) and the RetinaNet recipe it points to: the evaluator is created in
``build_metrics``, ``validation_step`` puts raw outputs in its logs, ``aggregate_logs``
feeds them to the evaluator after every eval step, and ``reduce_aggregated_logs``
returns ``evaluator.result()`` once per evaluation. As in Orbit, ``reduce`` runs only
when the aggregated state is truthy, so ``aggregate_logs`` returns ``True``.

The task is a tiny synthetic detector: each 24x24 image holds one square (bright: class
1, dim: class 2); the model regresses its box from row and column intensity profiles
and classifies it. ``metrics.COCOEvaluator`` (pycocotools underneath) reports AP, AP50,
AP75, APs/APm/APl and AR; ``MeanBoxIoU`` is the custom ``metrics.Evaluator``.

Run: ``python examples/python_evaluator.py``
"""

from __future__ import annotations

import dataclasses
import tempfile
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import torchgarden as tg
from torchgarden import data, metrics

IMAGE_SIZE = 24


@dataclasses.dataclass
class SquareDetectionConfig(tg.TaskConfig):
    """Synthetic one-square-per-image detection."""

    num_train_examples: int = 512
    """Training images. Defaults to 512."""
    num_validation_examples: int = 128
    """Validation images. Defaults to 128."""


def make_squares(num_examples: int, seed: int) -> tuple[torch.Tensor, ...]:
    """Images ``[N, 24, 24]``, boxes ``[N, 4]`` (ymin, xmin, ymax, xmax; pixels), classes
    ``[N]`` (1 bright, 2 dim) and image ids ``[N]``."""
    rng = np.random.default_rng(seed)
    images = rng.normal(0.0, 0.05, (num_examples, IMAGE_SIZE, IMAGE_SIZE)).astype(np.float32)
    sizes = rng.integers(4, 13, num_examples)
    tops = rng.integers(0, IMAGE_SIZE - sizes + 1)
    lefts = rng.integers(0, IMAGE_SIZE - sizes + 1)
    classes = rng.integers(1, 3, num_examples)
    for i in range(num_examples):
        images[i, tops[i]:tops[i] + sizes[i], lefts[i]:lefts[i] + sizes[i]] += (
            1.0 if classes[i] == 1 else 0.5)
    boxes = np.stack([tops, lefts, tops + sizes, lefts + sizes], axis=1).astype(np.float32)
    ids = np.arange(num_examples) + (0 if seed == 0 else 100_000)
    return (torch.from_numpy(images), torch.from_numpy(boxes), torch.from_numpy(classes),
            torch.from_numpy(ids))


class SquareDetector(nn.Module):
    """Row/column intensity profiles -> MLP -> box (normalised) + 2 class logits."""

    def __init__(self) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(2 * IMAGE_SIZE, 128), nn.ReLU(), nn.Linear(128, 6))

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        profiles = torch.cat([images.mean(dim=2), images.mean(dim=1)], dim=1)
        out = self.mlp(profiles)
        return torch.sigmoid(out[:, :4]) * IMAGE_SIZE, out[:, 4:]


class MeanBoxIoU(metrics.Evaluator):
    """IoU between each image's predicted and true box, averaged on the host."""

    _required_prediction_fields = ("source_id", "detection_boxes")
    _required_groundtruth_fields = ("source_id", "boxes")

    def __init__(self, name: str = "mean_box_iou") -> None:
        super().__init__(name)
        self.reset_states()

    def reset_states(self) -> None:
        self._predictions: dict[str, list[np.ndarray]] = {}
        self._groundtruths: dict[str, list[np.ndarray]] = {}

    def update_state(self, groundtruths: dict[str, Any], predictions: dict[str, Any]) -> None:
        for store, batch, required in (
            (self._predictions, predictions, self._required_prediction_fields),
            (self._groundtruths, groundtruths, self._required_groundtruth_fields),
        ):
            for key in required:
                if key not in batch:
                    raise ValueError(f"MeanBoxIoU: missing the required key {key!r}.")
                store.setdefault(key, []).append(batch[key].detach().cpu().numpy())

    def result(self) -> dict[str, float]:
        predicted = np.concatenate(self._predictions["detection_boxes"])[:, 0]
        true = np.concatenate(self._groundtruths["boxes"])[:, 0]
        low, high = np.maximum(predicted[:, :2], true[:, :2]), np.minimum(predicted[:, 2:], true[:, 2:])
        intersection = np.prod(np.clip(high - low, 0, None), axis=1)

        def area(b: np.ndarray) -> np.ndarray:
            return (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])

        iou = intersection / (area(predicted) + area(true) - intersection)
        self.reset_states()
        return {self.name: float(iou.mean()), "box_iou_above_0.5": float((iou > 0.5).mean())}


@tg.register_task(SquareDetectionConfig)
class SquareDetectionTask(tg.Task):
    """Box regression + classification, evaluated by COCO AP and a custom evaluator."""

    task_config: SquareDetectionConfig

    def build_model(self) -> nn.Module:
        return SquareDetector()

    def build_inputs(self, params: tg.DataConfig, input_context: Any = None) -> Any:
        cfg = self.task_config
        count = cfg.num_train_examples if params.is_training else cfg.num_validation_examples
        arrays = make_squares(count, seed=0 if params.is_training else 1)
        return data.build_dataloader(data.ArrayDataset(*arrays), params,
                                     input_context=input_context)

    def build_losses(self, labels: Any, model_outputs: Any, aux_losses: Any = None) -> torch.Tensor:
        boxes, classes = labels
        box_pred, class_logits = model_outputs
        return F.smooth_l1_loss(box_pred, boxes) + F.cross_entropy(class_logits, classes - 1)

    def build_metrics(self, training: bool = True) -> list[Any]:
        if not training:  # Host-side evaluators live on the task, as in RetinaNet.
            self.coco_metric = metrics.COCOEvaluator()
            self.box_iou_metric = MeanBoxIoU()
        return []

    def train_step(self, inputs: Any, model: nn.Module, optimizer: Any,
                   metrics: Any = None) -> dict[str, torch.Tensor]:
        images, boxes, classes, _ = inputs
        loss = self.build_losses((boxes, classes), model(images))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return {self.loss: loss.detach()}

    def validation_step(self, inputs: Any, model: nn.Module,
                        metrics: Any = None) -> dict[str, Any]:
        images, boxes, classes, ids = inputs
        box_pred, class_logits = self.inference_step(images, model)
        probabilities = class_logits.softmax(dim=1)
        n = images.shape[0]
        groundtruths = {
            "source_id": ids, "height": torch.full((n,), IMAGE_SIZE),
            "width": torch.full((n,), IMAGE_SIZE), "num_detections": torch.ones(n, dtype=torch.long),
            "boxes": boxes[:, None], "classes": classes[:, None],
        }
        predictions = {
            "source_id": ids, "num_detections": torch.ones(n, dtype=torch.long),
            "detection_boxes": box_pred[:, None], "detection_scores": probabilities.amax(1)[:, None],
            "detection_classes": probabilities.argmax(1)[:, None] + 1,
        }
        loss = self.build_losses((boxes, classes), (box_pred, class_logits))
        # Raw tensors for the host; only aggregate_logs reads this key.
        return {self.loss: loss, "coco_metric": (groundtruths, predictions)}

    def aggregate_logs(self, state: Any = None, step_logs: dict[str, Any] | None = None) -> Any:
        if state is None:  # first eval step of this evaluation
            self.coco_metric.reset_states()
            self.box_iou_metric.reset_states()
        groundtruths, predictions = step_logs["coco_metric"]
        self.coco_metric.update_state(groundtruths, predictions)
        self.box_iou_metric.update_state(groundtruths, predictions)
        return True  # truthy: reduce_aggregated_logs will run

    def reduce_aggregated_logs(self, aggregated_logs: Any,
                               global_step: int | None = None) -> dict[str, float]:
        logs = self.coco_metric.result()
        logs.update(self.box_iou_metric.result())
        return logs


def build_params(train_steps: int = 300) -> tg.ExperimentConfig:
    """An experiment config for the square detector (Adam, constant LR)."""
    params = tg.ExperimentConfig(
        task=SquareDetectionConfig(
            train_data=tg.DataConfig(is_training=True, global_batch_size=32, seed=0),
            validation_data=tg.DataConfig(is_training=False, global_batch_size=64,
                                          drop_remainder=False),
        ),
        trainer=tg.TrainerConfig(
            train_steps=train_steps, steps_per_loop=100, summary_interval=100,
            validation_interval=train_steps, checkpoint_interval=train_steps,
            progress_bar=False,
            optimizer_config=tg.OptimizationConfig.from_dict({
                "optimizer": {"type": "adam"},
                "learning_rate": {"type": "constant", "constant": {"learning_rate": 0.003}},
            }),
        ),
        runtime=tg.RuntimeConfig(seed=0, device="cpu"),
    )
    return params.validate()


def main(model_dir: str | None = None, train_steps: int = 300) -> dict[str, Any]:
    """Trains the detector and evaluates it with both Python-side evaluators.

    Args:
        model_dir: Output directory. Defaults to a new temporary directory.
        train_steps: Steps to train. Defaults to 300.

    Returns:
        ``model_dir``, the trained ``model``, the ``task`` and the final ``eval_logs``.
    """
    model_dir = model_dir or tempfile.mkdtemp(prefix="tg_python_evaluator_")
    params = build_params(train_steps)
    task = tg.get_task(params.task, logging_dir=model_dir)
    model, eval_logs = tg.run_experiment(task=task, mode="train_and_eval", params=params,
                                         model_dir=model_dir)
    return {"model_dir": model_dir, "model": model, "task": task, "eval_logs": eval_logs}


if __name__ == "__main__":
    result = main()
    shown = ("AP", "AP50", "AP75", "ARmax100", "mean_box_iou", "box_iou_above_0.5")
    print({k: round(float(result["eval_logs"][k]), 4) for k in shown})
