"""``task.validation_data`` as one data config or several by name, for any task config."""

from __future__ import annotations

import pytest

from torchgarden.config import ConfigError, DataConfig, ExperimentConfig
from torchgarden.experiments import ImageClassificationConfig
from torchgarden.experiments.image_classification import ImageClassificationDataConfig


def test_a_mapping_of_mappings_becomes_named_sets_each_starting_from_the_single_one():
    config = ImageClassificationConfig(validation_data=ImageClassificationDataConfig(
        global_batch_size=256, split="validation", drop_remainder=False))
    config.override({"validation_data": {"held_out": {}, "seen": {"split": "train"}}})
    sets = config.validation_data
    assert list(sets) == ["held_out", "seen"]
    assert all(type(s) is ImageClassificationDataConfig for s in sets.values())
    assert (sets["seen"].split, sets["seen"].global_batch_size) == ("train", 256)
    assert sets["held_out"].split == "validation" and not sets["held_out"].drop_remainder


def test_dotted_overrides_reach_one_set_and_yaml_round_trips():
    config = ExperimentConfig().override(
        "{task: {validation_data: {a: {global_batch_size: 2}, b: {global_batch_size: 4}}}}")
    config.override("task.validation_data.b.global_batch_size=8")
    assert {k: v.global_batch_size for k, v in config.task.validation_data.items()} == {
        "a": 2, "b": 8}
    assert ExperimentConfig.from_dict(config.as_dict()) == config


def test_a_mapping_of_fields_stays_one_data_config():
    config = ExperimentConfig().override({"task": {"validation_data": {"global_batch_size": 3}}})
    assert type(config.task.validation_data) is DataConfig
    assert config.task.validation_data.global_batch_size == 3


@pytest.mark.parametrize(("override", "key"), [
    ({"global_batch_sise": 3}, "'task.validation_data.global_batch_sise'; did you mean "
                               "'task.validation_data.global_batch_size'?"),
    ({"a": {"global_batch_sise": 3}}, "'task.validation_data.a.global_batch_sise'; did you "
                                      "mean 'task.validation_data.a.global_batch_size'?"),
])
def test_a_typo_names_the_closest_key_in_either_form(override, key):
    with pytest.raises(ConfigError, match="unknown key") as error:
        ExperimentConfig().override({"task": {"validation_data": override}})
    assert key in str(error.value)


def test_every_named_set_is_validated_under_its_own_key():
    config = ExperimentConfig().override(
        {"task": {"validation_data": {"a": {"global_batch_size": -1}}}})
    with pytest.raises(ConfigError, match=r"task\.validation_data\.a\.global_batch_size must "
                                          r"be >= 0"):
        config.validate()
