"""Data sources: Model Garden's DataConfig keys, and keys naming data a source would not read."""

from __future__ import annotations

import warnings

import pytest

from torchgarden.config import ConfigError, DataConfig
from torchgarden.config.notices import collect_notices
from torchgarden.registry import get_experiment


def _check(experiment: str, override: str) -> None:
    get_experiment(experiment).override(override).validate()


def test_model_garden_data_defaults():
    cfg = DataConfig()
    assert (cfg.cycle_length, cfg.block_length, cfg.shuffle_buffer_size) == (None, 1, 100)
    assert (cfg.tfds_name, cfg.tfds_split, cfg.tfds_data_dir, cfg.file_type) == (
        "", "", "", "tfrecord")
    assert cfg.prefetch_buffer_size is None and cfg.skip_bad_records is False


@pytest.mark.parametrize(("override", "closest"), [
    ("task.train_data.input_path=/data/train-*", "task.train_data.source=tfrecord"),
    ("task.train_data.input_path=/data/x.npz", "task.train_data.source=npz"),
    ("task.train_data.tfds_name=imagenet2012,task.train_data.tfds_split=train",
     "task.train_data.source=tfrecord"),
])
def test_generated_source_refuses_a_path_it_would_never_read(override, closest):
    with pytest.raises(ConfigError) as err:
        _check("image_classification", override)
    message = str(err.value)
    assert "never read" in message and "task.train_data.source is 'digits'" in message
    assert closest in message and "\n" not in message


@pytest.mark.parametrize("experiment", ["retinanet", "semantic_segmentation"])
def test_shapes_source_refuses_a_path(experiment):
    with pytest.raises(ConfigError, match=r"never read: task.train_data.source is 'shapes'.*"
                                          r"source=tfrecord"):
        _check(experiment, "task.train_data.source=shapes,task.train_data.input_path=/d/tr*")


@pytest.mark.parametrize("experiment", ["retinanet", "semantic_segmentation"])
def test_empty_source_refuses_shards_it_would_misread(experiment):
    with pytest.raises(ConfigError, match="set task.train_data.source=tfrecord for TFRecord"):
        _check(experiment, "task.train_data.input_path=/data/train-*.tfrecord")


@pytest.mark.parametrize("experiment", ["image_classification", "retinanet",
                                        "semantic_segmentation"])
def test_tfrecord_source_accepted_with_shards_or_tfds(experiment):
    _check(experiment, "task.train_data.source=tfrecord,task.train_data.input_path=/d/a*,/d/b")
    _check(experiment, "task.train_data.source=tfrecord,task.train_data.tfds_name=coco/2017,"
                       "task.train_data.tfds_split=train")
    with pytest.raises(ConfigError, match="input_path is required when task.train_data.source"):
        _check(experiment, "task.train_data.source=tfrecord")


def test_tfds_name_and_input_path_exclusive():
    with pytest.raises(ConfigError, match="tfds_name and task.train_data.input_path both"):
        _check("image_classification", "task.train_data.source=tfrecord,"
               "task.train_data.input_path=/a,task.train_data.tfds_name=x,"
               "task.train_data.tfds_split=train")


def test_data_knobs_checked():
    for override, key in [("task.train_data.cycle_length=0", "cycle_length"),
                          ("task.train_data.block_length=0", "block_length"),
                          ("task.train_data.file_type=sstable", "file_type")]:
        with pytest.raises(ConfigError, match=key):
            _check("image_classification", override)


def test_tf_only_data_keys_ignored_with_a_notice():
    cfg = get_experiment("image_classification")
    with collect_notices() as notes, warnings.catch_warnings():
        warnings.simplefilter("error")
        cfg.override({"task": {"train_data": {"enable_tf_data_service": False,
                                              "autotune_algorithm": "GRADIENT_DESCENT"}}})
    assert [(n.key, n.action) for n in notes] == [
        ("task.train_data.enable_tf_data_service", "ignored"),
        ("task.train_data.autotune_algorithm", "ignored")]
