"""examples/multitask_plain_python.py: two tasks on one backbone, built from objects."""

from __future__ import annotations

import os

import multitask_plain_python as example
import pytest
import torch


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    return example.main(str(tmp_path_factory.mktemp("multitask") / "run"))


def test_both_heads_learn_on_the_shared_backbone(result):
    assert result["eval_logs"]["digits"]["accuracy"] > 0.85
    assert result["eval_logs"]["parity"]["accuracy"] > 0.85
    steps = result["task_steps"]
    assert sum(steps.values()) == 300 and 150 < steps["digits"] < 250  # Weights 2:1.


def test_each_task_writes_its_own_summaries_and_the_checkpoint_resumes(result, read_scalars):
    model_dir = result["model_dir"]
    assert sorted(os.listdir(os.path.join(model_dir, "validation"))) == sorted(
        ["digits", "parity", *(n for n in os.listdir(os.path.join(model_dir, "validation"))
                               if n.startswith("events"))])
    digits = read_scalars(os.path.join(model_dir, "validation", "digits"))
    assert [step for step, _ in digits["accuracy"]] == [150, 300]
    state = torch.load(os.path.join(model_dir, "ckpt-300", "state.pt"), weights_only=True)
    assert state["task_steps"] == result["task_steps"]
    again = example.main(model_dir)  # Restores ckpt-300: nothing left to train.
    assert again["task_steps"] == result["task_steps"]
