"""Model Garden's config tests (params_dict_test, base_config_test, oneof_test) replayed
through torchgarden's API: where the behaviour matches, and the documented differences
(docs/porting_from_model_garden.md §6, "Configs")."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from torchgarden.config import Config, ConfigError, OneOfConfig
from torchgarden.config.errors import ConfigKeyError, ConfigTypeError


@dataclasses.dataclass
class DumpConfig1(Config):
    a: int = 1
    b: str = "text"


@dataclasses.dataclass
class DumpConfig2(Config):
    c: int = 2
    d: str = "text"
    e: DumpConfig1 = dataclasses.field(default_factory=DumpConfig1)
    key: Any = None


@dataclasses.dataclass
class DumpConfig5(Config):
    z: tuple[str] = ("a",)
    pair: tuple[int, int] = (1, 2)
    c: list[int] = dataclasses.field(default_factory=lambda: [1])


@pytest.mark.parametrize("key", ["_locked", "_restrictions", "aa"])
def test_unknown_and_reserved_keys_raise_key_error(key):
    with pytest.raises(KeyError) as error:
        DumpConfig2().override({key: True})
    assert isinstance(error.value, ConfigError) and key in str(error.value)
    assert not str(error.value).startswith("'")  # One readable line, not KeyError's repr.


@pytest.mark.parametrize("value", [lambda x: x, object(), {1, 2}, frozenset()])
def test_unsupported_values_raise_type_error(value):
    with pytest.raises(TypeError) as error:
        DumpConfig2().override({"key": value})
    assert isinstance(error.value, ConfigTypeError) and "key" in str(error.value)


def test_wrong_value_types_raise_type_error():
    with pytest.raises(TypeError, match="c expects int"):
        DumpConfig2().override({"c": "two"})
    with pytest.raises(TypeError, match=r"c\[0\] expects int"):
        DumpConfig5().override({"c": [[1]]})  # Model Garden: "Invalid sequence".


def test_a_locked_config_refuses_changes_with_value_error():
    cfg = DumpConfig2().lock()
    with pytest.raises(ValueError, match="locked"):
        cfg.override({"c": 3})
    with pytest.raises(ValueError, match="locked"):
        cfg.c = 3
    with pytest.raises(ValueError, match="locked; cannot delete 'c'"):
        del cfg.c
    assert cfg.c == 2


def test_deleting_a_field_is_refused_before_lock_too():
    cfg = DumpConfig2()
    with pytest.raises(KeyError, match="cannot delete DumpConfig2.e"):
        del cfg.e
    assert isinstance(cfg.e, DumpConfig1)  # Still there (Model Garden would remove it).


@pytest.mark.parametrize("bad", [True, 5, ["a"], {"x": 1}])
def test_a_type_key_of_the_wrong_type_is_a_type_error(bad):
    with pytest.raises(TypeError, match="_type expects a class name"):
        DumpConfig2().override({"_type": bad})
    with pytest.raises(TypeError, match=r"e\._type expects a class name"):
        DumpConfig2().override({"e": {"_type": bad}})


@pytest.mark.parametrize("value", [("str", 1, 2.3, None), [("a", 1)], ({"a": 42},)])
def test_tuples_stay_tuples_in_any_fields_and_as_dict(value):
    cfg = DumpConfig2().override({"key": value})
    assert cfg.key == value and type(cfg.key) is type(value)
    assert cfg.as_dict()["key"] == value and type(cfg.as_dict()["key"]) is type(value)


def test_a_single_argument_tuple_takes_any_length_and_empty():
    cfg = DumpConfig5().override({"z": ["a", "b", "c"]})
    assert cfg.z == ("a", "b", "c")
    assert DumpConfig5().override({"z": ()}).z == ()


def test_a_fixed_length_tuple_keeps_its_length():
    with pytest.raises(ConfigTypeError, match="expected 2 items, got 3"):
        DumpConfig5().override({"pair": [1, 2, 3]})


def test_tuples_come_back_from_yaml_as_lists_except_in_tuple_fields(tmp_path):
    cfg = DumpConfig2().override({"key": (1, 2)})
    path = tmp_path / "c.yaml"
    cfg.to_yaml(path)
    assert DumpConfig2.from_yaml(path).key == [1, 2]
    cfg5 = DumpConfig5().override({"z": ("p", "q")})
    cfg5.to_yaml(path)
    assert DumpConfig5.from_yaml(path).z == ("p", "q")


def test_a_oneof_with_an_invalid_type_is_a_value_error_with_the_closest():
    @dataclasses.dataclass
    class Choice(OneOfConfig):
        type: str | None = "first"
        first: DumpConfig1 = dataclasses.field(default_factory=DumpConfig1)
        second: DumpConfig2 = dataclasses.field(default_factory=DumpConfig2)

    with pytest.raises(ValueError, match="'frist' is not one of first, second; did you mean"):
        Choice().override({"type": "frist"})
    assert Choice().as_dict() == {"type": "first", "first": {"a": 1, "b": "text"}}


def test_nested_config_override_merges_and_replace_copies():
    cfg = DumpConfig2()
    cfg.override({"e": {"a": 2, "b": "new text"}})
    assert cfg.e == DumpConfig1(a=2, b="new text")
    new = cfg.replace(e={"a": 3})
    assert new.e.a == 3 and cfg.e.a == 2


def test_config_errors_are_one_line_and_read_like_messages():
    error = ConfigKeyError("unknown key 'x'\n more", key="x")
    assert str(error) == "unknown key 'x' more" and error.key == "x"


def test_a_failed_restriction_is_a_value_error_naming_both_keys():
    @dataclasses.dataclass
    class Restricted(DumpConfig2):
        RESTRICTIONS = ["e.a < c"]  # noqa: RUF012

    Restricted().validate()
    with pytest.raises(ValueError, match=r"e\.a < c") as error:
        Restricted(c=0).validate()
    assert not isinstance(error.value, KeyError)  # Model Garden raises KeyError here.
