"""Model Garden's semantic-segmentation experiments (DeepLabV3 / V3+), by Model Garden's names.

``seg_deeplabv3plus_cityscapes``, ``mnv2_deeplabv3_cityscapes``,
``mnv2_deeplabv3plus_cityscapes``, ``seg_deeplabv3_pascal``, ``seg_deeplabv3plus_pascal``,
``seg_resnetfpn_pascal`` and ``mnv2_deeplabv3_pascal`` with Model Garden's model, loss, data (TFRecord shards under
``cityscapes/`` or ``pascal_voc_seg/``), trainer, optimizer and schedule, so a Model Garden
YAML written against one of them means here what it means there::

    torchgarden train --experiment seg_deeplabv3plus_cityscapes \\
        --config_file deeplabv3plus_resnet101_cityscapes_gpu.yaml

Model Garden starts these from checkpoints on Cloud Storage; nothing is downloaded here:
set ``task.init_checkpoint`` (or ``task.model.backbone.pretrained_path``) to a local file,
or the model starts from random weights. Where the experiment needs what is not built (the
PASCAL ones evaluate on original-size masks, ``resize_eval_groundtruth: false``;
``mnv2_deeplabv3plus_cityscapes`` fuses MobileNet's intermediate endpoints), it is
registered all the same and validation refuses it in one line naming the key.

This module is torch-free.
"""

from __future__ import annotations

from typing import Any

from torchgarden.config import ExperimentConfig, OptimizationConfig, RuntimeConfig, TrainerConfig
from torchgarden.experiments.semantic_segmentation import SemanticSegmentationConfig
from torchgarden.registry import register_experiment

__all__ = ["deeplab_experiment"]

CITYSCAPES_TRAIN_EXAMPLES, CITYSCAPES_VAL_EXAMPLES = 2975, 500
PASCAL_TRAIN_EXAMPLES, PASCAL_VAL_EXAMPLES = 10582, 1449

_DILATED_RESNET_101 = {"type": "dilated_resnet", "dilated_resnet": {
    "model_id": 101, "output_stride": 16, "stem_type": "v1", "multigrid": [1, 2, 4]}}
_MOBILENET_V2 = {"type": "mobilenet", "mobilenet": {"model_id": "MobileNetV2",
                                                   "output_stride": 16}}
_DEEPLABV3PLUS_HEAD = {"level": 4, "num_convs": 2, "feature_fusion": "deeplabv3plus",
                       "low_level": 2, "low_level_num_filters": 48}
_CITYSCAPES = {"train": ("cityscapes/train_fine**", CITYSCAPES_TRAIN_EXAMPLES),
               "validation": ("cityscapes/val_fine*", CITYSCAPES_VAL_EXAMPLES),
               "num_classes": 19}
_PASCAL = {"train": ("pascal_voc_seg/train_aug*", PASCAL_TRAIN_EXAMPLES),
           "validation": ("pascal_voc_seg/val*", PASCAL_VAL_EXAMPLES), "num_classes": 21}


def deeplab_experiment(*, dataset: dict[str, Any], model: dict[str, Any], l2: float,
                       learning_rate: float, train_steps: int | None = None,
                       epochs: int = 0, batch_size: int = 16, eval_batch_size: int = 16,
                       best_checkpoint: bool = False) -> ExperimentConfig:
    """A segmentation experiment as Model Garden's ``semantic_segmentation.py`` writes them.

    Args:
        dataset: `_CITYSCAPES` (1024x2048 resized, 512x1024 crops) or `_PASCAL` (512x512,
            masks evaluated at their original size).
        model: ``task.model`` overrides (backbone, decoder, head, norm_activation).
        l2: ``task.losses.l2_weight_decay``.
        learning_rate: SGD's initial rate, polynomial decay (power 0.9) to 0.
        train_steps: Training steps; else ``epochs`` epochs.
        epochs: Training epochs when ``train_steps`` is None.
        batch_size, eval_batch_size: Global batch sizes. Default to 16.
        best_checkpoint: Keep the best ``mean_iou`` checkpoint under ``best_ckpt``.
    """
    train_path, train_examples = dataset["train"]
    val_path, val_examples = dataset["validation"]
    steps_per_epoch = train_examples // batch_size
    train_steps = train_steps or epochs * steps_per_epoch
    cityscapes = dataset is _CITYSCAPES
    size = [1024, 2048] if cityscapes else [512, 512]
    eval_gt = {"resize_eval_groundtruth": True} if cityscapes else {
        "resize_eval_groundtruth": False, "groundtruth_padded_size": [512, 512]}
    task = SemanticSegmentationConfig()
    task.override({
        "model": {"num_classes": dataset["num_classes"], "input_size": [None, None, 3],
                  **model},
        "losses": {"l2_weight_decay": l2},
        "train_data": {"source": "tfrecord", "input_path": train_path, "is_training": True,
                       "global_batch_size": batch_size, "output_size": size,
                       "crop_size": [512, 1024] if cityscapes else [],
                       "aug_scale_min": 0.5, "aug_scale_max": 2.0},
        "validation_data": {"source": "tfrecord", "input_path": val_path,
                            "is_training": False, "global_batch_size": eval_batch_size,
                            "output_size": size, "drop_remainder": False, **eval_gt}})
    best = {"best_checkpoint_eval_metric": "mean_iou", "best_checkpoint_export_subdir":
            "best_ckpt", "best_checkpoint_metric_comp": "higher"} if best_checkpoint else {}
    trainer = TrainerConfig(
        train_steps=train_steps, validation_steps=val_examples // eval_batch_size,
        validation_interval=steps_per_epoch, steps_per_loop=steps_per_epoch,
        summary_interval=steps_per_epoch, checkpoint_interval=steps_per_epoch,
        optimizer_config=OptimizationConfig.from_dict({
            "optimizer": {"type": "sgd", "sgd": {"momentum": 0.9}},
            "learning_rate": {"type": "polynomial", "polynomial": {
                "initial_learning_rate": learning_rate, "decay_steps": train_steps,
                "end_learning_rate": 0.0, "power": 0.9}},
            "warmup": {"type": "linear", "linear": {
                "warmup_steps": 5 * steps_per_epoch, "warmup_learning_rate": 0}}}))
    trainer.override(best)
    return ExperimentConfig(task=task, trainer=trainer, runtime=RuntimeConfig())


def _resnet_model(head: dict[str, Any], rates: list[int], *, pool: list[int] | None = None,
                  momentum: float = 0.9997) -> dict[str, Any]:
    return {"backbone": _DILATED_RESNET_101,
            "decoder": {"type": "aspp", "aspp": {"level": 4, "dilation_rates": rates,
                                                 "pool_kernel_size": pool}},
            "head": head, "norm_activation": {"activation": "swish", "norm_momentum": momentum,
                                              "norm_epsilon": 1e-3, "use_sync_bn": True}}


def _mobilenet_model(pool: list[int]) -> dict[str, Any]:
    return {"backbone": _MOBILENET_V2,
            "decoder": {"type": "aspp", "aspp": {"level": 4, "dilation_rates": [],
                                                 "pool_kernel_size": pool}},
            "head": {"level": 4, "num_convs": 0},
            "norm_activation": {"activation": "relu", "norm_momentum": 0.99,
                                "norm_epsilon": 1e-3, "use_sync_bn": True}}


@register_experiment("seg_deeplabv3plus_cityscapes")
def seg_deeplabv3plus_cityscapes() -> ExperimentConfig:
    """DeepLabV3+ on a dilated ResNet-101 (output stride 16, v1 stem, multigrid [1, 2, 4]),
    ASPP [6, 12, 18], Cityscapes 512x1024 crops, 500 epochs."""
    return deeplab_experiment(
        dataset=_CITYSCAPES, l2=1e-4, learning_rate=0.01, epochs=500,
        model=_resnet_model(_DEEPLABV3PLUS_HEAD, [6, 12, 18], pool=[512, 1024],
                            momentum=0.99))


@register_experiment("mnv2_deeplabv3_cityscapes")
def mnv2_deeplabv3_cityscapes() -> ExperimentConfig:
    """DeepLabV3 on MobileNetV2 (output stride 16), Cityscapes, 100k steps."""
    return deeplab_experiment(dataset=_CITYSCAPES, model=_mobilenet_model([512, 1024]),
                              l2=4e-5, learning_rate=0.01, train_steps=100000,
                              best_checkpoint=True)


@register_experiment("mnv2_deeplabv3plus_cityscapes")
def mnv2_deeplabv3plus_cityscapes() -> ExperimentConfig:
    """`mnv2_deeplabv3_cityscapes` with a DeepLabV3+ head on MobileNetV2's intermediate
    endpoints; refused at validation (``output_intermediate_endpoints`` is not built)."""
    config = mnv2_deeplabv3_cityscapes()
    config.override({"task": {"model": {
        "head": {**_DEEPLABV3PLUS_HEAD, "use_depthwise_convolution": True},
        "backbone": {"mobilenet": {"output_intermediate_endpoints": True}}}}})
    return config


@register_experiment("seg_deeplabv3_pascal")
def seg_deeplabv3_pascal() -> ExperimentConfig:
    """DeepLabV3 on a dilated ResNet-101, ASPP [12, 24, 36], PASCAL VOC, 45 epochs; refused
    at validation (original-size evaluation masks are not provided)."""
    return deeplab_experiment(dataset=_PASCAL, l2=1e-4, learning_rate=0.007, epochs=45,
                              eval_batch_size=8,
                              model=_resnet_model({"level": 4, "num_convs": 0}, [12, 24, 36]))


@register_experiment("seg_deeplabv3plus_pascal")
def seg_deeplabv3plus_pascal() -> ExperimentConfig:
    """DeepLabV3+ on a dilated ResNet-101, ASPP [6, 12, 18], PASCAL VOC, 45 epochs; refused
    at validation (original-size evaluation masks are not provided)."""
    return deeplab_experiment(dataset=_PASCAL, l2=1e-4, learning_rate=0.007, epochs=45,
                              eval_batch_size=8,
                              model=_resnet_model(_DEEPLABV3PLUS_HEAD, [6, 12, 18]))


@register_experiment("mnv2_deeplabv3_pascal")
def mnv2_deeplabv3_pascal() -> ExperimentConfig:
    """DeepLabV3 on MobileNetV2, PASCAL VOC, 30k steps; refused at validation
    (original-size evaluation masks are not provided)."""
    return deeplab_experiment(dataset=_PASCAL, model=_mobilenet_model([]), l2=4e-5,
                              learning_rate=0.007, train_steps=30000, best_checkpoint=True)


@register_experiment("seg_resnetfpn_pascal")
def seg_resnetfpn_pascal() -> ExperimentConfig:
    """A ResNet-50 FPN (levels 3-7) with a 3-conv head at level 3, PASCAL VOC at 512x512,
    450 epochs; refused at validation: its training split sets no ``output_size`` to
    scale-crop to, and evaluates on original-size masks."""
    config = deeplab_experiment(
        dataset=_PASCAL, l2=1e-4, learning_rate=0.007, epochs=450, batch_size=256,
        eval_batch_size=32, model={
            "input_size": [512, 512, 3], "min_level": 3, "max_level": 7,
            "backbone": {"type": "resnet", "resnet": {"model_id": 50}},
            "decoder": {"type": "fpn"}, "head": {"level": 3, "num_convs": 3},
            "norm_activation": {"activation": "swish", "use_sync_bn": True}})
    config.override({"task": {"train_data": {"output_size": [], "aug_scale_min": 0.2,
                                             "aug_scale_max": 1.5},
                              "validation_data": {"output_size": []}}})
    return config
