"""Every mode of run_experiment on the toy task, through the public Python API."""

from __future__ import annotations

import os

import pytest
import torch

import torchgarden as tg


def toy(**trainer):
    params = tg.get_experiment("toy_regression")
    params.override({"trainer": {"train_steps": 40, "steps_per_loop": 10, "summary_interval": 10,
                                 "checkpoint_interval": 20, "validation_interval": 20,
                                 "continuous_eval_timeout": 1, **trainer}})
    return params


def run(mode, model_dir, params=None, **kwargs):
    params = params or toy()
    task = tg.get_task(params.task, logging_dir=str(model_dir))
    return tg.run_experiment(task=task, mode=mode, params=params, model_dir=model_dir, **kwargs)


def test_train_returns_the_model_and_no_eval_logs(tmp_path):
    model, logs = run("train", tmp_path)
    assert isinstance(model, torch.nn.Module) and logs == {}
    # run_experiment writes params.yaml itself (a launch script need not remember it).
    assert sorted(os.listdir(tmp_path)) == ["ckpt-20", "ckpt-40", "metrics.jsonl", "params.yaml",
                                         "train"]


def test_train_and_post_eval_evaluates_once_at_the_end(tmp_path):
    _, logs = run("train_and_post_eval", tmp_path)
    assert logs["validation_loss"] < 0.3 and "mean_absolute_error" in logs


def test_train_and_eval_with_run_post_eval_reuses_the_final_evaluation(tmp_path, capsys):
    _, logs = run("train_and_eval", tmp_path, run_post_eval=True)
    out = capsys.readouterr().out
    assert out.count("running complete evaluation") == 2  # At 20 and 40; no extra one.
    assert "validation_loss" in logs


def test_eval_and_continuous_eval_read_the_trained_checkpoints(tmp_path, capsys):
    run("train", tmp_path)
    capsys.readouterr()
    _, eval_logs = run("eval", tmp_path)
    _, continuous_logs = run("continuous_eval", tmp_path)
    out = capsys.readouterr().out
    assert "restored model from" in out and "ckpt-40" in out
    # Both evaluate the weights of step 40: identical numbers.
    assert continuous_logs["validation_loss"] == pytest.approx(eval_logs["validation_loss"])


def test_continuous_train_and_eval_is_implemented(tmp_path):
    _, logs = run("continuous_train_and_eval", tmp_path)
    assert "validation_loss" in logs


def test_unknown_mode_and_missing_model_dir_are_value_errors(tmp_path):
    with pytest.raises(ValueError, match="Did you mean 'train_and_eval'"):
        run("train_and_evaluate", tmp_path)
    with pytest.raises(ValueError, match="model_dir must be specified"):
        run("train", None)


def test_init_checkpoint_is_used_only_for_a_fresh_model_dir(tmp_path):
    source = tmp_path / "source"
    run("train", source)
    trained = torch.load(source / "ckpt-40" / "state.pt", weights_only=True)["model"]
    params = toy(train_steps=0)
    params.override({"task": {"init_checkpoint": str(source)}})
    model, _ = run("train", tmp_path / "fresh", params=params)
    for key, value in model.state_dict().items():
        assert torch.equal(value, trained[key])


def test_a_changed_constant_learning_rate_applies_after_resume(tmp_path):
    run("train", tmp_path, params=toy(train_steps=20))
    frozen = toy(train_steps=40)
    frozen.override("trainer.optimizer_config.learning_rate.constant.learning_rate=0.0,"
                    "trainer.optimizer_config.optimizer.sgd.momentum=0.0")
    model, _ = run("train", tmp_path, params=frozen)
    saved = torch.load(tmp_path / "ckpt-20" / "state.pt", weights_only=True)["model"]
    for key, value in model.state_dict().items():
        assert torch.equal(value, saved[key]), key


def test_what_building_draws_from_random_does_not_reach_the_training_stream(tmp_path):
    """`rich` draws from `random` when first imported (scikit-learn imports it), so the
    first run on a machine and a later one built with different draws; a fresh start
    seeds the host RNGs again once everything is built."""
    import random

    class DrawingTask(type(tg.get_task(toy().task))):
        def build_inputs(self, params, input_context=None):
            random.getrandbits(24)  # What `import rich` does.
            return super().build_inputs(params, input_context)

    params = toy(train_steps=10, steps_per_loop=10)
    params.override({"runtime": {"seed": 11}})
    seen = []
    task = DrawingTask(params.task, logging_dir=str(tmp_path))
    tg.run_experiment(task=task, mode="train", params=params, model_dir=tmp_path,
                      train_actions=[lambda logs: seen.append(random.getstate())])
    random.seed(11)
    assert seen == [random.getstate()]
