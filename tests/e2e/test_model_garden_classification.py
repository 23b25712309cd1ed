"""A Model Garden image-classification YAML (imagenet_resnet50_gpu.yaml's shape, tiny sizes)
is accepted whole under Model Garden's experiment name, means what it means there, and
trains a transformers ResNet on the digits."""

from __future__ import annotations

import glob
import json
import os

import pytest
import yaml

from torchgarden.cli.main import main
from torchgarden.config import ExperimentConfig

pytest.importorskip("transformers")

MG_YAML = """\
task:
  model:
    num_classes: 10
    input_size: [8, 8, 1]
    backbone:
      type: 'resnet'
      resnet:
        model_id: 18
        depth_multiplier: 0.125
    norm_activation:
      activation: 'relu'
      norm_momentum: 0.9
      norm_epsilon: 0.00001
      use_sync_bn: false
    dropout_rate: 0.1
    kernel_initializer: 'random_uniform'
    add_head_batch_norm: false
  losses:
    l2_weight_decay: 0.0001
    one_hot: true
    label_smoothing: 0.1
  evaluation:
    top_k: 3
  train_data:
    input_path: 'imagenet-2012-tfrecord/train*'
    is_training: true
    global_batch_size: 16
  validation_data:
    input_path: 'imagenet-2012-tfrecord/valid*'
    is_training: false
    global_batch_size: 64
    drop_remainder: false
trainer:
  train_steps: 2
  validation_steps: 2
  validation_interval: 2
  steps_per_loop: 1
  summary_interval: 1
  checkpoint_interval: 2
  optimizer_config:
    optimizer:
      type: 'sgd'
      sgd:
        momentum: 0.9
    learning_rate:
      type: 'stepwise'
      stepwise:
        boundaries: [1]
        values: [0.1, 0.01]
    warmup:
      type: 'linear'
      linear:
        warmup_steps: 1
"""

# The digits instead of the TFRecord shards, and no compilation: what only this test changes.
DIGITS = ("task.train_data.source=digits,task.train_data.input_path=,"
          "task.validation_data.source=digits,task.validation_data.input_path=,"
          "runtime.enable_xla=false")


@pytest.fixture
def mg_yaml(tmp_path):
    path = tmp_path / "imagenet_resnet18_tiny.yaml"
    path.write_text(MG_YAML)
    return str(path)


def test_the_yaml_is_accepted_whole_with_model_gardens_meaning(mg_yaml, capsys):
    assert main(["config", "--experiment", "resnet_imagenet", "--config_file", mg_yaml]) == 0
    config = yaml.safe_load(capsys.readouterr().out)
    task = config["task"]
    assert task["model"]["input_size"] == [8, 8, 1]  # [height, width, channels]
    assert task["model"]["backbone"] == {"type": "resnet", "resnet": {
        "model_id": 18, "depth_multiplier": 0.125, "stem_type": "v0", "se_ratio": 0.0,
        "stochastic_depth_drop_rate": 0.0, "scale_stem": True, "resnetd_shortcut": False,
        "replace_stem_max_pool": False, "bn_trainable": True}}
    assert task["losses"]["label_smoothing"] == 0.1 and task["losses"]["l2_weight_decay"] == 1e-4
    assert task["train_data"]["source"] == "tfrecord"  # resnet_imagenet reads TFRecords
    assert config["trainer"]["optimizer_config"]["learning_rate"]["stepwise"]["values"] == [
        0.1, 0.01]


def test_the_yaml_trains_the_transformers_resnet(mg_yaml, tmp_path):
    model_dir = str(tmp_path / "run")
    code = main(["train", "--experiment", "resnet_imagenet", "--mode", "train_and_eval",
                 "--model_dir", model_dir, "--config_file", mg_yaml,
                 "--params_override", DIGITS])
    assert code == 0
    params = ExperimentConfig.from_yaml(os.path.join(model_dir, "params.yaml"))
    assert params.task.model.backbone.resnet.model_id == 18
    assert glob.glob(os.path.join(model_dir, "ckpt-2*"))
    with open(os.path.join(model_dir, "metrics.jsonl"), encoding="utf-8") as f:
        lines = [json.loads(line) for line in f]
    evaluated = [line for line in lines if "top_3_accuracy" in json.dumps(line)]
    assert evaluated, lines


def test_an_unbuildable_option_is_refused_in_one_line(mg_yaml, tmp_path, capsys):
    model_dir = tmp_path / "refused"
    code = main(["train", "--experiment", "resnet_imagenet", "--model_dir", str(model_dir),
                 "--config_file", mg_yaml, "--params_override",
                 "task.model.backbone.resnet.bn_trainable=false"])
    assert code == 2 and not model_dir.exists()
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == ("torchgarden: error: task.model.backbone.resnet.bn_trainable: False needs "
                       "frozen batch norm in the backbone, which no installed library builds "
                       "(transformers' ResNet trains its batch norm; freeze it with a "
                       "fine-tuning config)")


def test_old_torchgarden_keys_are_mapped_with_a_notice(tmp_path, capsys):
    code = main(["config", "--experiment", "image_classification", "--params_override",
                 "task.label_smoothing=0.2,task.top_k=3,task.model.architecture=cnn"])
    assert code == 0
    captured = capsys.readouterr()
    config = yaml.safe_load(captured.out)
    assert config["task"]["losses"]["label_smoothing"] == 0.2
    assert config["task"]["evaluation"]["top_k"] == 3
    assert config["task"]["model"]["backbone"]["type"] == "cnn"
    assert "task.label_smoothing mapped" in captured.err + captured.out
