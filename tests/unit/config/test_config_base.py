"""Tests of Config: overrides, types, lock, attribute guard, YAML round trip, diff."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import pytest

from torchgarden.config import (
    MISSING,
    Config,
    ConfigError,
    ExperimentConfig,
    TaskConfig,
    diff,
)


@dataclasses.dataclass
class Inner(Config):
    width: int = 4
    """Width."""
    rate: float = 0.5
    scale: float | None = None
    tags: list[str] = dataclasses.field(default_factory=list)
    shape: tuple[int, ...] = (2, 2)
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)
    anything: Any = None


@dataclasses.dataclass
class Outer(Config):
    name: str = "outer"
    flag: bool = False
    inner: Inner = dataclasses.field(default_factory=Inner)
    maybe: Inner | None = None
    items: list[Inner] = dataclasses.field(default_factory=list)
    RESTRICTIONS: ClassVar[list[str]] = ["inner.width <= 8", "name != 'bad'"]


@dataclasses.dataclass
class ToyHead(Config):
    num_classes: int = 10
    hidden: list[int] = dataclasses.field(default_factory=lambda: [8, 16])


@dataclasses.dataclass
class ToyModel(Config):
    depth: int = 18
    head: ToyHead = dataclasses.field(default_factory=ToyHead)


@dataclasses.dataclass
class ToyTaskConfig(TaskConfig):
    model: ToyModel = dataclasses.field(default_factory=ToyModel)
    loss_weight: float = 1.0
    class_names: list[str] = dataclasses.field(default_factory=lambda: ["a", "b"])


def test_override_dict_merges_and_coerces():
    cfg = Outer()
    inner = cfg.inner
    out = cfg.override({"inner": {"width": 6, "rate": 1, "scale": "1e-4", "shape": [3, 4]}})
    assert out is cfg and cfg.inner is inner
    assert (cfg.inner.width, cfg.inner.rate, cfg.inner.scale, cfg.inner.shape) == (
        6,
        1.0,
        1e-4,
        (3, 4),
    )
    assert isinstance(cfg.inner.rate, float)
    assert cfg.name == "outer"


def test_override_string_and_dotted_dict_keys():
    cfg = Outer().override("inner.tags=[a, b],name='x, y'")
    assert cfg.inner.tags == ["a", "b"] and cfg.name == "x, y"
    cfg.override({"inner.width": 2})
    assert cfg.inner.width == 2


def test_override_from_config_and_tuple_becomes_list():
    cfg = Outer().override(Outer(name="other"))
    assert cfg.name == "other"
    cfg.override({"inner": {"tags": ("p", "q")}})
    assert cfg.inner.tags == ["p", "q"]


def test_unknown_key_names_dotted_path_and_closest_key():
    with pytest.raises(
        ConfigError, match=r"unknown key 'inner\.widht'; did you mean 'inner\.width'\?"
    ):
        Outer().override({"inner": {"widht": 1}})
    with pytest.raises(
        ConfigError,
        match=r"unknown key 'trainer\.train_stpes'; did you mean 'trainer\.train_steps'\?",
    ):
        ExperimentConfig().override("trainer.train_stpes=1")


def test_unknown_key_without_close_match_lists_valid_keys():
    with pytest.raises(
        ConfigError, match=r"unknown key 'inner\.zzz'; valid keys of inner: width, rate"
    ):
        Outer().override("inner.zzz=1")


def test_non_strict_override_skips_unknown_keys():
    cfg = Outer().override({"nope": 1, "name": "kept"}, strict=False)
    assert cfg.name == "kept" and not hasattr(cfg, "nope")


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"inner": {"width": 1.5}}, r"inner\.width expects int, received 1\.5 \(float\)"),
        ({"inner": {"width": True}}, r"inner\.width expects int, received True \(bool\)"),
        ({"flag": 1}, r"flag expects bool, received 1 \(int\)"),
        ({"inner": {"width": None}}, r"inner\.width expects int, received None"),
        ({"inner": {"rate": "fast"}}, r"inner\.rate expects float, received 'fast' \(str\)"),
        ({"inner": {"scale": "x"}}, r"inner\.scale expects float \| None, received 'x'"),
        ({"inner": {"tags": [1]}}, r"inner\.tags\[0\] expects str, received 1 \(int\)"),
        ({"inner": {"tags": "a"}}, r"inner\.tags expects list\[str\].*wrap it in brackets"),
        ({"inner": 3}, r"inner expects Inner, received 3 \(int\)"),
        ({"name": 3}, r"name expects str, received 3 \(int\).*quote it"),
    ],
)
def test_wrong_types_name_key_expected_type_and_received_value(override, message):
    with pytest.raises(ConfigError, match=message):
        Outer().override(override)


def test_failed_override_changes_nothing():
    cfg = Outer()
    with pytest.raises(ConfigError):
        cfg.override({"name": "changed", "inner": {"width": "x"}})
    assert cfg == Outer()


def test_optional_sub_config_and_lists_of_configs_build_from_mappings():
    cfg = Outer().override({"maybe": {"width": 3}, "items": [{"width": 1}, {}]})
    assert cfg.maybe == Inner(width=3)
    assert cfg.items == [Inner(width=1), Inner()]
    cfg.override({"maybe": None})
    assert cfg.maybe is None


def test_any_and_dict_fields_accept_yaml_values_and_merge():
    cfg = Outer().override({"inner": {"extra": {"a": {"x": 1}}, "anything": [1, {"k": None}]}})
    cfg.override({"inner": {"extra": {"a": {"y": 2}, "b": 3}}})
    assert cfg.inner.extra == {"a": {"x": 1, "y": 2}, "b": 3}
    assert cfg.inner.anything == [1, {"k": None}]
    with pytest.raises(ConfigError, match=r"inner\.anything expects a YAML value"):
        cfg.override({"inner": {"anything": object()}})


def test_setattr_checks_names_types_and_coerces():
    cfg = Outer()
    cfg.inner.rate = 2
    assert cfg.inner.rate == 2.0 and isinstance(cfg.inner.rate, float)
    with pytest.raises(ConfigError, match=r"Inner has no field 'widht'; did you mean 'width'\?"):
        cfg.inner.widht = 3
    with pytest.raises(ConfigError, match=r"Inner\.width expects int, received 'x' \(str\)"):
        cfg.inner.width = "x"
    with pytest.raises(AttributeError, match="did you mean 'width'"):
        _ = cfg.inner.widht
    with pytest.raises(ConfigError, match="Inner.width expects int"):
        Inner(width="3")


def test_lock_blocks_override_and_setattr_recursively():
    cfg = Outer().lock()
    assert cfg.locked and cfg.inner.locked
    with pytest.raises(ConfigError, match="is locked"):
        cfg.override({"name": "x"})
    with pytest.raises(ConfigError, match="Inner is locked; cannot set 'width'"):
        cfg.inner.width = 1
    clone = cfg.replace(name="copy", inner={"width": 2})
    assert not clone.locked and not clone.inner.locked
    assert (clone.name, clone.inner.width, cfg.name, cfg.inner.width) == ("copy", 2, "outer", 4)
    assert cfg.copy() == cfg and not cfg.copy().locked


def test_validate_restrictions_report_values():
    Outer().validate()
    with pytest.raises(
        ConfigError, match=r"restriction 'inner\.width <= 8' failed: inner\.width = 9"
    ):
        Outer().override("inner.width=9").validate()
    with pytest.raises(ConfigError, match=r"restriction \"name != 'bad'\" failed: name = 'bad'"):
        Outer(name="bad").validate()


def test_validate_restriction_none_message_and_errors():
    @dataclasses.dataclass
    class NeedsFlag(Config):
        value: int | None = None
        RESTRICTIONS: ClassVar[list[str]] = ["value != None"]

    with pytest.raises(ConfigError, match=r"restriction 'value != None' failed: value is None"):
        NeedsFlag().validate()
    NeedsFlag.RESTRICTIONS = ["value ~ 3"]
    with pytest.raises(ConfigError, match="is not 'a <op> b'"):
        NeedsFlag(value=1).validate()
    NeedsFlag.RESTRICTIONS = ["valeu > 3"]
    with pytest.raises(ConfigError, match="unknown key 'valeu'"):
        NeedsFlag(value=1).validate()
    NeedsFlag.RESTRICTIONS = ["value > 'a'"]
    with pytest.raises(ConfigError, match="cannot compare"):
        NeedsFlag(value=1).validate()


def test_dotted_access():
    cfg = Outer()
    assert cfg["inner.width"] == 4 and cfg.get("inner.nope", 7) == 7
    assert "inner.rate" in cfg and "inner.nope" not in cfg
    with pytest.raises(
        ConfigError, match=r"unknown key 'inner\.widht'; did you mean 'inner\.width'"
    ):
        cfg["inner.widht"]


def test_as_dict_is_a_deep_plain_copy():
    cfg = Outer(items=[Inner()])
    data = cfg.as_dict()
    assert data["inner"]["shape"] == (2, 2) and data["items"] == [Inner().as_dict()]
    data["inner"]["tags"].append("x")
    assert cfg.inner.tags == []


def test_yaml_round_trip_with_task_subclass_and_non_default_optimizer(tmp_path):
    cfg = ExperimentConfig(task=ToyTaskConfig())
    cfg.override(
        {
            "task": {
                "model": {"depth": 50, "head": {"hidden": [4]}},
                "loss_weight": 0.25,
                "train_data": {"global_batch_size": 64, "input_path": ["a", "b"]},
            },
            "trainer": {
                "optimizer_config": {
                    "optimizer": {
                        "type": "adamw",
                        "adamw": {"weight_decay_rate": 0.05, "exclude_from_weight_decay": ["bias"]},
                    },
                    "learning_rate": {"type": "cosine", "cosine": {"initial_learning_rate": 1.6}},
                    "warmup": {"type": "linear", "linear": {"warmup_steps": 50}},
                    "ema": {"average_decay": 0.9999},
                }
            },
        }
    )
    path = tmp_path / "sub" / "params.yaml"
    text = cfg.to_yaml(path)
    assert path.read_text() == text
    assert "_type: " in text and "ToyTaskConfig" in text
    loaded = ExperimentConfig.from_yaml(path)
    assert type(loaded.task) is ToyTaskConfig
    assert loaded == cfg
    assert loaded.task.model.head.hidden == [4]
    assert ExperimentConfig.from_dict(cfg.as_dict()) == cfg


def test_generic_config_field_round_trips_through_type_key():
    cfg = ExperimentConfig()
    cfg.task.model = ToyModel(depth=34)
    data = cfg.as_dict()
    assert data["task"]["model"]["_type"].endswith("ToyModel")
    assert ExperimentConfig.from_dict(data) == cfg
    assert "_type" not in cfg.as_dict(include_type=False)["task"]["model"]


def test_unknown_type_key_asks_for_import_and_never_imports():
    data = {"task": {"_type": "my_project.tasks.SecretTask"}}
    with pytest.raises(
        ConfigError,
        match=r"task\._type: config class 'my_project\.tasks\.SecretTask' "
        r"is not imported.*--import my_project\.tasks",
    ):
        ExperimentConfig.from_dict(data)


def test_type_key_must_name_a_subclass_of_the_field_type():
    data = {"task": {"_type": f"{Inner.__module__}.Inner"}}
    with pytest.raises(ConfigError, match=r"task\._type: Inner is not a subclass of TaskConfig"):
        ExperimentConfig.from_dict(data)


def test_generic_config_field_needs_type_key():
    with pytest.raises(
        ConfigError, match=r"task\.model: the field is annotated with the generic Config"
    ):
        ExperimentConfig().override({"task": {"model": {"depth": 3}}})


def test_undecorated_subclass_is_reported():
    class Forgot(Config):
        size: int = 3

    with pytest.raises(ConfigError, match="Forgot declares fields but is not a dataclass"):
        Forgot()


def test_diff_lists_changed_and_missing_keys():
    base = ExperimentConfig().override("trainer.optimizer_config.optimizer.type=sgd")
    changed = base.replace(trainer={"train_steps": 10}, task={"train_data": {"input_path": ["x"]}})
    changed.trainer.optimizer_config.optimizer.type = "adam"
    result = diff(base, changed)
    assert result["trainer.train_steps"] == (0, 10)
    assert result["task.train_data.input_path"] == ("", ["x"])
    assert result["trainer.optimizer_config.optimizer.type"] == ("sgd", "adam")
    assert result["trainer.optimizer_config.optimizer.sgd.momentum"] == (0.0, MISSING)
    assert result["trainer.optimizer_config.optimizer.adam.beta_1"] == (MISSING, 0.9)
    assert diff(base, base.copy()) == {}
    assert repr(MISSING) == "<missing>"


def test_config_error_is_one_line_value_error():
    error = ConfigError("first\n  second", key="a.b")
    assert isinstance(error, ValueError)
    assert str(error) == "first second" and error.key == "a.b"
