"""The RetinaNet detection task: focal + Huber losses, COCO evaluation, box image summaries.

Follows Model Garden's ``RetinaNetTask`` (REFERENCE §12.2): anchors are matched to the
ground truth inside the step, the focal classification loss and the Huber box loss
are each divided by (number of positive anchors + 1), ``total = cls + 50 * box``;
validation puts ``(groundtruths, predictions)`` host tensors under ``coco_metric`` in
its logs, `aggregate_logs` feeds them to ``metrics.COCOEvaluator`` and
`reduce_aggregated_logs` returns AP, AP50, AP75, APs/m/l and AR (plus
``image/detections`` when ``task.allow_image_summary`` is set).

One difference from Model Garden: the classifier has one logit per foreground class
(no background column); a negative anchor's target is all zeros.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from torchgarden import data, losses, metrics
from torchgarden.core.serving import Serving
from torchgarden.core.task import Task
from torchgarden.experiments.retinanet import RetinaNetConfig, RetinaNetDataConfig
from torchgarden.layers import model_losses
from torchgarden.models.garden import build_pyramid_backbone, with_norm
from torchgarden.registry import register_task
from torchgarden.tasks.serving import DetectorServing
from torchgarden.utils.logs import Logs
from torchgarden.vision.anchors import assign_targets
from torchgarden.vision.augment import Augmentation
from torchgarden.vision.coco_data import COCODetectionDataset, DetectionCollate
from torchgarden.vision.pyramid import l2_kernels
from torchgarden.vision.retinanet_model import RetinaNet, flatten_levels
from torchgarden.vision.shapes import SHAPE_NAMES, generate_shapes_dataset, shapes_dataset_root
from torchgarden.vision.tfrecord_records import detection_loader

__all__ = ["RetinaNetTask", "draw_detections"]

_LOSS_NAMES = ("total_loss", "cls_loss", "box_loss")
_DRAW_MIN_SCORE = 0.3
"""Detections drawn in image summaries must score at least this."""
_PALETTE = np.array([[255, 64, 64], [64, 255, 64], [64, 128, 255], [255, 255, 0],
                     [255, 0, 255], [0, 255, 255]], dtype=np.uint8)


def draw_detections(
    image: np.ndarray, detection_boxes: np.ndarray, detection_classes: np.ndarray,
    groundtruth_boxes: np.ndarray | None = None, *, zoom: int = 1,
) -> np.ndarray:
    """Draws box outlines on a uint8 ``[H, W, 3]`` image (returns a new, zoomed image).

    Args:
        image: uint8 ``[H, W, 3]``.
        detection_boxes: ``[K, 4]`` ``yxyx`` pixels of ``image``, drawn in a colour per
            class.
        detection_classes: ``[K]`` labels choosing the colours.
        groundtruth_boxes: Optional ``[M, 4]`` ``yxyx`` boxes drawn in white first.
        zoom: Integer upscaling (nearest) applied before drawing. Defaults to 1.

    Returns:
        uint8 ``[H * zoom, W * zoom, 3]``.
    """
    canvas = np.repeat(np.repeat(image, zoom, axis=0), zoom, axis=1).copy()
    height, width = canvas.shape[:2]

    def outline(box: np.ndarray, colour: np.ndarray) -> None:
        y0, x0, y1, x1 = (int(round(float(v) * zoom)) for v in box)
        y0, y1 = sorted((min(max(y0, 0), height - 1), min(max(y1 - 1, 0), height - 1)))
        x0, x1 = sorted((min(max(x0, 0), width - 1), min(max(x1 - 1, 0), width - 1)))
        canvas[y0, x0:x1 + 1] = colour
        canvas[y1, x0:x1 + 1] = colour
        canvas[y0:y1 + 1, x0] = colour
        canvas[y0:y1 + 1, x1] = colour

    white = np.array([255, 255, 255], dtype=np.uint8)
    for box in groundtruth_boxes if groundtruth_boxes is not None else ():
        outline(box, white)
    for box, label in zip(detection_boxes, detection_classes):
        outline(box, _PALETTE[(int(label) - 1) % len(_PALETTE)])
    return canvas


@register_task(RetinaNetConfig)
class RetinaNetTask(Task):
    """RetinaNet on COCO-format data (the generated shapes data by default).

    Example:
        >>> import torchgarden as tg
        >>> params = tg.get_experiment("retinanet")
        >>> task = tg.get_task(params.task)
        >>> model = task.build_model()
        >>> loader = task.build_inputs(params.task.validation_data)  # doctest: +SKIP
    """

    task_config: RetinaNetConfig

    def __init__(self, params: RetinaNetConfig, logging_dir: str | None = None,
                 name: str | None = None) -> None:
        super().__init__(params, logging_dir=logging_dir, name=name)
        self._category_ids: list[int] | None = None
        self._category_source = ""
        loss_cfg = params.losses
        self._focal = losses.FocalLoss(alpha=loss_cfg.focal_loss_alpha,
                                       gamma=loss_cfg.focal_loss_gamma, reduction="sum")
        self._huber = losses.Huber(delta=loss_cfg.huber_loss_delta, reduction="sum")
        self.coco_metric: metrics.COCOEvaluator | None = None

    def build_model(self) -> nn.Module:
        cfg = self.task_config.model
        g, fpn, head = cfg.detection_generator, cfg.decoder.fpn, cfg.head
        model = RetinaNet(
            num_classes=cfg.num_classes, min_level=cfg.min_level, max_level=cfg.max_level,
            backbone=build_pyramid_backbone(cfg.backbone, cfg.norm_activation),
            backbone_channels=cfg.backbone_channels, activation=cfg.norm_activation.activation,
            fpn_channels=fpn.num_filters, fpn_batch_norm=fpn.batch_norm,
            fpn_separable_conv=fpn.use_separable_conv, head_channels=head.num_filters,
            num_head_convs=head.num_convs, head_norm_per_level=head.norm_per_level,
            head_separable_conv=head.use_separable_conv,
            num_scales=cfg.anchor.num_scales, aspect_ratios=cfg.anchor.aspect_ratios,
            anchor_size=cfg.anchor.anchor_size, prior_probability=cfg.prior_probability,
            box_weights=g.box_coder_weights or (1.0, 1.0, 1.0, 1.0),
            score_threshold=g.pre_nms_score_threshold, iou_threshold=g.nms_iou_threshold,
            max_detections=g.max_num_detections, pre_nms_top_k=g.pre_nms_top_k)
        model = with_norm(model, cfg.norm_activation)
        self._l2_weights = l2_kernels(model)
        return model

    def _annotation_file(self, params: RetinaNetDataConfig) -> str:
        """The split's COCO JSON: ``input_path``, or the generated shapes split."""
        path = params.input_path
        path = path[0] if isinstance(path, list) and path else path
        if path:
            return str(path)
        num_classes = self.task_config.model.num_classes
        if num_classes > len(SHAPE_NAMES):
            raise ValueError(
                f"task.model.num_classes ({num_classes}) must be <= {len(SHAPE_NAMES)} without "
                "an input_path (the generated shapes data has that many classes); set "
                "task.*_data.input_path to your COCO JSON or lower num_classes.")
        shapes = self.task_config.generated_data
        kwargs = {"num_train": shapes.num_train, "num_validation": shapes.num_validation,
                  "image_size": shapes.image_size, "num_classes": num_classes,
                  "seed": shapes.seed, "max_objects": shapes.max_objects}
        root = shapes_dataset_root(data_root=shapes.data_dir or None, **kwargs)
        splits = generate_shapes_dataset(root, **kwargs)
        split = "train" if params.is_training else "validation"
        return f"{splits[split]}/annotations.json"

    def _augmentation(self, params: RetinaNetDataConfig) -> Augmentation | None:
        """Flip, scale-crop and colour jitter when training; None for evaluation."""
        jitter, size = params.color_jitter, tuple(self.task_config.model.input_size[:2])
        parser = params.parser
        return Augmentation(
            output_size=size, horizontal_flip=parser.aug_rand_hflip, brightness=jitter,
            scale_range=(parser.aug_scale_min, parser.aug_scale_max), contrast=jitter,
            saturation=jitter, min_box_size=1.0) if params.is_training else None

    def build_dataset(self, params: RetinaNetDataConfig) -> COCODetectionDataset:
        """The `COCODetectionDataset` of one split, with augmentation when training.

        Raises:
            ValueError: If the file's categories disagree with ``task.model.num_classes``
                or with the other split's categories.
        """
        model_cfg = self.task_config.model
        path = self._annotation_file(params)
        dataset = COCODetectionDataset(
            path, params.image_dir or None, output_size=tuple(model_cfg.input_size[:2]),
            augmentation=self._augmentation(params), mean=self.task_config.image_mean,
            std=self.task_config.image_std,
            skip_crowd=bool(params.is_training and params.parser.skip_crowd_during_training),
            cache_images=params.cache)
        if dataset.num_classes != model_cfg.num_classes:
            raise ValueError(
                f"{path}: has {dataset.num_classes} categories {dataset.category_ids} but "
                f"task.model.num_classes is {model_cfg.num_classes}; set "
                f"task.model.num_classes={dataset.num_classes}.")
        if self._category_ids is not None and self._category_ids != dataset.category_ids:
            raise ValueError(
                f"{path}: category ids {dataset.category_ids} differ from "
                f"{self._category_ids} in {self._category_source}; both splits need the "
                "same categories.")
        self._category_ids, self._category_source = dataset.category_ids, path
        return dataset

    def build_inputs(self, params: RetinaNetDataConfig, input_context: Any = None) -> Any:
        """A loader of ``(images [B, 3, H, W], labels)`` batches (see `collate_detections`).

        ``params.cache`` keeps decoded images in memory (augmentation still runs).
        """
        collate = DetectionCollate(max_num_instances=params.parser.max_num_instances,
                                   dtype=params.dtype)
        if params.resolved_source() == "tfrecord":  # Labels as stored: category ids.
            self._category_ids = list(range(1, self.task_config.model.num_classes + 1))
            return detection_loader(self.task_config, params, self._augmentation(params),
                                    input_context, collate)
        dataset = self.build_dataset(params)
        if params.cache:  # Cached inside the dataset, not by freezing whole examples.
            params = params.replace(cache=False)
        return data.build_dataloader(dataset, params, input_context=input_context,
                                     collate_fn=collate)

    def build_metrics(self, training: bool = True) -> list[Any]:
        """Means of the three losses; for evaluation also ``self.coco_metric``."""
        if not training:
            self.coco_metric = metrics.COCOEvaluator(
                per_category_metrics=self.task_config.per_category_metrics,
                max_num_eval_detections=self.task_config.max_num_eval_detections)
        return [metrics.Mean(name=name) for name in _LOSS_NAMES]

    def compute_losses(self, labels: dict[str, torch.Tensor], model_outputs: dict[str, Any],
                       aux_losses: Sequence[torch.Tensor] | None = None
                       ) -> dict[str, torch.Tensor]:
        """Matches anchors and returns ``total_loss``, ``cls_loss``, ``box_loss``, ``model_loss``.

        Crowd boxes (``is_crowds``) are not matched. Both losses are sums divided by
        (positive anchors in the batch + 1); ignored anchors count in neither.
        """
        loss_cfg = self.task_config.losses
        parser = self.task_config.train_data.parser  # validation's is checked equal
        num_classes = self.task_config.model.num_classes
        classes = labels["classes"]
        if "is_crowds" in labels:
            classes = torch.where(labels["is_crowds"] > 0, 0, classes)
        targets = assign_targets(
            model_outputs["anchor_boxes"], labels["boxes"], classes,
            positive_threshold=parser.match_threshold,
            negative_threshold=parser.unmatched_threshold,
            match_each_groundtruth=loss_cfg.match_each_groundtruth)
        logits = flatten_levels(model_outputs["cls_outputs"], num_classes)
        deltas = flatten_levels(model_outputs["box_outputs"], 4)
        normalizer = targets.num_positives + 1.0
        one_hot = F.one_hot(targets.classes.clamp(min=0), num_classes + 1)[..., 1:]
        cls_weight = (~targets.ignored).to(logits.dtype)
        cls_loss = self._focal(one_hot.to(logits.dtype), logits, sample_weight=cls_weight)
        box_loss = self._huber(targets.boxes, deltas,
                               sample_weight=targets.positive.to(deltas.dtype))
        cls_loss, box_loss = cls_loss / normalizer, box_loss / normalizer
        model_loss = cls_loss + loss_cfg.box_loss_weight * box_loss
        total = model_loss
        if loss_cfg.l2_weight_decay:  # Keras l2(l2_weight_decay / 2) on every conv kernel
            total = total + loss_cfg.l2_weight_decay * 0.5 * sum(
                w.square().sum() for w in self._l2_weights)
        if aux_losses:
            total = total + torch.stack([a.float() for a in aux_losses]).sum()
        total = total * loss_cfg.loss_weight
        return {"total_loss": total, "cls_loss": cls_loss, "box_loss": box_loss,
                "model_loss": model_loss}

    def build_losses(self, labels: dict[str, torch.Tensor], model_outputs: dict[str, Any],
                     aux_losses: Sequence[torch.Tensor] | None = None) -> torch.Tensor:
        """The scalar ``total_loss`` of `compute_losses`."""
        return self.compute_losses(labels, model_outputs, aux_losses)["total_loss"]

    @staticmethod
    def _update_loss_metrics(metrics_list: Sequence[Any] | None,
                             loss_values: dict[str, torch.Tensor]) -> None:
        for metric in metrics_list or ():
            if metric.name in loss_values:
                metric.update_state(loss_values[metric.name].detach())

    def train_step(self, inputs: Any, model: nn.Module, optimizer: torch.optim.Optimizer,
                   metrics: Sequence[Any] | None = None) -> Logs:
        """Forward, `compute_losses`, backward, update; metrics are the loss means."""
        images, labels = inputs
        outputs = model(images.float())  # `dtype` images reach the model as float32
        loss_values = self.compute_losses(labels, outputs, aux_losses=model_losses(model))
        loss = loss_values["total_loss"]
        optimizer.zero_grad(set_to_none=True)
        scale = getattr(optimizer, "scale", None)  # LossScaleOptimizer / accumulation
        (scale(loss) if scale is not None else loss).backward()
        optimizer.step()
        self._update_loss_metrics(metrics, loss_values)
        return {self.loss: loss.detach()}

    def validation_step(self, inputs: Any, model: nn.Module,
                        metrics: Sequence[Any] | None = None) -> Logs:
        """Losses, detections and the ``coco_metric`` inputs (host tensors).

        Predicted boxes are clipped to the resized image and scaled back to original
        pixels with ``image_info``; labels become COCO category ids.
        """
        images, labels = inputs
        outputs = self.inference_step(images.float(), model)
        loss_values = self.compute_losses(labels, outputs, aux_losses=model_losses(model))
        self._update_loss_metrics(metrics, loss_values)
        to_category = torch.tensor([0, *self._category_ids_or_default()],
                                   device=labels["classes"].device)
        resized, scale = labels["image_info"][:, 1], labels["image_info"][:, 2]
        boxes = outputs["detection_boxes"]
        boxes = torch.minimum(boxes, torch.cat([resized, resized], dim=-1)[:, None, :])
        boxes = boxes / torch.cat([scale, scale], dim=-1)[:, None, :]
        # Host transfers: COCO evaluation runs on the host, once per eval batch.
        predictions = {
            "source_id": labels["source_id"].cpu(),
            "detection_boxes": boxes.cpu(),
            "detection_scores": outputs["detection_scores"].cpu(),
            "detection_classes": to_category[outputs["detection_classes"]].cpu(),
            "num_detections": outputs["num_detections"].cpu(),
        }
        groundtruths = {
            "source_id": labels["source_id"].cpu(),
            "height": labels["height"].cpu(),
            "width": labels["width"].cpu(),
            "num_detections": labels["num_detections"].cpu(),
            "boxes": labels["original_boxes"].cpu(),
            "classes": to_category[labels["classes"]].cpu(),
            "areas": labels["areas"].cpu(),
            "is_crowds": labels["is_crowds"].cpu(),
        }
        logs: Logs = {self.loss: loss_values["total_loss"].detach(),
                      "coco_metric": (groundtruths, predictions)}
        if self.task_config.allow_image_summary and self.task_config.num_image_summaries > 0:
            count = self.task_config.num_image_summaries
            logs["visualization"] = (
                images[:count].cpu(),
                {key: labels[key][:count].cpu() for key in ("boxes", "num_detections")},
                {key: outputs[key][:count].cpu() for key in
                 ("detection_boxes", "detection_scores", "detection_classes",
                  "num_detections")})
        return logs

    def _category_ids_or_default(self) -> list[int]:
        if self._category_ids is None:
            return list(range(1, self.task_config.model.num_classes + 1))
        return self._category_ids

    def aggregate_logs(self, state: Any = None, step_logs: Logs | None = None) -> Any:
        """Feeds ``coco_metric`` (reset on the first call) and collects drawn images.

        Returns:
            A truthy dict ``{"num_steps": ..., "images": [uint8 [H, W, 3], ...]}``.
        """
        if self.coco_metric is None:
            self.build_metrics(training=False)
        if state is None:
            self.coco_metric.reset_states()
            state = {"num_steps": 0, "images": []}
        step_logs = step_logs or {}
        if "coco_metric" in step_logs:
            self.coco_metric.update_state(*step_logs["coco_metric"])
        wanted = self.task_config.num_image_summaries - len(state["images"])
        if "visualization" in step_logs and wanted > 0:
            state["images"].extend(self._draw(*step_logs["visualization"])[:wanted])
        state["num_steps"] += 1
        return state

    def _draw(self, images: torch.Tensor, labels: dict[str, torch.Tensor],
              detections: dict[str, torch.Tensor]) -> list[np.ndarray]:
        mean = images.new_tensor(self.task_config.image_mean).view(1, -1, 1, 1)
        std = images.new_tensor(self.task_config.image_std).view(1, -1, 1, 1)
        pixels = ((images * std + mean).clamp(0, 1) * 255).round().to(torch.uint8)
        pixels = pixels.permute(0, 2, 3, 1).numpy()
        zoom = max(1, 256 // max(pixels.shape[1:3]))
        drawn = []
        for i in range(pixels.shape[0]):
            count = int(detections["num_detections"][i])
            scores = detections["detection_scores"][i, :count].numpy()
            shown = scores >= _DRAW_MIN_SCORE
            drawn.append(draw_detections(
                pixels[i],
                detections["detection_boxes"][i, :count].numpy()[shown],
                detections["detection_classes"][i, :count].numpy()[shown],
                labels["boxes"][i, :int(labels["num_detections"][i])].numpy(),
                zoom=zoom))
        return drawn

    def reduce_aggregated_logs(self, aggregated_logs: Any,
                               global_step: int | None = None) -> Logs:
        """COCO AP/AR from ``coco_metric`` (which it resets), plus ``image/detections``."""
        del global_step
        logs: Logs = dict(self.coco_metric.result())
        images = aggregated_logs.get("images") if isinstance(aggregated_logs, dict) else None
        if images:
            logs["image/detections"] = np.stack(images)
        return logs

    def build_serving_module(self, model: nn.Module) -> Serving:
        """uint8 ``images [B, H, W, 3]`` at ``task.model.input_size`` -> fixed-shape
        detections (see ``DetectorServing``); ``metadata["category_ids"]`` maps class
        ``k`` to its COCO category id."""
        config = self.task_config
        height, width = config.model.input_size[:2]
        images = torch.randint(0, 256, (2, height, width, 3), dtype=torch.uint8,
                               generator=torch.Generator().manual_seed(0))
        module = DetectorServing(self, model, image_size=(height, width),
                                 mean=config.image_mean, std=config.image_std)
        return Serving(module=module, example_inputs=(images,), input_names=("images",),
                       metadata={"image_size": [height, width, 3],
                                 "category_ids": self._category_ids_or_default(),
                                 "input": "uint8 RGB images [batch, height, width, 3], 0..255",
                                 "boxes": "ymin, xmin, ymax, xmax in input pixels"})
