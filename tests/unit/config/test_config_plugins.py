"""Which modules a `_type` name read from a config may import: torchgarden's own only."""

from __future__ import annotations

import subprocess
import sys

import pytest

from torchgarden.config import plugins as _plugins


def test_a_name_outside_the_package_imports_nothing(tmp_path, monkeypatch):
    marker = tmp_path / "imported"
    (tmp_path / "outside_configs.py").write_text(
        f"import pathlib\npathlib.Path({str(marker)!r}).touch()\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    _plugins.import_own_module("outside_configs.SomeConfig")
    _plugins.import_own_module("torchgarden_fake.outside_configs.SomeConfig")
    assert not marker.exists() and "outside_configs" not in sys.modules


@pytest.mark.parametrize(
    "name",
    [
        "torchgarden.no_such_module.Config",
        "torchgarden..Config",
        "torchgarden.Config",
        "torchgarden.__main__.Config",
    ],
)
def test_a_missing_malformed_or_dunder_own_name_imports_nothing_quietly(name):
    _plugins.import_own_module(name)
    assert "torchgarden.no_such_module" not in sys.modules
    assert "torchgarden.__main__" not in sys.modules


def test_an_own_name_imports_its_module_even_for_a_nested_class():
    code = (
        "import sys\n"
        "from torchgarden.config import plugins as _plugins\n"
        "_plugins.import_own_module('torchgarden.experiments.toy.ToyRegressionConfig.Nested')\n"
        "print('torchgarden.experiments.toy' in sys.modules, 'torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "False"]

