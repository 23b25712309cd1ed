"""The semantic-segmentation task: per-pixel cross-entropy, mean IoU, image summaries."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from torchgarden import data, metrics
from torchgarden.core.serving import Serving
from torchgarden.core.task import Task, first_validation_data
from torchgarden.experiments.semantic_segmentation import (
    SegmentationDataConfig,
    SemanticSegmentationConfig,
)
from torchgarden.layers import model_losses
from torchgarden.models.garden import build_pyramid_backbone, with_norm
from torchgarden.registry import register_task
from torchgarden.tasks.serving import SegmenterServing
from torchgarden.utils.logs import Logs
from torchgarden.vision.augment import Augmentation
from torchgarden.vision.backbone_segmentation import BackboneSegmentationModel
from torchgarden.vision.deeplab import build_deeplab
from torchgarden.vision.segmentation_data import ResizeThenCrop, SegmentationFolderDataset
from torchgarden.vision.segmentation_loss import segmentation_loss
from torchgarden.vision.segmentation_model import SegmentationModel
from torchgarden.vision.shapes import SHAPE_NAMES, generate_shapes_dataset, shapes_dataset_root

__all__ = ["ImageBatch", "SegmentationMeanIoU", "SemanticSegmentationTask", "colorize_overlay"]

_logger = logging.getLogger("torchgarden")

# Overlay colours of classes 1.. (class 0, background, is not drawn).
_PALETTE = np.array(
    [
        [230, 25, 75], [60, 180, 75], [0, 130, 200], [255, 225, 25], [245, 130, 48],
        [145, 30, 180], [70, 240, 240], [240, 50, 230], [210, 245, 60], [0, 128, 128],
    ],
    dtype=np.float32,
)
_IGNORE_COLOUR = np.array([255, 255, 255], dtype=np.float32)
# Keys a validation step adds (only with image summaries) for aggregate_logs.
_IMAGES, _LABELS, _PREDICTIONS = "_images", "_labels", "_predictions"


class ImageBatch(np.ndarray):
    """A uint8 `[N, H, W, 3]` array whose repr is one line, so eval log lines stay short."""

    def __repr__(self) -> str:
        return f"<{self.dtype} images {list(self.shape)}>"

    __str__ = __repr__


class SegmentationMeanIoU(metrics.MeanIoU):
    """`MeanIoU` whose result also holds pixel accuracy and every class's IoU.

    `result()` is `{name: mean IoU, "pixel_accuracy": ..., "iou": {"class_<k>": ...}}`
    (``iou`` only with `per_class`, Model Garden's ``report_per_class_iou``); the nested
    dict becomes the TensorBoard subfolder `iou/`.
    """

    def __init__(self, *args: Any, per_class: bool = True, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.per_class = per_class

    def result(self) -> dict[str, Any]:  # type: ignore[override]
        cm = self.total_cm
        pixel_accuracy = cm.diagonal().sum() / cm.sum().clamp_min(1)
        results = {self.name: super().result(), "pixel_accuracy": pixel_accuracy}
        if self.per_class:
            per_class = self.per_class_iou()
            results["iou"] = {f"class_{k}": per_class[k] for k in range(self.num_classes)}
        return results


def _colour(category: int) -> np.ndarray:
    if category <= len(_PALETTE):
        return _PALETTE[category - 1]
    hue = (category * 0.618033988749895) % 1.0  # golden-ratio hues beyond the palette
    return np.array([255 * abs(np.sin(np.pi * (hue + s))) for s in (0, 1 / 3, 2 / 3)],
                    dtype=np.float32)


def colorize_overlay(
    images: np.ndarray, labels: np.ndarray, *, num_classes: int, ignore_label: int,
    alpha: float = 0.7,
) -> np.ndarray:
    """Blends class colours over images; background (0) stays as is, ignored pixels go white.

    Args:
        images: uint8 `[N, H, W, 3]`.
        labels: integer `[N, H, W]` class ids.
        num_classes: Classes including background.
        ignore_label: Label drawn white.
        alpha: Weight of the class colour. Defaults to 0.7.

    Returns:
        uint8 `[N, H, W, 3]`.
    """
    out = images.astype(np.float32)
    for category in range(1, num_classes):
        where = labels == category
        out[where] = (1 - alpha) * out[where] + alpha * _colour(category)
    where = labels == ignore_label
    out[where] = (1 - alpha) * out[where] + alpha * _IGNORE_COLOUR
    return np.clip(np.rint(out), 0, 255).astype(np.uint8)


def _resized(logits: torch.Tensor, size: Sequence[int]) -> torch.Tensor:
    """Per-pixel ``logits`` at ``size`` (bilinear; unchanged when already there)."""
    if logits.ndim != 4 or tuple(logits.shape[-2:]) == tuple(size):
        return logits
    return F.interpolate(logits, size=tuple(size), mode="bilinear", align_corners=False)


@register_task(SemanticSegmentationConfig)
class SemanticSegmentationTask(Task):
    """Segmentation of image/mask folders (by default generated shapes) with mean IoU.

    Validation reports `mean_iou`, `pixel_accuracy` and `iou/class_<k>`; with
    `task.allow_image_summary` it also returns `image/input`, `image/ground_truth`
    and `image/prediction` (uint8 `[N, H, W, 3]`, the first `num_image_summaries`
    validation examples) for `ImageScalarSummaryManager`.
    """

    task_config: SemanticSegmentationConfig

    def build_model(self) -> nn.Module:
        """Model Garden's backbone + decoder + head (`build_deeplab`) for a ``backbone.type``,
        a semantic-FPN head on a library ``backbone.name``, else the built-in model."""
        model = self.task_config.model
        backbone = build_pyramid_backbone(model.backbone, model.norm_activation)
        if model.backbone.type is not None:
            built: nn.Module = build_deeplab(model, backbone)
        elif backbone is not None:
            built = BackboneSegmentationModel(backbone, model.num_classes, dropout=model.dropout)
        else:
            built = SegmentationModel(model.num_classes, widths=model.widths,
                                      stem_stride=model.stem_stride, dropout=model.dropout)
        # Conv kernels carry l2_weight_decay, as Model Garden's kernel_regularizer.
        self._l2_weights = [m.weight for m in built.modules() if isinstance(m, nn.Conv2d)]
        return with_norm(built, model.norm_activation)

    # ------------------------------------------------------------------ data

    def data_dir(self, params: SegmentationDataConfig) -> Path:
        """The folder holding `image_subdir`/`mask_subdir` for `params`.

        An empty `input_path` generates (once) the shapes data described by
        `task.generated_data` and returns its `split` folder.
        """
        paths = params.input_path
        if isinstance(paths, str):
            paths = [p for p in paths.split(",") if p.strip()]
        if len(paths) > 1:
            raise ValueError(
                f"segmentation input_path takes one folder (holding {params.image_subdir}/ and "
                f"{params.mask_subdir}/), got {len(paths)}: {paths}."
            )
        if paths:
            return Path(paths[0].strip())
        config = self.task_config
        shape_classes = config.model.num_classes - 1
        if shape_classes > len(SHAPE_NAMES):
            raise ValueError(
                f"generated data has at most {len(SHAPE_NAMES)} shape classes, so "
                f"task.model.num_classes must be <= {len(SHAPE_NAMES) + 1} without an "
                f"input_path; got {config.model.num_classes}."
            )
        generated = config.generated_data
        kwargs = {
            "num_train": generated.num_train,
            "num_validation": generated.num_validation,
            "image_size": generated.image_size,
            "num_classes": shape_classes,
            "seed": generated.seed,
            "max_objects": generated.max_objects,
        }
        root = shapes_dataset_root(**kwargs, data_root=generated.data_dir or None)
        split = params.split or ("train" if params.is_training else "validation")
        return Path(generate_shapes_dataset(root, **kwargs)[split])

    def build_augmentation(self, params: SegmentationDataConfig) -> Augmentation | ResizeThenCrop:
        """Flip, scale-crop and colour jitter as `params` asks (training splits only, as in
        Model Garden), then the resize to ``output_size`` (``crop_size`` for a training
        split that sets it, after Model Garden's resize-then-random-crop) and normalization."""
        config = self.task_config
        training = bool(params.is_training)
        crop = training and bool(params.crop_size)
        size = params.crop_size if crop else params.output_size
        jitter = params.color_jitter if training else 0.0
        augmentation = Augmentation(
            output_size=tuple(size) if size else None,
            horizontal_flip=params.aug_rand_hflip and training,
            scale_range=(params.aug_scale_min, params.aug_scale_max) if training else (1, 1),
            brightness=jitter,
            contrast=jitter,
            saturation=jitter,
            mean=config.image_mean,
            std=config.image_std,
            mask_fill=config.losses.ignore_label,
        )
        if not crop:
            return augmentation
        return ResizeThenCrop(crop_size=tuple(params.crop_size), augment=augmentation,
                              output_size=tuple(params.output_size) if params.output_size else None)

    def build_inputs(self, params: SegmentationDataConfig, input_context: Any = None) -> Any:
        if params.resolved_source() == "tfrecord":  # Model Garden's segmentation schema.
            from torchgarden.data.tfrecord_input import build_tfrecord_loader
            from torchgarden.vision.tfrecord_records import SegmentationRecord

            record = SegmentationRecord(self.build_augmentation(params),
                                        num_classes=self.task_config.model.num_classes,
                                        ignore_label=self.task_config.losses.ignore_label)
            return build_tfrecord_loader(params, record, input_context=input_context)
        return data.build_dataloader(self.build_dataset(params), params,
                                     input_context=input_context)

    def split_inputs(self, inputs: Any) -> tuple[Any, Any]:
        """``(images, masks)``, images rounded to the training split's ``dtype`` (as Model
        Garden's parser casts them) and computed on in float32."""
        features, labels = super().split_inputs(inputs)
        dtype = getattr(torch, self.task_config.train_data.dtype)
        if dtype != torch.float32 and isinstance(features, torch.Tensor):
            features = features.to(dtype).float()
        return features, labels

    def build_dataset(self, params: SegmentationDataConfig) -> SegmentationFolderDataset:
        """The ``(image, mask)`` pairs of ``params``, augmented as it asks."""
        folder = self.data_dir(params)
        dataset = SegmentationFolderDataset(
            folder / params.image_subdir,
            folder / params.mask_subdir,
            num_classes=self.task_config.model.num_classes,
            augment=self.build_augmentation(params),
            ignore_label=self.task_config.losses.ignore_label,
            preload=params.preload,
        )
        _logger.info("segmentation data: %d pairs from %s", len(dataset), folder)
        return dataset

    # ------------------------------------------------------------------ losses and metrics

    def build_losses(
        self, labels: torch.Tensor, model_outputs: torch.Tensor,
        aux_losses: Sequence[torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """Model Garden's segmentation loss (`segmentation_loss`, ``task.losses``), the L2
        penalty ``l2_weight_decay / 2 * sum(w**2)`` on conv kernels and `aux_losses`, all
        times ``loss_weight``."""
        cfg = self.task_config.losses
        loss = segmentation_loss(
            model_outputs, labels, ignore_label=cfg.ignore_label,
            label_smoothing=cfg.label_smoothing, class_weights=cfg.class_weights,
            top_k_percent_pixels=cfg.top_k_percent_pixels,
            use_groundtruth_dimension=cfg.use_groundtruth_dimension)
        if cfg.l2_weight_decay:
            weights = getattr(self, "_l2_weights", None) or []
            loss = loss + cfg.l2_weight_decay * 0.5 * sum(w.square().sum() for w in weights)
        if aux_losses:
            loss = loss + torch.stack([a.float() for a in aux_losses]).sum()
        return loss * cfg.loss_weight

    def inference_step(self, inputs: Any, model: nn.Module) -> torch.Tensor:
        """Logits resized (bilinear) to the images' size, as Model Garden's evaluation
        resizes them to the ground truth."""
        return _resized(model(inputs), inputs.shape[-2:])

    def build_metrics(self, training: bool = True) -> list[Any]:
        """Mean IoU (pixel accuracy, per-class IoUs) for validation, and for training
        with ``evaluation.report_train_mean_iou``."""
        config = self.task_config
        if training and not config.evaluation.report_train_mean_iou:
            return []
        return [SegmentationMeanIoU(num_classes=config.model.num_classes,
                                    ignore_index=config.losses.ignore_label, name="mean_iou",
                                    per_class=config.evaluation.report_per_class_iou)]

    def process_metrics(self, metrics: Sequence[Any], labels: Any, model_outputs: Any,
                        **kwargs: Any) -> None:
        """Updates the metrics with the logits resized to the masks (Model Garden's)."""
        super().process_metrics(metrics, labels, _resized(model_outputs, labels.shape[-2:]),
                                **kwargs)

    # ------------------------------------------------------------------ evaluation

    def validation_step(
        self, inputs: Any, model: nn.Module, metrics: Sequence[Any] | None = None
    ) -> Logs:
        """Loss and IoU updates; with image summaries also passes the batch on."""
        features, labels = self.split_inputs(inputs)
        logits = model(features)
        loss = self.build_losses(labels, logits, aux_losses=model_losses(model))
        outputs = _resized(logits, labels.shape[-2:])
        if metrics:
            self.process_metrics(metrics, labels, outputs)
        logs: Logs = {self.loss: loss.detach()}
        if self.task_config.allow_image_summary:
            logs.update({_IMAGES: features, _LABELS: labels, _PREDICTIONS: outputs.argmax(1)})
        return logs

    def aggregate_logs(self, state: Any = None, step_logs: Logs | None = None) -> Any:
        """Keeps the first `num_image_summaries` validation examples on the host."""
        if not step_logs or _IMAGES not in step_logs:
            return state
        state = state or {_IMAGES: [], _LABELS: [], _PREDICTIONS: []}
        wanted = self.task_config.num_image_summaries - sum(len(x) for x in state[_IMAGES])
        if wanted > 0:
            for key in (_IMAGES, _LABELS, _PREDICTIONS):
                state[key].append(step_logs[key][:wanted].detach().cpu())  # sync: a few examples
        return state

    def reduce_aggregated_logs(self, aggregated_logs: Any, global_step: int | None = None) -> Logs:
        """Returns `image/input`, `image/ground_truth` and `image/prediction` (uint8 NHWC)."""
        del global_step
        if not aggregated_logs or not aggregated_logs[_IMAGES]:
            return {}
        config = self.task_config
        images = torch.cat(aggregated_logs[_IMAGES]).float()
        mean = torch.tensor(config.image_mean).view(1, 3, 1, 1)
        std = torch.tensor(config.image_std).view(1, 3, 1, 1)
        pixels = (images * std + mean).clamp(0, 1).mul(255).round().to(torch.uint8)
        pixels = pixels.permute(0, 2, 3, 1).numpy()
        labels = torch.cat(aggregated_logs[_LABELS]).numpy()
        predictions = torch.cat(aggregated_logs[_PREDICTIONS]).numpy()
        overlay = {
            "num_classes": config.model.num_classes, "ignore_label": config.losses.ignore_label
        }
        return {
            "image/input": pixels.view(ImageBatch),
            "image/ground_truth": colorize_overlay(pixels, labels, **overlay).view(ImageBatch),
            "image/prediction": colorize_overlay(pixels, predictions, **overlay).view(ImageBatch),
        }

    def build_serving_module(self, model: nn.Module) -> Serving:
        """uint8 ``images [B, H, W, 3]`` -> ``masks`` and ``scores [B, H, W]`` (see
        ``SegmenterServing``), at ``validation_data.output_size`` (else the generated
        data's size)."""
        config = self.task_config
        size = first_validation_data(config).output_size or [config.generated_data.image_size] * 2
        images = torch.randint(0, 256, (2, *size, 3), dtype=torch.uint8,
                               generator=torch.Generator().manual_seed(0))
        module = SegmenterServing(self, model, config.image_mean, config.image_std)
        return Serving(module=module, example_inputs=(images,), input_names=("images",),
                       metadata={"image_size": [*size, 3],
                                 "num_classes": config.model.num_classes,
                                 "input": "uint8 RGB images [batch, height, width, 3], 0..255"})
