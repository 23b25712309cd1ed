"""examples/trainer_without_config.py: a Trainer built from objects, run by a Controller."""

from __future__ import annotations

import os

import pytest
import torch
import trainer_without_config as example


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    model_dir = tmp_path_factory.mktemp("plain") / "run"
    return {**example.main(str(model_dir)), "model_dir": model_dir}


def test_the_line_is_learned(result):
    assert result["weight"] == pytest.approx(3.0, abs=0.05)
    assert result["bias"] == pytest.approx(-1.0, abs=0.05)
    assert result["eval_logs"]["mae"] < 0.06
    assert result["eval_logs"]["validation_loss"] < 0.005


def test_checkpoints_hold_the_trained_weights_and_resume(result):
    model_dir = result["model_dir"]
    assert sorted(os.listdir(model_dir)) == ["ckpt-100", "ckpt-200"]
    state = torch.load(model_dir / "ckpt-200" / "state.pt", weights_only=True)
    assert state["global_step"]["value"] == 200
    assert torch.equal(state["model"]["weight"], result["trainer"].unwrapped_model.weight)
    again = example.main(str(model_dir))  # Restores ckpt-200: nothing left to train.
    assert again["weight"] == result["weight"] and again["bias"] == result["bias"]
