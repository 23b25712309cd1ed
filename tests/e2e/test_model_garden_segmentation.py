"""A Model Garden segmentation YAML (deeplabv3plus_resnet101_cityscapes_gpu.yaml as published)
is accepted whole, and with small sizes it trains DeepLabV3+ on a dilated transformers ResNet
with squeeze-and-excitation blocks for 2 steps on TFRecord shards in Model Garden's
segmentation schema."""

from __future__ import annotations

import json
import os

import pytest
import yaml

from torchgarden.cli.main import main
from torchgarden.config import ExperimentConfig
from torchgarden.data.tfrecord_samples import write_segmentation_shards

pytest.importorskip("transformers")

MG_YAML = """\
runtime:
  all_reduce_alg: nccl
  distribution_strategy: mirrored
  mixed_precision_dtype: float16
task:
  init_checkpoint: null
  model:
    num_classes: 19
    input_size: [null, null, 3]
    backbone:
      type: 'dilated_resnet'
      dilated_resnet:
        model_id: 101
        output_stride: 16
        stem_type: 'v1'
        se_ratio: 0.25
        stochastic_depth_drop_rate: 0.2
        multigrid: [1, 2, 4]
        last_stage_repeats: 1
    decoder:
      aspp:
        pool_kernel_size: [512, 1024]
    head:
      feature_fusion: 'deeplabv3plus'
      low_level: 2
      low_level_num_filters: 48
    norm_activation:
      activation: 'swish'
      norm_epsilon: 0.001
      norm_momentum: 0.99
      use_sync_bn: true
  losses:
    top_k_percent_pixels: 1.0
  train_data:
    output_size: [1024, 2048]
    crop_size: [512, 1024]
    is_training: true
    global_batch_size: 16
    dtype: 'float16'
    aug_rand_hflip: true
    aug_scale_max: 2.0
    aug_scale_min: 0.5
  validation_data:
    output_size: [1024, 2048]
    is_training: false
    global_batch_size: 16
    dtype: 'float16'
    drop_remainder: false
    resize_eval_groundtruth: true
trainer:
  best_checkpoint_eval_metric: 'mean_iou'
  best_checkpoint_export_subdir: 'best_ckpt'
  best_checkpoint_metric_comp: 'higher'
  optimizer_config:
    learning_rate:
      polynomial:
        decay_steps: 90000
        initial_learning_rate: 0.01
        power: 0.9
      type: polynomial
    optimizer:
      sgd:
        momentum: 0.9
      type: sgd
    warmup:
      linear:
        name: linear
        warmup_learning_rate: 0
        warmup_steps: 925
      type: linear
  steps_per_loop: 185
  summary_interval: 185
  train_steps: 90000
  validation_interval: 185
  validation_steps: 31
  checkpoint_interval: 185
"""

EXPERIMENT = "seg_deeplabv3plus_cityscapes"


@pytest.fixture
def mg_yaml(tmp_path):
    path = tmp_path / "deeplabv3plus_resnet101_cityscapes_gpu.yaml"
    path.write_text(MG_YAML)
    return str(path)


def test_the_yaml_is_accepted_whole_with_model_gardens_meaning(mg_yaml, capsys):
    assert main(["config", "--experiment", EXPERIMENT, "--config_file", mg_yaml]) == 0
    task = yaml.safe_load(capsys.readouterr().out)["task"]
    model = task["model"]
    assert model["input_size"] == [None, None, 3]
    assert model["backbone"]["dilated_resnet"]["multigrid"] == [1, 2, 4]
    assert model["backbone"]["dilated_resnet"]["se_ratio"] == 0.25
    # From the registered experiment, as in Model Garden: ASPP and head at level 4.
    assert model["decoder"]["type"] == "aspp" and model["decoder"]["aspp"] == {
        "level": 4, "dilation_rates": [6, 12, 18], "dropout_rate": 0.0, "num_filters": 256,
        "use_depthwise_convolution": False, "pool_kernel_size": [512, 1024],
        "spp_layer_version": "v1", "output_tensor": False}
    assert model["head"]["level"] == 4 and model["head"]["feature_fusion"] == "deeplabv3plus"
    assert task["losses"]["l2_weight_decay"] == 1e-4 and task["losses"]["ignore_label"] == 255
    assert task["train_data"]["source"] == "tfrecord"
    assert task["train_data"]["crop_size"] == [512, 1024]


def test_the_yaml_trains_deeplabv3plus_on_model_garden_tfrecords(mg_yaml, tmp_path):
    data = tmp_path / "cityscapes"
    write_segmentation_shards(data, image_size=(64, 128), num_classes=19, prefix="train")
    write_segmentation_shards(data, image_size=(64, 128), num_classes=19, prefix="val",
                              num_shards=1, seed=1)
    small = ",".join([
        "task.model.backbone.dilated_resnet.model_id=50",
        "task.model.decoder.aspp.pool_kernel_size=[32,64]",
        "task.model.decoder.aspp.num_filters=16", "task.model.head.num_filters=16",
        f"task.train_data.input_path={data}/train*", "task.train_data.output_size=[64,128]",
        "task.train_data.crop_size=[32,64]", "task.train_data.global_batch_size=2",
        f"task.validation_data.input_path={data}/val*",
        "task.validation_data.output_size=[64,128]", "task.validation_data.global_batch_size=2",
        "trainer.train_steps=2", "trainer.steps_per_loop=1", "trainer.summary_interval=1",
        "trainer.checkpoint_interval=2", "trainer.validation_interval=2",
        "trainer.validation_steps=1", "trainer.progress_bar=false",
        "trainer.optimizer_config.warmup.linear.warmup_steps=1",
        "trainer.optimizer_config.learning_rate.polynomial.decay_steps=2"])
    model_dir = str(tmp_path / "run")
    code = main(["train", "--experiment", EXPERIMENT, "--mode", "train_and_eval",
                 "--model_dir", model_dir, "--config_file", mg_yaml,
                 "--params_override", small])
    assert code == 0
    params = ExperimentConfig.from_yaml(os.path.join(model_dir, "params.yaml"))
    assert params.task.model.backbone.dilated_resnet.stem_type == "v1"
    assert params.task.model.backbone.dilated_resnet.se_ratio == 0.25
    assert params.runtime.mixed_precision_dtype == "float16"  # the YAML's runtime, as it is
    with open(os.path.join(model_dir, "metrics.jsonl"), encoding="utf-8") as f:
        lines = [json.loads(line) for line in f]
    assert [line for line in lines if "mean_iou" in json.dumps(line)], lines
