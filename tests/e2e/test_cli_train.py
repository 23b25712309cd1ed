"""The real CLI, in process, on the toy task: files written, read back, resumed."""

from __future__ import annotations

import json
import os

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from torchgarden.cli.main import main
from torchgarden.config import ExperimentConfig


def run(*args: str) -> int:
    return main(list(args))


def scalars(directory: str) -> dict[str, list[tuple[int, float]]]:
    acc = EventAccumulator(directory, size_guidance={"scalars": 0})
    acc.Reload()
    return {
        tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]
    }


def load_state(path: str) -> dict:
    return torch.load(os.path.join(path, "state.pt"), weights_only=True)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    model_dir = str(tmp_path_factory.mktemp("toy") / "run")
    override = tmp_path_factory.mktemp("cfg") / "override.yaml"
    override.write_text("trainer:\n  validation_interval: 50\n  summary_interval: 20\n")
    code = run(
        "train", "--experiment", "toy_regression", "--mode", "train_and_eval",
        "--model_dir", model_dir, "--config_file", str(override),
        "--params_override", "trainer.train_steps=100,task.train_data.global_batch_size=16",
    )
    assert code == 0
    return model_dir


def test_params_yaml_round_trips_to_an_equal_config(trained):
    from torchgarden.registry import get_experiment

    params = ExperimentConfig.from_yaml(os.path.join(trained, "params.yaml"))
    expected = get_experiment("toy_regression")
    expected.override(
        {"trainer": {"validation_interval": 50, "summary_interval": 20, "train_steps": 100},
         "task": {"train_data": {"global_batch_size": 16}}}
    )
    assert params == expected
    assert type(params.task).__name__ == "ToyRegressionConfig"


def test_checkpoints_are_named_by_step_and_hold_the_state(trained):
    names = sorted(n for n in os.listdir(trained) if n.startswith("ckpt-"))
    assert names == ["ckpt-100", "ckpt-50"]
    state = load_state(os.path.join(trained, "ckpt-100"))
    assert state["global_step"]["value"] == 100
    assert set(state) >= {"model", "optimizer", "rng", "train_iterator", "global_step"}
    with open(os.path.join(trained, "ckpt-100", "meta.json")) as f:
        meta = json.load(f)
    assert meta["step"] == 100
    assert meta["config"]["trainer"]["train_steps"] == 100


def test_tensorboard_summaries_are_real_event_files(trained):
    train = scalars(os.path.join(trained, "train"))
    assert {"training_loss", "learning_rate", "steps_per_second", "mean_absolute_error"} <= set(train)
    assert [s for s, _ in train["training_loss"]] == [20, 40, 60, 80, 100]
    assert all(v == pytest.approx(0.05) for _, v in train["learning_rate"])
    losses = [v for _, v in train["training_loss"]]
    assert losses[-1] < losses[0]
    validation = scalars(os.path.join(trained, "validation"))
    assert [s for s, _ in validation["validation_loss"]] == [50, 100]
    assert validation["validation_loss"][-1][1] < 0.05


def test_resume_continues_from_the_latest_checkpoint_bitwise(tmp_path, trained):
    # Train 50 steps, stop, run the same command to 100: equal to the straight run.
    model_dir = str(tmp_path / "resumed")
    common = ("--experiment", "toy_regression", "--mode", "train", "--model_dir", model_dir)
    base = "trainer.validation_interval=50,trainer.summary_interval=20," \
           "task.train_data.global_batch_size=16"
    assert run("train", *common, "--params_override", base + ",trainer.train_steps=50") == 0
    assert run("train", *common, "--params_override", base + ",trainer.train_steps=100") == 0
    resumed = load_state(os.path.join(model_dir, "ckpt-100"))
    straight = load_state(os.path.join(trained, "ckpt-100"))
    for key, value in straight["model"].items():
        assert torch.equal(value, resumed["model"][key]), key
    assert torch.equal(
        straight["optimizer"]["state"][0]["momentum_buffer"],
        resumed["optimizer"]["state"][0]["momentum_buffer"],
    )


def test_eval_mode_restores_the_latest_checkpoint(trained, capsys):
    assert run("eval", "--experiment", "toy_regression", "--model_dir", trained) == 0
    out = capsys.readouterr().out
    assert "restored model from" in out and "ckpt-100" in out
    assert "validation_loss" in out


def test_params_yaml_of_a_builtin_reads_back_in_a_fresh_process(tmp_path):
    import subprocess
    import sys

    from torchgarden.registry import get_experiment

    path = tmp_path / "params.yaml"
    get_experiment("image_classification").to_yaml(str(path))
    code = (
        "import sys\n"
        "from torchgarden.config import ExperimentConfig\n"
        "from torchgarden.registry import get_experiment\n"
        f"p = ExperimentConfig.from_yaml({str(path)!r})\n"
        "assert p == get_experiment('image_classification'), 'not equal'\n"
        "assert 'torch' not in sys.modules\n"
        "print(type(p.task).__name__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ImageClassificationConfig"
