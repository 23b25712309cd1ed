"""Model Garden's ImageNet classification experiments, by Model Garden's names.

``resnet_imagenet``, ``resnet_rs_imagenet``, ``revnet_imagenet``, ``mobilenet_imagenet``,
``deit_imagenet_pretrain``, ``vit_imagenet_pretrain`` and ``vit_imagenet_finetune`` with
Model Garden's model, losses, data paths (TFRecord shards under
``imagenet-2012-tfrecord/``), trainer, optimizer and schedule, so a Model Garden YAML
written against one of them means here what it means there::

    torchgarden train --experiment resnet_imagenet --config_file imagenet_resnet50_gpu.yaml

Where the model needs what no installed library builds (RevNet), the experiment is
registered all the same and validation refuses it in one line naming the key.

This module is torch-free.
"""

from __future__ import annotations

from typing import Any

from torchgarden.config import ExperimentConfig, OptimizationConfig, RuntimeConfig, TrainerConfig
from torchgarden.experiments.image_classification import (
    ImageClassificationConfig,
    ImageClassificationDataConfig,
)
from torchgarden.registry import register_experiment

__all__ = ["IMAGENET_TRAIN_EXAMPLES", "IMAGENET_VAL_EXAMPLES", "imagenet_experiment"]

IMAGENET_TRAIN_EXAMPLES = 1281167
IMAGENET_VAL_EXAMPLES = 50000
_INPUT_PATH_BASE = "imagenet-2012-tfrecord"


def _warmup(steps: int) -> dict[str, Any]:
    return {"type": "linear", "linear": {"warmup_steps": steps, "warmup_learning_rate": 0.0}}


def imagenet_experiment(*, model: dict[str, Any], losses: dict[str, Any], epochs: int,
                        optimization: dict[str, Any], batch_size: int = 4096,
                        train_steps: int | None = None) -> ExperimentConfig:
    """An ImageNet experiment as Model Garden's ``image_classification.py`` writes them:
    1001 classes, 224x224x3 unless ``model`` says otherwise, TFRecord data, a checkpoint,
    summary and evaluation every epoch.

    Args:
        model: ``task.model`` overrides (backbone, dropout, ...).
        losses: ``task.losses`` overrides.
        epochs: Training epochs (``train_steps`` = epochs * steps per epoch).
        optimization: ``trainer.optimizer_config`` as Model Garden spells it.
        batch_size: Global batch size of both splits. Defaults to 4096.
        train_steps: Overrides ``epochs`` when given. Defaults to None.
    """
    steps_per_epoch = IMAGENET_TRAIN_EXAMPLES // batch_size
    task = ImageClassificationConfig(
        train_data=ImageClassificationDataConfig(
            source="tfrecord", input_path=f"{_INPUT_PATH_BASE}/train*", is_training=True,
            global_batch_size=batch_size),
        validation_data=ImageClassificationDataConfig(
            source="tfrecord", input_path=f"{_INPUT_PATH_BASE}/valid*", is_training=False,
            global_batch_size=batch_size))
    task.override({"model": {"num_classes": 1001, "input_size": [224, 224, 3], **model},
                   "losses": losses})
    return ExperimentConfig(
        task=task,
        trainer=TrainerConfig(
            steps_per_loop=steps_per_epoch, summary_interval=steps_per_epoch,
            checkpoint_interval=steps_per_epoch, validation_interval=steps_per_epoch,
            train_steps=train_steps or epochs * steps_per_epoch,
            validation_steps=IMAGENET_VAL_EXAMPLES // batch_size,
            optimizer_config=OptimizationConfig.from_dict(optimization)),
        runtime=RuntimeConfig())


def _resnet_norm() -> dict[str, Any]:
    return {"norm_momentum": 0.9, "norm_epsilon": 1e-5, "use_sync_bn": False}


def _stepwise(batch_size: int, values: list[float]) -> dict[str, Any]:
    steps_per_epoch = IMAGENET_TRAIN_EXAMPLES // batch_size
    return {
        "optimizer": {"type": "sgd", "sgd": {"momentum": 0.9}},
        "learning_rate": {"type": "stepwise", "stepwise": {
            "boundaries": [30 * steps_per_epoch, 60 * steps_per_epoch, 80 * steps_per_epoch],
            "values": values}},
        "warmup": _warmup(5 * steps_per_epoch)}


@register_experiment("resnet_imagenet")
def resnet_imagenet() -> ExperimentConfig:
    """ResNet-50 on ImageNet: SGD momentum 0.9, stepwise 0.1*B/256 decayed x0.1 at epochs
    30/60/80, 5 warmup epochs, 90 epochs, L2 1e-4 (Model Garden's ``resnet_imagenet``)."""
    scale = 4096 / 256
    config = imagenet_experiment(
        model={"backbone": {"type": "resnet", "resnet": {"model_id": 50}},
               "norm_activation": _resnet_norm()},
        losses={"l2_weight_decay": 1e-4}, epochs=90,
        optimization=_stepwise(4096, [0.1 * scale, 0.01 * scale, 0.001 * scale,
                                      0.0001 * scale]))
    config.runtime.enable_xla = True
    return config


@register_experiment("resnet_rs_imagenet")
def resnet_rs_imagenet() -> ExperimentConfig:
    """ResNet-RS-50 at 160x160 (Model Garden's ``resnet_rs_imagenet``): the ResNet-D stem and
    shortcuts, squeeze-and-excitation blocks and stochastic depth on transformers' ResNet."""
    steps_per_epoch = IMAGENET_TRAIN_EXAMPLES // 4096
    return imagenet_experiment(
        model={"input_size": [160, 160, 3], "dropout_rate": 0.25,
               "backbone": {"type": "resnet", "resnet": {
                   "model_id": 50, "stem_type": "v1", "resnetd_shortcut": True,
                   "replace_stem_max_pool": True, "se_ratio": 0.25}},
               "norm_activation": {"norm_momentum": 0.0, "norm_epsilon": 1e-5,
                                   "use_sync_bn": False, "activation": "swish"}},
        losses={"l2_weight_decay": 4e-5, "label_smoothing": 0.1}, epochs=350,
        optimization={
            "optimizer": {"type": "sgd", "sgd": {"momentum": 0.9}},
            "ema": {"average_decay": 0.9999, "trainable_weights_only": False},
            "learning_rate": {"type": "cosine", "cosine": {
                "initial_learning_rate": 1.6, "decay_steps": 350 * steps_per_epoch}},
            "warmup": _warmup(5 * steps_per_epoch)})


@register_experiment("revnet_imagenet")
def revnet_imagenet() -> ExperimentConfig:
    """RevNet-56 (Model Garden's ``revnet_imagenet``); refused at validation: no installed
    library builds a RevNet."""
    return imagenet_experiment(
        model={"backbone": {"type": "revnet", "revnet": {"model_id": 56}},
               "norm_activation": _resnet_norm(), "add_head_batch_norm": True},
        losses={"l2_weight_decay": 1e-4}, epochs=90,
        optimization=_stepwise(4096, [0.8, 0.08, 0.008, 0.0008]))


@register_experiment("mobilenet_imagenet")
def mobilenet_imagenet() -> ExperimentConfig:
    """MobileNetV2 1.0 (Model Garden's ``mobilenet_imagenet``): RMSprop, exponential decay
    x0.98 every 2.5 epochs from 0.008*B/128, 5 warmup epochs, 500 epochs."""
    steps_per_epoch = IMAGENET_TRAIN_EXAMPLES // 4096
    return imagenet_experiment(
        model={"dropout_rate": 0.2,
               "backbone": {"type": "mobilenet", "mobilenet": {
                   "model_id": "MobileNetV2", "filter_size_scale": 1.0}},
               "norm_activation": {"norm_momentum": 0.997, "norm_epsilon": 1e-3,
                                   "use_sync_bn": False}},
        losses={"l2_weight_decay": 1e-5, "label_smoothing": 0.1}, epochs=500,
        optimization={
            "optimizer": {"type": "rmsprop", "rmsprop": {
                "rho": 0.9, "momentum": 0.9, "epsilon": 0.002}},
            "learning_rate": {"type": "exponential", "exponential": {
                "initial_learning_rate": 0.008 * (4096 // 128),
                "decay_steps": int(2.5 * steps_per_epoch), "decay_rate": 0.98,
                "staircase": True}},
            "warmup": _warmup(5 * steps_per_epoch)})


def _vit(*, representation_size: int, weight_decay: float, learning_rate: float,
         warmup_steps: int, **vit: Any) -> dict[str, Any]:
    """The ``model`` and ``optimization`` of Model Garden's ViT pre-training experiments."""
    steps_per_epoch = IMAGENET_TRAIN_EXAMPLES // 4096
    return {
        "model": {"kernel_initializer": "zeros", "backbone": {"type": "vit", "vit": {
            "model_name": "vit-b16", "representation_size": representation_size, **vit}}},
        "optimization": {
            "optimizer": {"type": "adamw", "adamw": {
                "weight_decay_rate": weight_decay,
                "include_in_weight_decay": [r".*(kernel|weight):0$"],
                "gradient_clip_norm": 0.0}},
            "learning_rate": {"type": "cosine", "cosine": {
                "initial_learning_rate": learning_rate, "decay_steps": 300 * steps_per_epoch}},
            "warmup": _warmup(warmup_steps)}}


@register_experiment("deit_imagenet_pretrain")
def deit_imagenet_pretrain() -> ExperimentConfig:
    """DeiT-style ViT-B/16 pre-training (Model Garden's ``deit_imagenet_pretrain``): stochastic
    depth 0.1, AdamW, weight decay 0.05, cosine from 0.0005*B/512, label smoothing 0.1 on
    soft labels (mixup/cutmix come with the data config)."""
    parts = _vit(representation_size=768, weight_decay=0.05,
                 learning_rate=0.0005 * 4096 / 512,
                 warmup_steps=5 * (IMAGENET_TRAIN_EXAMPLES // 4096),
                 init_stochastic_depth_rate=0.1, original_init=False,
                 transformer={"dropout_rate": 0.0, "attention_dropout_rate": 0.0})
    return imagenet_experiment(
        model=parts["model"], epochs=300, optimization=parts["optimization"],
        losses={"l2_weight_decay": 0.0, "label_smoothing": 0.1, "one_hot": False,
                "soft_labels": True})


@register_experiment("vit_imagenet_pretrain")
def vit_imagenet_pretrain() -> ExperimentConfig:
    """ViT-B/16 pre-training (Model Garden's ``vit_imagenet_pretrain``): AdamW, weight decay
    0.3, cosine from 0.003 over 300 epochs, 10000 warmup steps."""
    parts = _vit(representation_size=768, weight_decay=0.3, learning_rate=0.003,
                 warmup_steps=10000)
    return imagenet_experiment(model=parts["model"], losses={"l2_weight_decay": 0.0},
                               epochs=300, optimization=parts["optimization"])


@register_experiment("vit_imagenet_finetune")
def vit_imagenet_finetune() -> ExperimentConfig:
    """ViT-B/16 fine-tuning at 384x384 (Model Garden's ``vit_imagenet_finetune``): SGD
    momentum 0.9, global clip norm 1.0, cosine from 0.003 over 20000 steps, batch 512."""
    return imagenet_experiment(
        model={"input_size": [384, 384, 3],
               "backbone": {"type": "vit", "vit": {"model_name": "vit-b16"}}},
        losses={"l2_weight_decay": 0.0}, epochs=0, batch_size=512, train_steps=20000,
        optimization={
            "optimizer": {"type": "sgd", "sgd": {"momentum": 0.9, "global_clipnorm": 1.0}},
            "learning_rate": {"type": "cosine", "cosine": {
                "initial_learning_rate": 0.003, "decay_steps": 20000}}})
