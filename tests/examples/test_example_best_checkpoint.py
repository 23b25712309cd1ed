"""examples/best_checkpoint.py: best-checkpoint export, best_<metric>, resume, actions."""

from __future__ import annotations

import json
import os

import best_checkpoint as example
import pytest
import torch


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    return example.main(str(tmp_path_factory.mktemp("best") / "run"))


def test_eval_logs_carry_the_best_value_so_far(result):
    evaluations = result["first"]["evaluations"] + result["resumed"]["evaluations"]
    assert [step for step, _ in evaluations] == [20, 40, 60, 80, 100]
    best = float("inf")
    for _, logs in evaluations:
        best = min(best, logs["validation_loss"])
        assert logs["best_validation_loss"] == pytest.approx(best, rel=1e-7)


def test_info_json_and_the_exported_checkpoint_are_the_best_evaluation(result):
    model_dir = result["model_dir"]
    best_logs = dict(result["first"]["evaluations"])[60]
    assert result["info"]["best_ckpt_global_step"] == 60
    assert result["info"]["validation_loss"] == pytest.approx(best_logs["validation_loss"])
    assert sorted(os.listdir(os.path.join(model_dir, "best_ckpt"))) == [
        "best_ckpt-60", "info.json"]
    state = torch.load(os.path.join(model_dir, "best_ckpt", "best_ckpt-60", "state.pt"),
                       weights_only=True)
    assert state["global_step"]["value"] == 60
    weights = torch.load(os.path.join(model_dir, "best_weights.pt"), weights_only=True)
    assert all(torch.equal(weights[k], v) for k, v in state["model"].items())


def test_resume_keeps_the_best_so_far_and_ties_are_not_improvements(result):
    first, resumed = result["first"], result["resumed"]
    best = dict(first["evaluations"])[60]["validation_loss"]
    # The learning rate is 0 after step 59: the resumed evaluations tie the best value.
    assert [logs["validation_loss"] for _, logs in resumed["evaluations"]] == [best, best]
    assert first["weights_saved_at"] == [20, 40, 60]
    assert resumed["weights_saved_at"] == []
    with open(os.path.join(result["model_dir"], "best_validation_loss.json")) as f:
        assert json.load(f) == pytest.approx(best)
