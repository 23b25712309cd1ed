"""The answers a user gets at the edges of the command line (issue 22): what help lists,
where results are said to be, what a waiting evaluation says, which remedy an error gives,
and what an old public name says. The one-line refusals are rows of the adversarial
tables (tests/resilience/test_table_*.py)."""

from __future__ import annotations

import os

import pytest
import yaml

from torchgarden.cli.main import main

TOY = ["--experiment", "toy_regression"]
SHORT = "trainer.train_steps=10,trainer.steps_per_loop=5,trainer.summary_interval=5"


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> str:
    model_dir = str(tmp_path_factory.mktemp("answers") / "run")
    assert main(["train", *TOY, "--mode", "train", "--model_dir", model_dir,
                 "--params_override", SHORT]) == 0
    return model_dir


def help_of(capsys, *command: str) -> str:
    with pytest.raises(SystemExit):
        main([*command, "--help"])
    return " ".join(capsys.readouterr().out.split())


def test_each_subcommand_help_lists_only_the_modes_it_runs(capsys):
    train, evaluate, config = (help_of(capsys, c) for c in ("train", "eval", "config"))
    assert ("one of train, train_and_eval, train_and_post_eval, continuous_train_and_eval "
            "(default train_and_eval)") in train
    assert "one of eval, continuous_eval (default eval)" in evaluate
    assert "continuous_eval" not in train.replace("continuous_train_and_eval", "")
    assert "train_and_eval" not in evaluate
    assert "--mode MODE accepted and ignored" in config


@pytest.mark.parametrize("command", [(), ("train",), ("eval",), ("report",), ("export",)])
def test_verbose_has_help_text(capsys, command):
    assert "--verbose on an error, also print the traceback" in help_of(capsys, *command)


def test_config_of_a_model_dir_prints_the_runs_config(capsys, trained):
    assert main(["config", "--model_dir", trained]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"# config read from {trained}/params.yaml")
    with open(os.path.join(trained, "params.yaml")) as f:
        assert yaml.safe_load(out) == yaml.safe_load(f)


def test_eval_says_its_results_are_under_eval(capsys, trained):
    assert main(["eval", "--model_dir", trained]) == 0
    out = capsys.readouterr().out
    where = os.path.join(trained, "eval")
    assert f"Results in {os.path.abspath(where)} (TensorBoard: tensorboard --logdir {where})" in out
    assert os.path.isdir(where)


def test_continuous_eval_says_once_what_it_waits_for_and_when_it_stops(capsys, trained):
    code = main(["eval", "--mode", "continuous_eval", "--model_dir", trained,
                 "--params_override", "trainer.continuous_eval_timeout=1"])
    out = capsys.readouterr().out
    assert code == 0
    plan = [line for line in out.splitlines() if "continuous_eval:" in line]
    assert len(plan) == 1, out
    assert (f"evaluating each new checkpoint in {trained} as it appears (newest now: ckpt-10); "
            "it stops once a checkpoint at trainer.train_steps=10 was evaluated and no newer "
            "one came for trainer.continuous_eval_timeout=1 s") in plan[0]


def test_eval_with_the_runs_own_experiment_says_which_config_wins(capsys, trained):
    assert main(["eval", *TOY, "--model_dir", trained]) == 0
    out = capsys.readouterr().out
    assert (f"config read from {trained}/params.yaml, over --experiment toy_regression's "
            "defaults") in out


def test_a_checkpoint_that_does_not_fit_gives_the_cli_remedy(capsys, trained, tmp_path):
    import shutil

    model_dir = str(tmp_path / "run")
    shutil.copytree(trained, model_dir)
    code = main(["train", *TOY, "--mode", "train", "--model_dir", model_dir,
                 "--params_override", f"{SHORT},trainer.train_steps=20,task.hidden_size=4"])
    err = capsys.readouterr().err
    assert code == 2
    assert "strict=False" not in err
    assert "--params_override on the command line" in err and "task.init_checkpoint=" in err


def test_python_checkpoint_mismatch_names_the_python_remedy():
    import torch

    from torchgarden.checkpoint import Checkpoint, CheckpointMismatchError

    saved = Checkpoint(model=torch.nn.Linear(2, 2)).state_dict()
    with pytest.raises(CheckpointMismatchError, match="in Python, .*strict=False"):
        Checkpoint(model=torch.nn.Sequential(torch.nn.Linear(2, 2))).load_state_dict(saved)


def test_a_resumed_run_says_which_settings_changed(capsys, trained, tmp_path):
    import shutil

    model_dir = str(tmp_path / "run")
    shutil.copytree(trained, model_dir)
    assert main(["train", *TOY, "--mode", "train", "--model_dir", model_dir, "--params_override",
                 f"{SHORT},trainer.train_steps=15,task.train_data.global_batch_size=16"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if "resuming" in line]
    assert lines == ["torchgarden: resuming ckpt-10 under settings changed since it was "
                     "written: task.train_data.global_batch_size: 32 -> 16; "
                     "trainer.train_steps: 10 -> 15 (the model is the same; these apply from "
                     "here on)."]


def test_a_run_resumed_as_it_was_says_nothing_of_changes(capsys, trained, tmp_path):
    import shutil

    model_dir = str(tmp_path / "run")
    shutil.copytree(trained, model_dir)
    assert main(["train", *TOY, "--mode", "train", "--model_dir", model_dir,
                 "--params_override", SHORT]) == 0
    assert "resuming" not in capsys.readouterr().out
