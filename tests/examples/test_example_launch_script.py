"""examples/custom_launch_script.py and examples/my_project: the launcher guide's recipe."""

from __future__ import annotations

import os
import subprocess
import sys

import custom_launch_script
import pytest

import torchgarden as tg
from torchgarden.cli.main import main as cli_main


def flags(root):
    config_file = root / "override.yaml"
    config_file.write_text("trainer:\n  validation_interval: 15\n  checkpoint_interval: 15\n")
    return ["--experiment", "my_project/regression", "--mode", "train_and_eval",
            "--model_dir", str(root / "run"), "--config_file", str(config_file),
            "--params_override", "trainer.train_steps=30,task.hidden_size=8"]


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    root = tmp_path_factory.mktemp("launch")
    eval_logs = custom_launch_script.main(flags(root))
    return eval_logs, root / "run"


def test_launch_script_is_at_most_30_lines(examples_dir):
    lines = (examples_dir / "custom_launch_script.py").read_text().splitlines()
    assert len(lines) <= 30


def test_launch_script_trains_with_the_standard_flags(launched, read_scalars):
    eval_logs, model_dir = launched
    assert set(eval_logs) == {"mean_absolute_error", "validation_loss"}
    assert sorted(n for n in os.listdir(model_dir) if n.startswith("ckpt-")) == [
        "ckpt-15", "ckpt-30"]
    train = read_scalars(model_dir / "train")
    # The project's Trainer subclass adds the global step to every loop's logs; loops end
    # at 10, 15 (eval), 20 and 30, and train summaries land on multiples of 10.
    assert train["global_step"] == [(s, float(s)) for s in (10, 20, 30)]
    validation = read_scalars(model_dir / "validation")
    assert [s for s, _ in validation["validation_loss"]] == [15, 30]
    assert validation["validation_loss"][-1][1] == pytest.approx(
        float(eval_logs["validation_loss"]), rel=1e-6)


def test_launch_script_saves_the_resolved_config(launched):
    _, model_dir = launched
    saved = tg.ExperimentConfig.from_yaml(model_dir / "params.yaml")
    expected = tg.get_experiment("my_project/regression").override({
        "trainer": {"validation_interval": 15, "checkpoint_interval": 15, "train_steps": 30},
        "task": {"hidden_size": 8}})
    assert saved == expected
    assert type(saved.task).__name__ == "ProjectRegressionConfig"


def test_launch_script_requires_mode_and_model_dir(capsys):
    with pytest.raises(SystemExit) as exit_info:
        custom_launch_script.main(["--experiment", "my_project/regression"])
    assert exit_info.value.code == 2
    assert "--experiment, --mode and --model_dir are required" in capsys.readouterr().err


def test_the_project_registers_for_the_standard_cli_too(tmp_path, read_scalars):
    code = cli_main([
        "train", "--import", "my_project.registry_imports", "--experiment",
        "my_project/regression", "--mode", "train", "--model_dir", str(tmp_path / "cli"),
        "--params_override", "trainer.train_steps=10",
    ])
    assert code == 0
    assert [s for s, _ in read_scalars(tmp_path / "cli" / "train")["training_loss"]] == [10]


@pytest.mark.slow
def test_launch_script_runs_as_a_fresh_process(examples_dir, tmp_path, read_scalars):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    completed = subprocess.run(
        [sys.executable, str(examples_dir / "custom_launch_script.py"), *flags(tmp_path)],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert completed.returncode == 0, completed.stderr
    assert "eval | step:     30" in completed.stdout
    assert "'validation_loss':" in completed.stdout.splitlines()[-1]
    assert os.path.isfile(tmp_path / "run" / "params.yaml")
    train = read_scalars(tmp_path / "run" / "train")
    assert [s for s, _ in train["global_step"]] == [10, 20, 30]
