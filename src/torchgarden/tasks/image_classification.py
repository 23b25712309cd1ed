"""The image-classification task: digits, ``.npz`` arrays or class-per-folder images."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from torchgarden import data, metrics, models
from torchgarden.core.serving import Serving
from torchgarden.core.task import Task, first_validation_data
from torchgarden.data import validation
from torchgarden.experiments.image_classification import (
    ImageClassificationConfig,
    ImageClassificationDataConfig,
    ImageClassificationModelConfig,
)
from torchgarden.registry import register_task
from torchgarden.tasks.serving import ClassifierServing

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
        if params.source == "digits":
            split = params.split or ("train" if params.is_training else "validation")
            x, y = data.load_digits_arrays(split)
            return self._checked(x, y, f"digits/{split}")
        split = "train_data" if params.is_training else "validation_data"
        paths = validation.expand_input_paths(params.input_path, f"task.{split}.input_path")
        xs, ys, classes = [], [], None
        for path in paths:  # Every file is read, checked and named on its own.
            if params.source == "npz":
                x, y = data.load_npz_arrays(path, x_key=params.x_key, y_key=params.y_key)
                x = x.unsqueeze(1) if x.ndim == 3 else x
            else:
                channels, height, width = self.task_config.model.input_size
                folder = data.ImageFolderDataset(
                    path, image_size=(height, width), grayscale=channels == 1
                )
                if classes is not None and folder.classes != classes:
                    raise ValueError(
                        f"{path}: class folders {folder.classes} differ from {classes} of "
                        f"{paths[0]}; every input_path folder needs the same classes."
                    )
                classes = folder.classes
                x, y = folder.to_arrays()
            x, y = self._checked(x, y, path)
            xs.append(x)
            ys.append(y)
        return (xs[0], ys[0]) if len(xs) == 1 else (torch.cat(xs), torch.cat(ys))

    def _checked(
        self, x: torch.Tensor, y: torch.Tensor, where: str
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Shape against ``task.model.input_size``, finite numbers, one class id per image."""
        model_cfg = self.task_config.model
        expected = tuple(model_cfg.input_size)
        if tuple(x.shape[1:]) != expected:
            raise ValueError(
                f"{where}: images have shape {tuple(x.shape[1:])} but task.model.input_size is "
                f"{list(expected)}; set task.model.input_size={list(x.shape[1:])}."
            )
        validation.check_features(x.numpy(), where)
        labels = validation.check_class_labels(y.numpy(), len(x), model_cfg.num_classes, where)
        return x.float(), torch.from_numpy(labels)

    def build_inputs(
        self, params: ImageClassificationDataConfig, input_context: Any = None
    ) -> Any:
        if params.source in ("datasets", "webdataset"):
            return self._hugging_face_inputs(params, input_context)
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

    def _hugging_face_inputs(self, params: ImageClassificationDataConfig, input_context: Any) -> Any:
        """A Hugging Face ``save_to_disk`` dataset (by index or streamed) or WebDataset shards."""
        from torchgarden.data import hf

        split = "train_data" if params.is_training else "validation_data"
        paths = validation.expand_input_paths(params.input_path, f"task.{split}.input_path")
        columns = hf.ColumnBatch(params.x_key, params.y_key, self.task_config.model.input_size)
        if params.source == "webdataset":
            stream = hf.stream_webdataset(paths, skip_bad=params.skip_bad_records)
        elif params.streaming:
            stream = hf.stream_arrow(paths[0])
        else:
            dataset = hf.ArrowColumns(hf.load_arrow(paths[0]), columns)
            self._checked(*(t.unsqueeze(0) for t in dataset[0]), paths[0])
            loader = data.build_dataloader(dataset, params, input_context=input_context)
            loader.data_fingerprint = f"{paths[0]}@{dataset.data_fingerprint}"
            return loader
        self._checked(*columns([next(iter(stream))]), paths[0])
        loader = data.build_dataloader(stream, params, input_context=input_context,
                                       collate_fn=columns)
        if hasattr(stream, "data_fingerprint"):  # Resumed only on the same data (DataIterator).
            loader.data_fingerprint = f"{paths[0]}@{stream.data_fingerprint}"
        return loader

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

    def build_serving_module(self, model: nn.Module) -> Serving:
        """uint8 ``images [B, H, W, C]`` -> ``probabilities``, ``top_k_scores``,
        ``top_k_classes`` (see ``ClassifierServing``); ``metadata["labels"]`` names the
        classes (folder names for ``source: folder``)."""
        cfg = self.task_config
        channels, height, width = cfg.model.input_size
        num_classes = cfg.model.num_classes
        top_k = cfg.top_k if 0 < cfg.top_k <= num_classes else min(5, num_classes)
        generator = torch.Generator().manual_seed(0)
        images = torch.randint(0, 256, (2, height, width, channels), dtype=torch.uint8,
                               generator=generator)
        return Serving(
            module=ClassifierServing(self, model, top_k=top_k),
            example_inputs=(images,),
            input_names=("images",),
            metadata={"labels": self._class_labels(), "image_size": [height, width, channels],
                      "input": "uint8 images [batch, height, width, channels], 0..255"},
        )

    def _class_labels(self) -> list[str]:
        """Folder names for ``source: folder`` (when the folder is there), else ``"0".."N-1"``."""
        data_cfg = first_validation_data(self.task_config)
        path = data_cfg.input_path if isinstance(data_cfg.input_path, str) else (
            data_cfg.input_path[0] if data_cfg.input_path else "")
        if data_cfg.source == "folder" and path and os.path.isdir(path):
            names = sorted(entry.name for entry in os.scandir(path) if entry.is_dir())
            if len(names) == self.task_config.model.num_classes:
                return names
        return [str(i) for i in range(self.task_config.model.num_classes)]
