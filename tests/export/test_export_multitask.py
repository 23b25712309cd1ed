"""``torchgarden export`` of a multi-task run: one task at a time, chosen by ``--task``."""

from __future__ import annotations

import json
import os

import pytest
import torch
from safetensors.torch import load_file

import torchgarden as tg
from torchgarden.checkpoint import read_full_state
from torchgarden.cli.main import main
from torchgarden.multitask import sub_model

_OVERRIDES = "trainer.train_steps=4,trainer.steps_per_loop=2,trainer.checkpoint_interval=4"


@pytest.fixture(scope="module")
def multitask_run(tmp_path_factory) -> str:
    model_dir = str(tmp_path_factory.mktemp("multitask") / "run")
    assert main(["train", "--experiment", "multitask_digits", "--mode", "train",
                 "--model_dir", model_dir, "--params_override", _OVERRIDES]) == 0
    return model_dir


def _sub_model_weights(model_dir: str, task_name: str) -> dict[str, torch.Tensor]:
    """The task's sub-model weights as the checkpoint holds them (``sub_tasks.<name>.``)."""
    state = read_full_state(os.path.join(model_dir, "ckpt-4"))
    prefix = f"sub_tasks.{task_name}."
    model = state["model"]
    return {key[len(prefix):]: value for key, value in model.items() if key.startswith(prefix)}


def test_each_task_exports_its_own_sub_model_under_its_name(multitask_run, capsys):
    assert main(["export", "--model_dir", multitask_run, "--format", "safetensors,pt2"]) == 0
    out = capsys.readouterr().out
    assert "exported task digits of ckpt-4" in out
    assert "tasks: digits, parity); --task NAME exports another" in out
    assert main(["export", "--model_dir", multitask_run, "--task", "parity",
                 "--format", "safetensors,pt2"]) == 0
    assert "--task NAME" not in capsys.readouterr().out
    exports = os.path.join(multitask_run, "exports", "ckpt-4")
    assert sorted(os.listdir(exports)) == ["digits", "parity"]
    for name, task in (("digits", "ImageClassificationTask"), ("parity", "DigitParityTask")):
        with open(os.path.join(exports, name, "export.json"), encoding="utf-8") as f:
            manifest = json.load(f)
        assert (manifest["task_name"], manifest["tasks"]) == (name, ["digits", "parity"])
        assert manifest["task"] == task
        assert manifest["verification"]["pt2"]["max_abs_diff"] < 1e-6
        weights = load_file(os.path.join(exports, name, "model.safetensors"))
        expected = _sub_model_weights(multitask_run, name)
        assert expected and sorted(weights) == sorted(expected)
        assert all(torch.equal(weights[key], expected[key]) for key in expected)
    # The file loads into that sub-model of a freshly built multi-task model (the shared
    # body of multitask_digits included).
    model = tg.get_task(tg.get_experiment("multitask_digits").task).build_model()
    for name in ("digits", "parity"):
        weights = load_file(os.path.join(exports, name, "model.safetensors"))
        sub_model(model, name).load_state_dict(weights)  # strict: every key, no extra


def test_an_unknown_task_is_one_line_naming_the_tasks_and_writes_nothing(multitask_run,
                                                                           capsys):
    before = sorted(os.listdir(multitask_run))
    assert main(["export", "--model_dir", multitask_run, "--task", "partiy"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("torchgarden: error: --task partiy: the run's tasks are "
                   "['digits', 'parity']. Did you mean 'parity'?")
    assert sorted(os.listdir(multitask_run)) == before


def test_task_on_a_single_task_run_is_refused(tmp_path, capsys):
    model_dir = str(tmp_path / "toy")
    assert main(["train", "--experiment", "toy_regression", "--mode", "train", "--model_dir",
                 model_dir, "--params_override", "trainer.train_steps=2"]) == 0
    capsys.readouterr()
    assert main(["export", "--model_dir", model_dir, "--task", "digits"]) == 2
    assert capsys.readouterr().err.strip() == (
        "torchgarden: error: --task digits: toy_regression is not a multi-task run; "
        "leave --task out.")
    assert not os.path.exists(os.path.join(model_dir, "exports"))
