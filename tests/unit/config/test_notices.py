"""Model Garden keys a config maps or ignores: the value lands where declared, with a notice."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import pytest

from torchgarden.config import Config, ConfigError
from torchgarden.config.notices import Notice, collect_notices, ignored, mapped


@dataclasses.dataclass
class _Inner(Config):
    clip: float | None = None
    """Clip norm; None is off."""


@dataclasses.dataclass
class _Outer(Config):
    MODEL_GARDEN_KEYS: ClassVar = {
        "tf_function": ignored("TF graph tracing"),
        "strategy": mapped(values={"mirrored": "auto"}, note="launch with torchrun"),
        "old_clip": mapped("inner.clip"),
    }
    strategy: str = "single"
    """Strategy."""
    inner: _Inner = dataclasses.field(default_factory=_Inner)
    """Inner."""


def test_an_ignored_key_is_dropped_with_its_reason():
    with collect_notices() as notes:
        config = _Outer().override({"tf_function": True, "strategy": "single"})
    assert config.strategy == "single"
    assert notes == [Notice("tf_function", "ignored", "TF graph tracing")]


def test_a_value_spelling_is_read_and_said():
    with collect_notices() as notes:
        config = _Outer().override("strategy=mirrored")
    assert config.strategy == "auto"
    assert [str(n) for n in notes] == [
        "strategy mapped: 'mirrored' runs as 'auto'; launch with torchrun"
    ]


def test_a_key_moves_to_its_target_under_nested_and_dotted_spellings():
    with collect_notices() as notes:
        config = _Outer().override({"old_clip": 2})
    assert config.inner.clip == 2.0
    assert notes == [Notice("old_clip", "mapped", "inner.clip=2")]


def test_setting_a_key_and_its_target_is_refused():
    with collect_notices(), pytest.raises(ConfigError, match="old_clip and inner.clip set the"):
        _Outer().override({"old_clip": 2, "inner": {"clip": 3}})


def test_outside_a_collector_each_notice_is_a_warning():
    with pytest.warns(UserWarning, match="tf_function ignored: TF graph tracing"):
        _Outer().override({"tf_function": False})
