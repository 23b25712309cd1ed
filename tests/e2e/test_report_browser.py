"""`torchgarden report` opened in a real headless Chromium (Debian's), from disk.

The page must render with no console error, draw every chart with every point of every
run, and show the image summaries. A screenshot is kept as a test artifact in
``build/test-artifacts/report.png``. Chromium comes from Debian (``apt-get install
chromium``; CI installs it); without it the test is skipped locally and fails in CI.
"""

from __future__ import annotations

import os
import pathlib
import shutil

import numpy as np
import pytest

from torchgarden.cli.main import main
from torchgarden.report import build_charts, load_runs
from torchgarden.summary import ImageScalarSummaryManager

pytestmark = pytest.mark.slow

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARTIFACTS = pathlib.Path(__file__).resolve().parents[2] / "build" / "test-artifacts"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    root = tmp_path_factory.mktemp("report")
    common = "trainer.train_steps=60,trainer.validation_interval=20,trainer.summary_interval=10"
    for name, noise in (("noise_0.01", 0.01), ("noise_0.3", 0.3)):
        assert main(["train", "--experiment", "toy_regression", "--model_dir", str(root / name),
                     "--params_override", f"{common},task.noise={noise}"]) == 0
    images = ImageScalarSummaryManager(root / "noise_0.01" / "validation")
    images.write_summaries({"image/predictions": np.linspace(0, 1, 2 * 16 * 16 * 3).reshape(
        2, 16, 16, 3)}, step=60)
    images.close()
    output = root / "report.html"
    assert main(["report", str(root / "noise_0.01"), str(root / "noise_0.3"), "--output",
                 str(output), "--png", str(root / "png")]) == 0
    return root, output


def test_png_charts_are_the_reports_charts(report):
    root, _ = report
    charts = build_charts(load_runs([root / "noise_0.01", root / "noise_0.3"]))
    names = sorted(p.name for p in (root / "png").glob("*.png"))
    assert len(names) == len(charts) == 9
    assert "validation_validation_loss.png" in names
    assert all((root / "png" / n).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for n in names)


def test_the_report_renders_every_chart_with_its_points_in_chromium(report):
    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("CI must run the browser test: .ci/run installs Debian's chromium.")
        pytest.skip("needs Debian's chromium (apt-get install -y chromium).")
    from playwright.sync_api import sync_playwright

    root, output = report
    expected = {chart.title: [sum(v is not None for v in values) for _, values in chart.series]
                for chart in build_charts(load_runs([root / "noise_0.01", root / "noise_0.3"]))}
    errors: list[str] = []
    with sync_playwright() as playwright:
        # Each launch gets a fresh, empty profile directory from Playwright.
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("request", lambda r: errors.append(f"request {r.url}")
                    if not r.url.startswith(("file:", "data:")) else None)
            page.goto(output.as_uri())
            page.wait_for_function("window.tgCharts !== undefined", timeout=20_000)
            drawn = page.evaluate("window.tgCharts")
            canvases = page.evaluate("document.querySelectorAll('.chart canvas').length")
            images = page.evaluate("[...document.images].filter(i => i.naturalWidth > 0).length")
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "report.png"), full_page=True)
        finally:
            browser.close()

    assert errors == []
    assert {chart["title"]: chart["points"] for chart in drawn} == expected
    assert expected["train/training_loss"] == [6, 6] and expected["validation/validation_loss"] == [3, 3]
    assert canvases == len(expected)
    assert images == 1
    assert (ARTIFACTS / "report.png").stat().st_size > 10_000
