"""The README's Python quick start runs as written, directly and through `--import`."""

from __future__ import annotations

import os
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
    saved_as = re.search(r"Save it as `([^`]+)`", README.read_text()).group(1)
    assert saved_as.startswith("runs/"), "the README's example must be saved under runs/"
    path = tmp_path_factory.mktemp("readme") / saved_as
    path.parent.mkdir(parents=True)
    path.write_text(blocks[0])
    return path


def root_of(project: pathlib.Path) -> pathlib.Path:
    """The directory the README runs its commands from (the repository root)."""
    return project.parents[2]


def test_readme_quick_start_trains_to_a_useful_accuracy(project):
    out = subprocess.run(
        [sys.executable, str(project.relative_to(root_of(project)))], cwd=root_of(project),
        capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    accuracy = float(out.stdout.strip().splitlines()[-1])
    assert accuracy > 0.9
    assert (project.parent / "mine" / "ckpt-1000" / "meta.json").is_file()
    assert sorted(os.listdir(root_of(project))) == ["runs"]


def test_readme_example_is_ruff_clean(project):
    ruff = pathlib.Path(sys.executable).parent / "ruff"
    if not ruff.exists():
        pytest.skip("ruff is not installed (pip install -e '.[dev]')")
    config = README.parent / "pyproject.toml"
    out = subprocess.run([str(ruff), "check", "--no-cache", "--config", str(config),
                          str(project)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout


def test_the_cli_resumes_and_evaluates_the_scripts_run(project, capsys):
    """`python my_project.py`, then the README's `torchgarden train --import my_project.py`
    on the same model_dir: it resumes (the task class is `my_project.MyTaskConfig` both
    times), and `torchgarden eval` reads the run's params.yaml."""
    from torchgarden.cli.main import main

    model_dir = project.parent / "mine"
    if not (model_dir / "ckpt-1000").is_dir():
        subprocess.run([sys.executable, str(project)], cwd=root_of(project), check=True,
                       capture_output=True, timeout=300)
    assert "_type: my_project.MyTaskConfig" in (model_dir / "params.yaml").read_text()
    capsys.readouterr()
    assert main(["train", "--import", str(project), "--experiment", "my_experiment",
                 "--model_dir", str(model_dir), "--params_override",
                 "trainer.train_steps=1100"]) == 0
    assert f"restored model from {model_dir}/ckpt-1000 at step 1000." in capsys.readouterr().out
    assert (model_dir / "ckpt-1100" / "meta.json").is_file()
    assert main(["eval", "--import", str(project), "--model_dir", str(model_dir)]) == 0
    out = capsys.readouterr().out
    assert "config read from" in out and "ckpt-1100" in out
    assert any("tfevents" in name for name in os.listdir(model_dir / "eval"))
