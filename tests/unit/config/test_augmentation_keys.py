"""Model Garden's augmentation and parser keys: where they go, what is mapped or refused."""

from __future__ import annotations

import pytest

import torchgarden as tg
from torchgarden.config.errors import ConfigError
from torchgarden.config.notices import collect_notices
from torchgarden.experiments.retinanet import RetinaNetDataConfig, RetinaNetParserConfig


def _classification(overrides: dict) -> tg.ExperimentConfig:
    params = tg.get_experiment("image_classification")
    params.override({"task": {"train_data": overrides}})
    return params.validate()


def test_model_garden_randaug_block_reads_as_written():
    params = _classification({"aug_type": {"type": "randaug", "randaug": {
        "num_layers": 3, "magnitude": 9, "cutout_const": 20, "translate_const": 5,
        "prob_to_apply": 0.5, "exclude_ops": ["Cutout"]}}})
    randaug = params.task.train_data.aug_type.get()
    assert (randaug.num_layers, randaug.magnitude, randaug.exclude_ops) == (3, 9.0, ["Cutout"])
    assert params.task.train_data.aug_type.as_dict() == {"type": "randaug", "randaug": {
        "num_layers": 3, "magnitude": 9.0, "cutout_const": 20.0, "translate_const": 5.0,
        "prob_to_apply": 0.5, "exclude_ops": ["Cutout"]}}


def test_autoaug_mixup_erasing_defaults_are_model_gardens():
    params = _classification({"aug_type": {"type": "autoaug"}, "mixup_and_cutmix": {},
                              "random_erasing": {}})
    data = params.task.train_data
    assert (data.aug_type.autoaug.augmentation_name, data.aug_type.autoaug.cutout_const,
            data.aug_type.autoaug.translate_const) == ("v0", 100.0, 250.0)
    mix = data.mixup_and_cutmix
    assert (mix.mixup_alpha, mix.cutmix_alpha, mix.prob, mix.label_smoothing) == (
        0.8, 1.0, 1.0, 0.1)
    erase = data.random_erasing
    assert (erase.probability, erase.min_area, erase.max_area, erase.min_aspect,
            erase.max_aspect, erase.min_count, erase.max_count, erase.trials) == (
        0.25, 0.02, 1 / 3, 0.3, None, 1, 1, 10)
    assert data.dtype == "float32" and data.decode_jpeg_only and not data.is_multilabel


@pytest.mark.parametrize("overrides, notice", [
    ({"aug_policy": "randaug"}, "task.train_data.aug_policy ignored"),
    ({"randaug_magnitude": 10}, "task.train_data.randaug_magnitude ignored"),
    ({"aug_type": {"type": "randaug", "randaug": {"magnitude_std": 0.5}}},
     "task.train_data.aug_type.randaug.magnitude_std ignored"),
    ({"mixup_and_cutmix": {"switch_prob": 0.5}},
     "task.train_data.mixup_and_cutmix.switch_prob ignored"),
])
def test_keys_model_gardens_classification_parser_does_not_read_leave_a_notice(overrides, notice):
    with collect_notices() as notes:
        _classification(overrides)
    assert any(str(note).startswith(notice) for note in notes), notes


@pytest.mark.parametrize("overrides, message", [
    ({"three_augment": True}, r"task.train_data.three_augment: true is not provided"),
    ({"is_multilabel": True}, r"task.train_data.is_multilabel: true .* is not provided"),
    ({"dtype": "bf16"}, r"task.train_data.dtype: 'bf16' is not one of .*did you mean 'bfloat16'"),
    ({"aug_type": {"type": "autoaug", "autoaug": {"augmentation_name": "detection_v0"}}},
     r"augmentation_name: 'detection_v0' is not provided"),
    ({"aug_type": {"type": "autoaug", "autoaug": {"augmentation_name": "v1"}}},
     r"augmentation_name: 'v1' is not one of v0"),
    ({"aug_type": {"type": "randaug", "randaug": {"exclude_ops": ["Blur"]}}},
     r"exclude_ops: 'Blur' is not one of AutoContrast"),
    ({"aug_type": {"type": "randaug", "randaug": {"magnitude": -1}}},
     r"randaug.magnitude must be >= 0"),
    ({"mixup_and_cutmix": {"mixup_alpha": 0.0, "cutmix_alpha": 0.0}},
     r"mixup_and_cutmix.mixup_alpha must be > 0 where cutmix_alpha is 0"),
    ({"color_jitter": -0.1}, r"task.train_data.color_jitter must be >= 0"),
])
def test_unprovided_or_bad_values_are_refused_naming_the_key(overrides, message):
    with pytest.raises(ConfigError, match=message):
        _classification(overrides)


def test_aug_type_refuses_a_type_model_garden_lacks():
    with pytest.raises(ConfigError, match=r"aug_type.type: 'ssd_random_crop' is not one of"):
        _classification({"aug_type": {"type": "ssd_random_crop"}})


def test_retinanet_parser_block_in_model_gardens_place():
    params = tg.get_experiment("retinanet")
    params.override({"task": {"train_data": {"parser": {
        "aug_rand_hflip": True, "aug_scale_min": 0.5, "aug_scale_max": 2.0,
        "match_threshold": 0.5, "unmatched_threshold": 0.4, "max_num_instances": 50,
        "skip_crowd_during_training": True, "aug_type": None, "aug_rand_jpeg": None}}}})
    parser = params.validate().task.train_data.parser
    assert (parser.aug_scale_min, parser.aug_scale_max, parser.max_num_instances) == (0.5, 2.0, 50)
    defaults = RetinaNetParserConfig()
    assert (defaults.match_threshold, defaults.unmatched_threshold, defaults.aug_rand_hflip,
            defaults.max_num_instances) == (0.5, 0.5, False, 100)
    assert RetinaNetDataConfig().dtype == "bfloat16"  # Model Garden's default


def test_retinanet_old_places_map_with_a_notice_or_point_to_the_new_one():
    params = tg.get_experiment("retinanet")
    with collect_notices() as notes:
        params.override({"task": {"train_data": {"aug_scale_max": 1.5}}})
    assert params.task.train_data.parser.aug_scale_max == 1.5
    assert [str(n) for n in notes] == [
        "task.train_data.aug_scale_max mapped: task.train_data.parser.aug_scale_max=1.5; "
        "Model Garden's place is the split's parser"]
    with pytest.raises(ConfigError, match=r"task.losses.match_threshold moved to "
                                          r"task.train_data.parser.match_threshold"):
        params.override("task.losses.match_threshold=0.6")


@pytest.mark.parametrize("override, message", [
    ("task.train_data.parser.aug_type.type=randaug", r"parser.aug_type must be None"),
    ("task.train_data.parser.skip_crowd_during_training=false",
     r"parser.skip_crowd_during_training must be true"),
    ("task.train_data.parser.pad=false", r"parser.pad must be true"),
    ("task.train_data.parser.keep_aspect_ratio=false", r"parser.keep_aspect_ratio must be true"),
    ("task.train_data.parser.num_channels=4", r"parser.num_channels must be 3"),
    ({"task": {"train_data": {"parser": {"aug_rand_jpeg": {"min_quality": 20}}}}},
     r"parser.aug_rand_jpeg must be None"),
    ("task.validation_data.parser.unmatched_threshold=0.5",
     r"task.validation_data.parser.unmatched_threshold \(0.5\) differs from train_data"),
])
def test_retinanet_parser_refusals(override, message):
    params = tg.get_experiment("retinanet")
    params.override(override)
    with pytest.raises(ConfigError, match=message):
        params.validate()


def test_retinanet_parser_aug_policy_is_ignored_with_a_notice():
    params = tg.get_experiment("retinanet")
    with collect_notices() as notes:
        params.override({"task": {"train_data": {"parser": {"aug_policy": "v0"}}}})
    assert [n.key for n in notes] == ["task.train_data.parser.aug_policy"]


@pytest.mark.parametrize("override, message", [
    ("task.train_data.crop_size=[32]", r"task.train_data.crop_size must be \[\] or \[height"),
    ("task.validation_data.resize_eval_groundtruth=false",
     r"resize_eval_groundtruth must be true"),
    ("task.validation_data.groundtruth_padded_size=[64,64]", r"groundtruth_padded_size must be"),
    ("task.train_data.preserve_aspect_ratio=false", r"preserve_aspect_ratio must be true"),
    ("task.validation_data.dtype=bfloat16", r"validation_data.dtype .'bfloat16'. differs"),
])
def test_segmentation_refusals(override, message):
    params = tg.get_experiment("semantic_segmentation")
    params.override(override)
    with pytest.raises(ConfigError, match=message):
        params.validate()


def test_segmentation_keys_sit_on_the_data_config_with_model_gardens_defaults():
    data = tg.experiments.SegmentationDataConfig()
    assert data.aug_rand_hflip and data.resize_eval_groundtruth and data.preserve_aspect_ratio
    assert (data.crop_size, data.groundtruth_padded_size, data.dtype) == ([], [], "float32")
    params = tg.get_experiment("semantic_segmentation")
    with collect_notices() as notes:
        params.override({"task": {"train_data": {"aug_policy": "randaug", "dtype": "bfloat16"},
                                  "validation_data": {"dtype": "bfloat16"}}})
    params.validate()
    assert [n.key for n in notes] == ["task.train_data.aug_policy"]


def test_a_mapped_key_before_its_new_block_is_kept():
    params = tg.get_experiment("retinanet")
    params.override({"task": {"train_data": {"aug_rand_hflip": False,
                                             "parser": {"aug_scale_min": 0.5}}}})
    parser = params.task.train_data.parser
    assert (parser.aug_rand_hflip, parser.aug_scale_min) == (False, 0.5)
    with pytest.raises(ConfigError, match="set the same field"):
        params.override({"task": {"train_data": {"aug_rand_hflip": False,
                                                 "parser": {"aug_rand_hflip": True}}}})
