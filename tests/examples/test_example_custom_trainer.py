"""examples/custom_trainer.py: every Trainer hook overridden, run by run_experiment."""

from __future__ import annotations

import os

import custom_trainer as example
import pytest
import torch

from torchgarden import optim


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    return example.main(str(tmp_path_factory.mktemp("trainer") / "run"))


def test_train_loop_end_adds_learning_rate_and_optimizer_iterations(result):
    steps = [step for step, _ in result["train_logs"]]
    assert steps == [20, 30, 40, 60]  # loops of 20, cut at the eval boundary (30)
    schedule = optim.CosineDecay(initial_learning_rate=0.05, decay_steps=60)
    for step, logs in result["train_logs"]:
        assert logs["optimizer_iterations"] == step
        assert logs["examples_seen"] == 32 * step
        assert logs["learning_rate"] == pytest.approx(float(schedule(step)), abs=1e-9)
    losses = [float(logs["training_loss"]) for _, logs in result["train_logs"]]
    assert losses[-1] < losses[0] / 10


def test_passthrough_logs_reach_aggregate_logs_and_eval_end_adds_its_keys(result):
    assert [step for step, _ in result["eval_logs"]] == [30, 60]
    for step, logs in result["eval_logs"]:
        assert logs["num_eval_examples"] == 256  # the toy validation split
        assert logs["eval_at_optimizer_iteration"] == step
        assert "validation_loss" in logs


def test_custom_train_step_applies_the_scheduled_learning_rate(result):
    trainer = result["trainer"]
    assert isinstance(trainer, example.CustomTrainer)
    # The last step ran at global step 59: its learning rate is the schedule's value there.
    assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(trainer.learning_rate(59))


def test_custom_counters_resume_from_the_checkpoint(result, tmp_path):
    resumed = example.main(result["model_dir"], train_steps=80)
    last_step, last_logs = resumed["train_logs"][-1]
    assert last_step == 80
    assert last_logs["optimizer_iterations"] == 80
    assert last_logs["examples_seen"] == 32 * 80
    state = torch.load(os.path.join(result["model_dir"], "ckpt-80", "state.pt"),
                       weights_only=True)
    assert state["custom_counters"] == {"optimizer_iterations": 80, "examples_seen": 2560}
