"""The README's Python quick start runs as written, directly and through `--import`."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import pytest

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> pathlib.Path:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "README has no python block"
    path = tmp_path_factory.mktemp("readme") / "my_project.py"
    path.write_text(blocks[0])
    return path


def test_readme_quick_start_trains_to_a_useful_accuracy(project):
    out = subprocess.run(
        [sys.executable, str(project)], cwd=project.parent, capture_output=True, text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    accuracy = float(out.stdout.strip().splitlines()[-1])
    assert accuracy > 0.9
    assert (project.parent / "runs" / "mine" / "ckpt-1000" / "meta.json").is_file()


def test_readme_module_runs_through_the_cli_import_flag(project):
    from torchgarden.cli.main import main

    model_dir = project.parent / "cli_run"
    code = main([
        "train", "--import", str(project), "--experiment", "my_experiment",
        "--model_dir", str(model_dir), "--params_override", "trainer.train_steps=100",
    ])
    assert code == 0
    assert (model_dir / "params.yaml").is_file()
