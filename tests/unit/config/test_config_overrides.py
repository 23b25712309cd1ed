"""Tests of parse_override, load_yaml_file and dump_yaml."""

from __future__ import annotations

import subprocess
import sys

import pytest

from torchgarden.config import ConfigError, dump_yaml, load_yaml_file, parse_override


def test_csv_values_nest_and_parse_scalars():
    parsed = parse_override(
        "a.b.c=1, lr = 1e-4,x=[1, 2,3],s='str',t=\"x, y\",on=true,off=False,n=null,m=None,f=2.5"
    )
    assert parsed == {
        "a": {"b": {"c": 1}},
        "lr": 1e-4,
        "x": [1, 2, 3],
        "s": "str",
        "t": "x, y",
        "on": True,
        "off": False,
        "n": None,
        "m": None,
        "f": 2.5,
    }
    assert isinstance(parsed["lr"], float)


def test_csv_bare_strings_lists_of_strings_and_commas_in_bare_values():
    parsed = parse_override("name=resnet,paths=[a, 'b,c', 3],input_path=/d/x,/d/y,empty=")
    assert parsed == {
        "name": "resnet",
        "paths": ["a", "b,c", 3],
        "input_path": "/d/x,/d/y",
        "empty": "",
    }


def test_csv_quoted_number_stays_string_and_later_key_wins():
    assert parse_override("s='1e-4',k=1,k=2") == {"s": "1e-4", "k": 2}


def test_csv_index_syntax_gives_a_list_as_model_garden_does_and_gaps_are_refused():
    # Model Garden's params_dict_test: every index 0..n-1, in any order.
    assert parse_override("a.b[2]=3,a.b[0]=1,a.b[1]=2") == {"a": {"b": [1, 2, 3]}}
    assert parse_override("a.b[1]=3.45,a.b[2]=1.32,a.b[0]=2.232") == {
        "a": {"b": [2.232, 3.45, 1.32]}}
    with pytest.raises(ConfigError, match=r"a\.b\[i\] sets indices \[0, 2\].*a\.b=\[\.\.\.\]"):
        parse_override("a.b[0]=1,a.b[2]=2")
    with pytest.raises(ConfigError, match=r"'x\[y\]' needs an index >= 0"):
        parse_override("x[y]=1")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a='unterminated", "unterminated ' quote"),
        ("a=[1,2", r"missing '\]'"),
        ("a=[[1],[2]]", "nested lists"),
        ("a=1,a.b=2", "conflicts with 'a'"),
        ("a='x'y", "expected ','"),
    ],
)
def test_csv_syntax_errors(text, message):
    with pytest.raises(ConfigError, match=message):
        parse_override(text)


def test_yaml_and_json_strings():
    assert parse_override("{trainer: {train_steps: 100, lr: 1e-4}}") == {
        "trainer": {"train_steps": 100, "lr": 1e-4}
    }
    assert parse_override('{"a": {"b": [1, 2]}}') == {"a": {"b": [1, 2]}}
    assert parse_override("  ") == {}


def test_file_path_override(tmp_path):
    path = tmp_path / "o.yaml"
    path.write_text("trainer:\n  train_steps: 7\n  lr: 2e-3\n")
    assert parse_override(str(path)) == {"trainer": {"train_steps": 7, "lr": 0.002}}


def test_missing_file_names_the_path(tmp_path):
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError, match="nope.yaml"):
        parse_override(str(missing))
    with pytest.raises(ConfigError, match=r"config file '.*nope\.yaml' does not exist"):
        load_yaml_file(missing)


def test_malformed_yaml_file_names_line_and_column(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("trainer:\n  train_steps: 1\n  bad: [1, 2\n")
    with pytest.raises(ConfigError) as info:
        load_yaml_file(path)
    message = str(info.value)
    assert "bad.yaml" in message and "line 4" in message and "column" in message
    assert "\n" not in message


def test_malformed_yaml_override_string():
    with pytest.raises(ConfigError, match="malformed YAML in the override string at line 1"):
        parse_override("{a: [1, 2}")


def test_yaml_file_must_hold_a_mapping(tmp_path):
    path = tmp_path / "list.yaml"
    path.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="must hold a mapping.*found list"):
        load_yaml_file(path)
    (tmp_path / "empty.yaml").write_text("")
    assert load_yaml_file(tmp_path / "empty.yaml") == {}


def test_yaml_loader_is_safe(tmp_path):
    path = tmp_path / "evil.yaml"
    path.write_text("a: !!python/object/apply:os.system ['echo hi']\n")
    with pytest.raises(ConfigError, match="malformed YAML"):
        load_yaml_file(path)


def test_dump_yaml_style_and_round_trip(tmp_path):
    data = {"b": {"z": 1, "a": [1, 2]}, "s": "1e-4", "f": 1e-5, "nested": [{"k": 1}], "t": (1, 2)}
    text = dump_yaml(data)
    assert text.splitlines()[:3] == ["b:", "  z: 1", "  a: [1, 2]"]
    assert "s: '1e-4'" in text
    path = tmp_path / "d.yaml"
    path.write_text(text)
    assert load_yaml_file(path) == {**data, "t": [1, 2]}


def test_config_package_does_not_import_torch():
    code = "import sys, torchgarden.config; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
