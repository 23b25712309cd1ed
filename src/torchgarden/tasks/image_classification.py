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


def chw(input_size: Sequence[int]) -> tuple[int, int, int]:
    """``(channels, height, width)`` of Model Garden's ``[height, width, channels]``."""
    height, width, channels = (int(v) for v in input_size)
    return channels, height, width


def build_classifier(config: ImageClassificationModelConfig) -> nn.Module:
    """The classifier ``task.model`` describes, for ``[B, C, H, W]`` images.

    A library classifier when ``config.name`` is set; else Model Garden's classification
    model on the ``backbone`` one-of: a transformers backbone (`torchgarden.models.garden`)
    or the built-in ``mlp`` / ``cnn``, then dropout and a dense layer whose kernel starts
    as ``kernel_initializer`` says.
    """
    if config.name:
        return models.build_image_classifier(
            config.name, num_classes=config.num_classes, input_size=chw(config.input_size),
            settings=config.library_config, pretrained_path=config.pretrained_path,
            ignore_mismatched_sizes=config.ignore_mismatched_sizes)
    if config.backbone.type not in ("mlp", "cnn"):
        from torchgarden.models import garden

        backbone = garden.build_garden_backbone(config.backbone, config.norm_activation,
                                                input_size=config.input_size)
        return garden.GardenClassifier(
            backbone, num_classes=config.num_classes, dropout_rate=config.dropout_rate,
            kernel_initializer=config.kernel_initializer,
            add_head_batch_norm=config.add_head_batch_norm,
            norm_activation=config.norm_activation)
    layers, width_in = _builtin_layers(config)
    if config.dropout_rate:
        layers.append(nn.Dropout(config.dropout_rate))
    head = nn.Linear(width_in, config.num_classes)
    _init_head(head, config.kernel_initializer)
    return nn.Sequential(*layers, head)


def _builtin_layers(config: ImageClassificationModelConfig) -> tuple[list[nn.Module], int]:
    """The ``mlp`` or ``cnn`` layers before the head, and their output width."""
    channels, height, width = chw(config.input_size)
    layers: list[nn.Module] = []
    if config.backbone.type == "mlp":
        layers.append(nn.Flatten())
        width_in = channels * height * width
        for hidden in config.hidden_sizes:
            layers += [nn.Linear(width_in, hidden), nn.ReLU()]
            width_in = hidden
        return layers, width_in
    c_in = channels
    for c_out in config.hidden_sizes:
        layers += [nn.Conv2d(c_in, c_out, 3, padding=1), nn.BatchNorm2d(c_out), nn.ReLU()]
        if min(height, width) >= 4:
            layers.append(nn.MaxPool2d(2))
            height, width = height // 2, width // 2
        c_in = c_out
    return [*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten()], c_in


def _init_head(head: nn.Linear, kernel_initializer: str) -> None:
    from torchgarden.models.garden import KERNEL_INITIALIZERS

    KERNEL_INITIALIZERS[kernel_initializer](head.weight)
    nn.init.zeros_(head.bias)


@register_task(ImageClassificationConfig)
class ImageClassificationTask(Task):
    """Cross-entropy classification with accuracy and top-k accuracy metrics."""

    task_config: ImageClassificationConfig

    def build_model(self) -> nn.Module:
        model = build_classifier(self.task_config.model)
        # Conv and dense kernels carry l2_weight_decay, as Model Garden's kernel_regularizer
        # (biases, norms, embeddings and tokens do not).
        self._l2_weights = [m.weight for m in model.modules()
                            if isinstance(m, nn.Linear | nn.Conv2d)]
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
                channels, height, width = chw(self.task_config.model.input_size)
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
        if tuple(x.shape[1:]) != chw(model_cfg.input_size):
            channels, height, width = x.shape[1:]
            raise ValueError(
                f"{where}: images have shape [channels, height, width] {list(x.shape[1:])} but "
                f"task.model.input_size is {list(model_cfg.input_size)} ([height, width, "
                f"channels]); set task.model.input_size=[{height}, {width}, {channels}]."
            )
        validation.check_features(x.numpy(), where)
        labels = validation.check_class_labels(y.numpy(), len(x), model_cfg.num_classes, where)
        return x.float(), torch.from_numpy(labels)

    def build_inputs(
        self, params: ImageClassificationDataConfig, input_context: Any = None
    ) -> Any:
        if params.source in ("datasets", "webdataset"):
            return self._hugging_face_inputs(params, input_context)
        if params.source == "tfrecord":
            from torchgarden.data.tfrecord_input import build_tfrecord_loader
            from torchgarden.vision.classification_input import ClassificationRecord

            record = ClassificationRecord.from_config(params, self.task_config.model)
            mixup = self._augmenting(params.replace(aug_type=None, color_jitter=0.0,
                                                    random_erasing=None, dtype="float32"), None)
            return build_tfrecord_loader(params, record, input_context=input_context,
                                         collate_fn=mixup)  # per-image steps: in the parser
        try:
            x, y = self._load_arrays(params)
        except FileNotFoundError as e:
            split = "train_data" if params.is_training else "validation_data"
            raise FileNotFoundError(
                f"{e} Set task.{split}.input_path to an existing {params.source} path."
            ) from e
        return data.build_dataloader(
            data.ArrayDataset(x, y), params, input_context=input_context,
            collate_fn=self._augmenting(params, None),
        )

    def _augmenting(self, params: ImageClassificationDataConfig,
                    collate: Any) -> Any:
        """``collate`` (None: the default) wrapped in the split's augmentation and mixing
        (`torchgarden.vision.classification_augment`); ``collate`` itself when none is on."""
        if not (params.augments_images() or params.mixup_and_cutmix or params.dtype != "float32"):
            return collate  # nothing to import for a plain run
        from torchgarden.vision import classification_augment as aug

        augmenter = aug.build_augmenter(params)
        mixup = aug.build_mixup(params, self.task_config.model.num_classes)
        if augmenter is None and mixup is None:
            return collate
        where = params.input_path or params.source
        return aug.BatchAugment(collate or torch.utils.data.default_collate,
                                augmenter=augmenter, mixup=mixup, where=str(where))

    def _hugging_face_inputs(self, params: ImageClassificationDataConfig, input_context: Any) -> Any:
        """A Hugging Face ``save_to_disk`` dataset (by index or streamed) or WebDataset shards."""
        from torchgarden.data import hf

        split = "train_data" if params.is_training else "validation_data"
        paths = validation.expand_input_paths(params.input_path, f"task.{split}.input_path")
        columns = hf.ColumnBatch(params.x_key, params.y_key,
                                 chw(self.task_config.model.input_size))
        if params.source == "webdataset":
            stream = hf.stream_webdataset(paths, skip_bad=params.skip_bad_records)
        elif params.streaming:
            stream = hf.stream_arrow(paths[0])
        else:
            dataset = hf.ArrowColumns(hf.load_arrow(paths[0]), columns)
            self._checked(*(t.unsqueeze(0) for t in dataset[0]), paths[0])
            loader = data.build_dataloader(dataset, params, input_context=input_context,
                                           collate_fn=self._augmenting(params, None))
            loader.data_fingerprint = f"{paths[0]}@{dataset.data_fingerprint}"
            return loader
        self._checked(*columns([next(iter(stream))]), paths[0])
        loader = data.build_dataloader(stream, params, input_context=input_context,
                                       collate_fn=self._augmenting(params, columns))
        if hasattr(stream, "data_fingerprint"):  # Resumed only on the same data (DataIterator).
            loader.data_fingerprint = f"{paths[0]}@{stream.data_fingerprint}"
        return loader

    def split_inputs(self, inputs: Any) -> tuple[Any, Any]:
        """``(images, labels)``; bfloat16/float16 images (``dtype``) reach the model as
        float32, as Keras layers cast their inputs (autocast runs the mixed precision)."""
        features, labels = super().split_inputs(inputs)
        if isinstance(features, torch.Tensor) and features.dtype in (torch.bfloat16,
                                                                     torch.float16):
            features = features.float()
        return features, labels

    def build_losses(
        self, labels: torch.Tensor, model_outputs: torch.Tensor,
        aux_losses: Sequence[torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """Model Garden's classification loss: one-hot cross-entropy with label smoothing
        (``one_hot``), cross-entropy on label distributions (``soft_labels``, or the
        mixup_and_cutmix labels, already smoothed: no second smoothing) or sparse
        cross-entropy; plus the L2 penalty and ``aux_losses``; times ``loss_weight``."""
        losses = self.task_config.losses
        soft = labels.dim() == 2 and labels.is_floating_point()
        smoothing = losses.label_smoothing if losses.one_hot and not soft else 0.0
        loss = F.cross_entropy(model_outputs.float() if soft else model_outputs, labels,
                               label_smoothing=smoothing)
        if losses.l2_weight_decay:
            # Keras l2(l2_weight_decay / 2) on every kernel: l2/2 * sum(w**2).
            penalty = torch.stack([p.square().sum() for p in self._l2_weights]).sum()
            loss = loss + losses.l2_weight_decay * 0.5 * penalty
        if aux_losses:
            loss = loss + torch.stack([a.float() for a in aux_losses]).sum()
        return loss * losses.loss_weight

    def process_metrics(self, metrics: Sequence[Any], labels: Any, model_outputs: Any,
                        **kwargs: Any) -> None:
        """Soft labels count as their argmax class (Keras' CategoricalAccuracy)."""
        if isinstance(labels, torch.Tensor) and labels.dim() == 2 and labels.is_floating_point():
            labels = labels.argmax(dim=1)
        super().process_metrics(metrics, labels, model_outputs, **kwargs)

    def build_metrics(self, training: bool = True) -> list[Any]:
        k = self.task_config.evaluation.top_k
        built: list[Any] = [metrics.SparseCategoricalAccuracy(name="accuracy")]
        if not training and 0 < k < self.task_config.model.num_classes:
            built.append(metrics.TopKAccuracy(k=k, name=f"top_{k}_accuracy"))
        return built

    def build_serving_module(self, model: nn.Module) -> Serving:
        """uint8 ``images [B, H, W, C]`` -> ``probabilities``, ``top_k_scores``,
        ``top_k_classes`` (see ``ClassifierServing``); ``metadata["labels"]`` names the
        classes (folder names for ``source: folder``)."""
        cfg = self.task_config
        height, width, channels = cfg.model.input_size
        num_classes = cfg.model.num_classes
        k = cfg.evaluation.top_k
        top_k = k if 0 < k <= num_classes else min(5, num_classes)
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
