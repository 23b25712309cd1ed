"""The HTML report's y-axis labels (report.js ``tgTickLabels``), run with Node: ticks over
a narrow range read apart (issue 22: ``0.003`` four times); wide ones stay short."""

from __future__ import annotations

import json
import shutil
import subprocess
from importlib import resources

import pytest

NODE = shutil.which("node") or shutil.which("nodejs")


def labels(*splits: float) -> list[str]:
    if NODE is None:
        pytest.skip("Node.js is not installed")
    script = resources.files("torchgarden.report").joinpath("report.js").read_text()
    function = script[script.index("function tgTickLabels"):script.index("(function () {")]
    program = f"{function}\nconsole.log(JSON.stringify(tgTickLabels({json.dumps(splits)})));"
    out = subprocess.run([NODE, "-e", program], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def test_a_narrow_range_gets_enough_decimals():
    assert labels(0.0031, 0.0032, 0.0033, 0.0034) == ["0.0031", "0.0032", "0.0033", "0.0034"]
    assert labels(0.99975, 0.9998, 0.99985) == ["0.99975", "0.99980", "0.99985"]


def test_each_label_is_distinct_for_ticks_a_quarter_apart():
    assert labels(0.25, 0.5, 0.75, 1.0) == ["0.25", "0.50", "0.75", "1.00"]


def test_a_wide_range_stays_short():
    assert labels(0, 500, 1000, 1500) == ["0", "500", "1000", "1500"]
    assert labels(0.1, 0.2, 0.3) == ["0.1", "0.2", "0.3"]


def test_tiny_values_use_exponents():
    assert labels(1e-12, 2e-12, 3e-12) == ["1.0e-12", "2.0e-12", "3.0e-12"]


def test_the_chart_axis_uses_it():
    script = resources.files("torchgarden.report").joinpath("report.js").read_text()
    assert "return tgTickLabels(splits);" in script
