"""The image-classification task: digits, ``.npz`` arrays or class-per-folder images."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from torchgarden import data, metrics, models
from torchgarden.core.task import Task
from torchgarden.experiments.image_classification import (
    ImageClassificationConfig,
    ImageClassificationDataConfig,
    ImageClassificationModelConfig,
)
from torchgarden.registry import register_task

__all__ = ["ImageClassificationTask", "build_classifier"]


def build_classifier(config: ImageClassificationModelConfig) -> nn.Module:
    """A library model when ``config.name`` is set, else an MLP or a small CNN, for
    ``config.input_size`` inputs and ``num_classes`` logits."""
    if config.name:
        return models.build_image_classifier(
            config.name, num_classes=config.num_classes, input_size=config.input_size,
            settings=config.library_config, pretrained_path=config.pretrained_path,
            ignore_mismatched_sizes=config.ignore_mismatched_sizes)
    channels, height, width = config.input_size
    layers: list[nn.Module] = []
    if config.architecture == "mlp":
        layers.append(nn.Flatten())
        width_in = channels * height * width
        for hidden in config.hidden_sizes:
            layers += [nn.Linear(width_in, hidden), nn.ReLU()]
            width_in = hidden
    else:
        c_in = channels
        for c_out in config.hidden_sizes:
            layers += [nn.Conv2d(c_in, c_out, 3, padding=1), nn.BatchNorm2d(c_out), nn.ReLU()]
            if min(height, width) >= 4:
                layers.append(nn.MaxPool2d(2))
                height, width = height // 2, width // 2
            c_in = c_out
        layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten()]
        width_in = c_in
    if config.dropout:
        layers.append(nn.Dropout(config.dropout))
    layers.append(nn.Linear(width_in, config.num_classes))
    return nn.Sequential(*layers)


@register_task(ImageClassificationConfig)
class ImageClassificationTask(Task):
    """Cross-entropy classification with accuracy and top-k accuracy metrics."""

    task_config: ImageClassificationConfig

    def build_model(self) -> nn.Module:
        model = build_classifier(self.task_config.model)
        # Weight matrices/kernels regularised by l2_weight_decay (biases and norms are not).
        self._l2_weights = [p for p in model.parameters() if p.ndim > 1]
        return model

    def _load_arrays(self, params: ImageClassificationDataConfig) -> tuple[torch.Tensor, torch.Tensor]:
        model_cfg = self.task_config.model
        if params.source == "digits":
            split = params.split or ("train" if params.is_training else "validation")
            x, y = data.load_digits_arrays(split)
            where = f"digits/{split}"
        elif params.source == "npz":
            path = params.input_path if isinstance(params.input_path, str) else params.input_path[0]
            x, y = data.load_npz_arrays(path, x_key=params.x_key, y_key=params.y_key)
            if x.ndim == 3:
                x = x.unsqueeze(1)
            where = path
        else:
            path = params.input_path if isinstance(params.input_path, str) else params.input_path[0]
            channels, height, width = model_cfg.input_size
            folder = data.ImageFolderDataset(
                path, image_size=(height, width), grayscale=channels == 1
            )
            x, y = folder.to_arrays()
            where = path
        expected = tuple(model_cfg.input_size)
        if tuple(x.shape[1:]) != expected:
            raise ValueError(
                f"{where}: images have shape {tuple(x.shape[1:])} but task.model.input_size is "
                f"{list(expected)}; set task.model.input_size={list(x.shape[1:])}."
            )
        if y.numel() and (int(y.min()) < 0 or int(y.max()) >= model_cfg.num_classes):
            raise ValueError(
                f"{where}: labels span [{int(y.min())}, {int(y.max())}] but "
                f"task.model.num_classes is {model_cfg.num_classes}; labels must be in "
                f"[0, {model_cfg.num_classes - 1}]."
            )
        return x.float(), y.long()

    def build_inputs(
        self, params: ImageClassificationDataConfig, input_context: Any = None
    ) -> Any:
        try:
            x, y = self._load_arrays(params)
        except FileNotFoundError as e:
            split = "train_data" if params.is_training else "validation_data"
            raise FileNotFoundError(
                f"{e} Set task.{split}.input_path to an existing {params.source} path."
            ) from e
        return data.build_dataloader(
            data.ArrayDataset(x, y), params, input_context=input_context
        )

    def build_losses(
        self, labels: torch.Tensor, model_outputs: torch.Tensor,
        aux_losses: Sequence[torch.Tensor] | None = None,
    ) -> torch.Tensor:
        config = self.task_config
        loss = F.cross_entropy(model_outputs, labels, label_smoothing=config.label_smoothing)
        if config.l2_weight_decay:
            # Model Garden's convention: tf.nn.l2_loss (sum(w**2)/2) per weight matrix.
            penalty = torch.stack([p.square().sum() for p in self._l2_weights]).sum()
            loss = loss + config.l2_weight_decay * 0.5 * penalty
        if aux_losses:
            loss = loss + torch.stack([a.float() for a in aux_losses]).sum()
        return loss

    def build_metrics(self, training: bool = True) -> list[Any]:
        k = self.task_config.top_k
        built: list[Any] = [metrics.SparseCategoricalAccuracy(name="accuracy")]
        if not training and 0 < k < self.task_config.model.num_classes:
            built.append(metrics.TopKAccuracy(k=k, name=f"top_{k}_accuracy"))
        return built
